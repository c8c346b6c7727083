"""Hostile inputs (issue 7, item 1): malformed and adversarial datasets and argument sets, made at test time by
the seeded generator ``tests/hostile/make_hostile.py`` and run through the real command line.

Every error case asserts: non-zero exit; a message of at most three lines, starting ``Error:``, naming the
file / row / column / option / path the generator expects; no traceback (and no Python warning, which a
terminal would print as extra lines); nothing new in the case's folder (no output, report or ``.rladv-*``
temporary file) and every file there byte-identical afterwards. ``accepted`` cases (integer scores, bool
masks, ...) must instead succeed. Cases showing a known rladv bug are ``xfail(strict=True)`` with the reason.

All cases run in-process through ``typer.testing.CliRunner`` (torch is imported once); a sample, one per
category, also runs as a real ``rladv`` subprocess, where a traceback or a warning would reach stderr.
"""
from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from conftest import HOSTILE, rladv, rladv_command


def _load_generator():
    spec = importlib.util.spec_from_file_location("make_hostile", HOSTILE / "make_hostile.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("make_hostile", module)
    spec.loader.exec_module(module)
    return sys.modules["make_hostile"]


make_hostile = _load_generator()
CONTRACT_COLUMNS = ("token_level_rewards", "response_mask", "loss_mask", "advantages", "returns")


def _plan() -> list:
    """The case list (ids, categories, xfail reasons) for parametrisation; the files are made again, for the
    tests, by the ``hostile`` fixture in pytest's tmp_path."""
    with tempfile.TemporaryDirectory() as d:
        return make_hostile.build_cases(Path(d))


PLAN = _plan()
ERRORS = [c for c in PLAN if c.expect == "error"]
ACCEPTED = [c for c in PLAN if c.expect == "ok"]


def _params(cases):
    for c in cases:
        marks = [pytest.mark.xfail(strict=True, reason=c.xfail)] if c.xfail else []
        yield pytest.param(c.id, id=c.id, marks=marks)


@pytest.fixture(scope="module")
def hostile(tmp_path_factory) -> dict:
    cases = make_hostile.build_cases(tmp_path_factory.mktemp("hostile"))
    return {c.id: c for c in cases}


# ------------------------------------------------------------------------------------------- helpers
def snapshot(folder: Path) -> dict[str, object]:
    """Every entry under ``folder`` (recursively, links not followed): files by content, folders and links by kind."""
    out: dict[str, object] = {}
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            p = Path(root) / name
            rel = str(p.relative_to(folder))
            if p.is_symlink():
                out[rel] = ("link", os.readlink(p))
            elif p.is_dir():
                out[rel] = "dir"
            else:
                out[rel] = p.read_bytes()
    return out


def check_message(case, exit_code: int, stdout: str, stderr: str, crashed: str | None = None) -> str:
    """The error contract for one case; returns the message."""
    assert crashed is None, f"uncaught exception: {crashed}\n{stdout}{stderr}"
    assert exit_code != 0, f"exit 0 for a hostile case\n{stdout}{stderr}"
    assert "Traceback" not in stdout + stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert 1 <= len(lines) <= 3, f"expected a message of 1-3 lines on stderr, got:\n{stderr}"
    assert lines[0].startswith("Error:"), lines[0]
    assert not stdout.strip(), f"stdout should stay empty on an error: {stdout!r}"
    message = " ".join(lines)
    for name in case.named:
        assert name in message, f"{name!r} not named in: {message}"
    if case.row is not None:
        assert re.findall(r"\brow (\d+)\b", message) == [str(case.row)], message
    if case.column is not None:
        assert f"column {case.column}" in message, message
    elif case.row is not None:
        assert "column " in message, message
    return message


def check_untouched(case, before: dict) -> None:
    after = snapshot(case.dir)
    new = sorted(set(after) - set(before))
    assert not new, f"left behind: {new}"
    assert not [k for k in after if Path(k).name.startswith(".rladv-")]
    assert set(after) == set(before), f"removed: {sorted(set(before) - set(after))}"
    changed = [k for k in before if after[k] != before[k]]
    assert not changed, f"inputs changed: {changed}"


# ----------------------------------------------------------------------------------------------- tests
def test_generator_is_seeded_and_covers_the_issue(tmp_path):
    """Same seed, same bytes; at least 40 hostile cases over every category the issue lists."""
    a = make_hostile.build_cases(tmp_path / "a")
    b = make_hostile.build_cases(tmp_path / "b")
    assert [c.id for c in a] == [c.id for c in b]
    for ca, cb in zip(a, b):
        sa, sb = snapshot(ca.dir), snapshot(cb.dir)
        assert sa.keys() == sb.keys() and all(sa[k] == sb[k] for k in sa if not isinstance(sa[k], tuple)), ca.id
    other = make_hostile.build_cases(tmp_path / "c", seed=make_hostile.SEED + 1)
    assert any(snapshot(x.dir) != snapshot(y.dir) for x, y in zip(a, other) if x.category == "contract")
    errors = [c for c in a if c.expect == "error"]
    assert len(errors) >= 40
    assert {c.category for c in errors} >= {"contract", "missing", "types", "empty", "files", "schemas", "options",
                                            "output", "raises"}
    ids = {c.id for c in a}
    for needed in ("string-score", "nested-rm_scores", "ok-int-score", "null-response_mask", "null-uid", "zero-rows",
                   "empty-row", "truncated-half", "text-file", "folder-without-parquet", "schema-type-differs",
                   "gamma-above-1", "lam-negative", "chunk-rows-negative", "estimator-unknown", "kl-penalty-unknown",
                   "missing-values-gae", "missing-reward_baselines-remax", "missing-sum_pi_squared-otb",
                   "missing-reward-component-gdpo", "missing-rollout_log_probs-rs", "o-is-input", "o-missing-folder",
                   "o-under-regular-file", "whiten-one-token-gae", "whiten-one-token-reinforce_plus_plus",
                   "whiten-one-token-reinforce_plus_plus_baseline", "whiten-one-token-gdpo", "grpo_passk-singleton",
                   "rs-k1-lo-above-hi"):
        assert needed in ids, needed


@pytest.mark.parametrize("case_id", list(_params(ERRORS)))
def test_hostile_case_fails_cleanly(hostile, case_id):
    case = hostile[case_id]
    before = snapshot(case.dir)
    result = rladv(*case.args)
    crashed = None
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        crashed = repr(result.exception)
    try:
        check_message(case, result.exit_code, result.stdout, result.stderr, crashed)
        assert not result.py_warnings, f"Python warnings (extra stderr lines on a terminal): {result.py_warnings}"
    finally:
        check_untouched(case, before)


@pytest.mark.parametrize("case_id", list(_params(ACCEPTED)))
def test_accepted_input_is_computed(hostile, case_id):
    case = hostile[case_id]
    before = snapshot(case.dir)
    result = rladv(*case.args)
    assert result.exit_code == 0, result.output
    assert not result.py_warnings, result.py_warnings
    out = pq.read_table(case.output)
    inp = pq.read_table(case.dir / "data.parquet")
    assert out.num_rows == inp.num_rows
    for name in CONTRACT_COLUMNS:
        assert name in out.column_names, name
    for name in inp.column_names:
        if name != "response_mask":
            assert out[name].equals(inp[name]), name
    lengths = [len(m) for m in inp["response_mask"].to_pylist()]
    mask = np.concatenate([np.asarray(r) for r in out["response_mask"].to_pylist()])
    for name in ("advantages", "returns", "token_level_rewards"):
        assert [len(r) for r in out[name].to_pylist()] == lengths, name
        v = np.concatenate([np.asarray(r, dtype=np.float32) for r in out[name].to_pylist()])
        assert np.all(np.isfinite(v)), name
    adv = np.concatenate([np.asarray(r, dtype=np.float32) for r in out["advantages"].to_pylist()])
    assert np.all(adv[mask == 0] == 0)
    after = snapshot(case.dir)
    assert sorted(set(after) - set(before)) == sorted([case.output.name, "report.json"])
    assert all(after[k] == v for k, v in before.items())


# a sample of the categories, through the installed console script (each run imports torch: kept small)
SUBPROCESS_SAMPLE = ["nan-rm_scores", "string-score", "truncated-half", "gamma-above-1", "o-under-regular-file",
                     "grpo_passk-singleton"]


@pytest.mark.slow  # rladv subprocesses
def test_sample_as_subprocess(tmp_path):
    cases = {c.id: c for c in make_hostile.build_cases(tmp_path)}
    sample = [cases[i] for i in SUBPROCESS_SAMPLE]
    before = {c.id: snapshot(c.dir) for c in sample}
    env = {**os.environ, "PYTHONWARNINGS": "default", "COLUMNS": "80"}

    def run_case(case):
        return subprocess.run(rladv_command() + case.args, capture_output=True, text=True, timeout=120, env=env)

    with ThreadPoolExecutor(max_workers=3) as pool:
        results = list(pool.map(run_case, sample))
    for case, p in zip(sample, results):
        check_message(case, p.returncode, p.stdout, p.stderr)
        assert p.returncode == 2, (case.id, p.returncode)
        check_untouched(case, before[case.id])
