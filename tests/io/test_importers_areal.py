"""AReaL's trajectory dump in (docs/dumps.md "Trainers' logs"): ``rollout/{version}/{task_id}.jsonl`` written by
AReaL's own ``WorkflowExecutor._dump_trajectory`` (tests/data/make_areal_rollouts.py), converted and computed at
sequence level; and every format's sample log (sample_data/logs) converts, inspects and computes."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from conftest import DATA, SAMPLES, assert_generator_writes_the_fixtures, rladv

AREAL = DATA / "areal_rollouts"  # the experiment's log folder: rollout/{version}/{task_id}.jsonl
COLUMNS = ("uid, step, score, task_id, sample_idx, seqlen, prompt_len, head_version, tail_version, reward, prompt, "
           "completion")


def lines(version: int, task: int) -> list[dict]:
    return [json.loads(x) for x in (AREAL / "rollout" / str(version) / f"{task}.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("source", [AREAL, AREAL / "rollout", str(AREAL / "rollout" / "*" / "*.jsonl")])
def test_an_areal_dump_converts_by_version_and_task(tmp_path, source):
    out = tmp_path / "a.parquet"
    res = rladv("convert", "--from", "areal", source, "-o", out)
    assert res.exit_code == 0, res.output
    first, second = res.output.splitlines()
    assert first == f"{out}: 18 rows from 5 file(s); columns {COLUMNS}"
    assert second.startswith("  uid from task_id (a BLAKE2b digest of tail_version, task_id and the prompt text")
    assert "sequence level" in second and "the dump holds no advantages and no log-probs" in second
    t = pq.read_table(out)
    assert t["step"].to_pylist() == [1] * 8 + [2] * 10 and t["task_id"].to_pylist()[::4][:2] == [0, 1]
    rows = t.to_pylist()
    assert {k: v for k, v in rows[0].items() if k not in ("uid", "step", "score")} == lines(1, 0)[0]
    assert rows[0]["score"] == lines(1, 0)[0]["reward"]
    uids = t["uid"].to_pylist()
    assert [len(set(uids[a:b])) for a, b in ((0, 4), (4, 8), (8, 11), (11, 14), (14, 18))] == [1] * 5
    assert len(set(uids)) == 5
    # AReaL leaves out a sample that returned None (task 2) and one with no generated token (task 3)
    assert [r["sample_idx"] for r in rows[8:14]] == [0, 1, 2, 0, 2, 3]


def test_rladv_computes_and_inspects_a_converted_areal_dump(tmp_path):
    out, report = tmp_path / "a.parquet", tmp_path / "r.json"
    assert rladv("convert", "--from", "areal", AREAL, "-o", out).exit_code == 0
    res = rladv("compute", out, "--estimator", "grpo", "--batch-key", "step", "-o", tmp_path / "c.parquet", "-q",
                "--report", report)
    assert res.exit_code == 0, res.output
    r = json.loads(report.read_text())
    assert r["inputs"]["sequence_level"] is True and r["replay"] is None
    adv = [a[0] for a in pq.read_table(tmp_path / "c.parquet")["advantages"].to_pylist()]
    z = 0.5 / ((1 / 3) ** 0.5 + 1e-6)  # task 0: rewards 1, 0, 1, 0
    assert adv[:4] == pytest.approx([z, -z, z, -z], abs=1e-6) and adv[4:8] == [0.0] * 4  # task 1: all equal
    res = rladv("inspect", out, "--json", "--estimator", "grpo", "--batch-key", "step")
    assert res.exit_code == 0, res.output
    seen = json.loads(res.output)
    assert seen["rows"] == 18 and seen["invalid_rows"] == 0 and seen["verdict"]["groups"] == 5


def _entry(**change) -> str:
    entry = {**lines(1, 0)[0], **change}
    return json.dumps({k: v for k, v in entry.items() if v is not None}) + "\n"


@pytest.mark.parametrize("text, message", [
    (_entry() + _entry()[:40], "line 2: not JSON (the file ends inside it: truncated?)"),
    (_entry() + _entry(reward=None), "line 2: no reward (AReaL's WorkflowExecutor._dump_trajectory writes task_id"),
    (_entry(reward="1.0"), "line 1: reward is '1.0'; a number is needed"),
    (_entry(tail_version=1.5), "line 1: tail_version is 1.5; AReaL writes an integer"),
    (_entry(prompt=[1, 2]), "line 1: prompt is not text (AReaL writes the decoded tokens)"),
    (_entry() + _entry(seqlen=-9), "line 2: seqlen is -9; AReaL writes at least 1"),
    (_entry(prompt_len=-1), "line 1: prompt_len is -1; AReaL writes at least 0"),
    (_entry(head_version=-2), "line 1: head_version is -2; AReaL writes at least -1"),
    (_entry(prompt_len=9, seqlen=9), "line 1: prompt_len 9 leaves no completion token of seqlen 9 (AReaL dumps"),
])
def test_bad_areal_lines_are_one_line_errors_and_nothing_is_written(tmp_path, text, message):
    folder = tmp_path / "rollout"
    (folder / "1").mkdir(parents=True)
    shutil.copy(AREAL / "rollout" / "1" / "0.jsonl", folder / "1" / "0.jsonl")
    (folder / "1" / "1.jsonl").write_text(text)
    out = tmp_path / "r.parquet"
    res = rladv("convert", "--from", "areal", folder, "-o", out)
    assert res.exit_code == 2 and res.output.startswith(f"Error: {folder / '1' / '1.jsonl'}: {message}"), res.output
    assert len(res.output.strip().splitlines()) == 1 and not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rollout"]


@pytest.mark.slow
def test_the_areal_fixtures_are_what_areal_writes(tmp_path):
    """tests/data/make_areal_rollouts.py, run with AReaL 1.0.4's source (AREAL_SRC, see the script), writes exactly
    the committed files."""
    src = os.environ.get("AREAL_SRC")
    if not src or not (Path(src) / "areal" / "infra" / "workflow_executor.py").is_file():
        pytest.skip("AREAL_SRC is not AReaL's source (tests/data/make_areal_rollouts.py says how)")
    assert len(assert_generator_writes_the_fixtures("make_areal_rollouts.py", tmp_path, "*.jsonl")) == 5


# ------------------------------------------------------------------------------------------- sample logs
LOGS = SAMPLES / "logs"
# per format: rows, and the compute options its docs row suggests (with the replay it gives)
SAMPLE_RUNS = {
    "verl-jsonl": (12, ["--estimator", "grpo"], None),
    "nemo-rl": (12, ["--convention", "nemo_rl", "--estimator", "grpo"], True),
    "trl": (16, ["--convention", "trl", "--estimator", "grpo"], True),
    "slime": (8, ["--estimator", "grpo"], None),
    "prime-rl": (6, ["--estimator", "grpo", "--no-norm-adv-by-std"], True),
    "areal": (18, ["--estimator", "grpo", "--batch-key", "step"], None),
}


def test_the_sample_logs_are_what_make_logs_copies(tmp_path):
    subprocess.run([sys.executable, str(SAMPLES / "make_logs.py"), str(tmp_path)], check=True)
    made = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    assert made == sorted(p.relative_to(LOGS) for p in LOGS.rglob("*") if p.is_file())
    assert {p.parts[0] for p in made} == set(SAMPLE_RUNS)
    for name in made:
        assert (tmp_path / name).read_bytes() == (LOGS / name).read_bytes(), name


@pytest.mark.parametrize("fmt", list(SAMPLE_RUNS))
def test_every_sample_log_converts_inspects_and_computes(tmp_path, fmt):
    rows, options, agrees = SAMPLE_RUNS[fmt]
    out, report = tmp_path / f"{fmt}.parquet", tmp_path / "r.json"
    res = rladv("convert", "--from", fmt, LOGS / fmt, "-o", out)
    assert res.exit_code == 0 and f"{rows} rows from" in res.output, res.output
    checklist = [o for i, o in enumerate(options) if "--convention" not in options[max(i - 1, 0):i + 1]]
    res = rladv("inspect", out, "--json", *checklist)  # the checklist reads verl's rules
    assert res.exit_code == 0 and json.loads(res.output)["invalid_rows"] == 0, res.output
    res = rladv("compute", out, *options, "-o", tmp_path / "c.parquet", "-q", "--report", report)
    assert res.exit_code == 0, res.output
    replay = json.loads(report.read_text())["replay"]
    assert (None if replay is None else replay["agree"]) == agrees, replay
