"""What the test modules share: the project's paths, Arrow tables and Parquet files written by column name,
the in-process command line, the ``rladv`` executable, verl's golden cases, and the command line's error
checks and dataset mutations.

pytest loads this file before any test module, with this folder (``tests/``) on ``sys.path`` (in its default
import mode, and explicitly below), so a test module in any sub-folder imports these helpers and the shared
modules by name: ``from conftest import write, rladv``, ``import reference``, ``import strategies``.
Keep it the only ``conftest.py`` of the suite: pytest imports every conftest under the one module name
``conftest``, so a second one would take this one's place for the modules imported after it.
"""
from __future__ import annotations

import functools
import json
import re
import shutil
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Callable, Mapping, Optional

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from typer.testing import CliRunner

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
SAMPLES = ROOT / "sample_data"  # the committed sample datasets (sample_data/make_samples.py)
GOLDEN = TESTS / "golden"  # verl 0.9.1's own outputs (tests/golden/README.md)
DATA = TESTS / "data"  # verl trainer YAMLs
HOSTILE = TESTS / "hostile"  # the hostile-input generator

if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

F32 = pa.list_(pa.float32())
I8 = pa.list_(pa.int8())

MASKS = ("response_mask", "attention_mask", "loss_mask")
STRINGS = ("uid", "note", "session_id")


# ------------------------------------------------------------------------------------ tables and files
def column_type(name: str) -> pa.DataType:
    """The Arrow type ``table``/``write`` give a column by its name: masks list<int8>, ``uid``/``note``/
    ``session_id`` string, ``score`` float32, ``step`` int64, ``responses`` list<int32>, any other column
    list<float32>."""
    if name in MASKS:
        return I8
    if name in STRINGS:
        return pa.string()
    return {"score": pa.float32(), "step": pa.int64(), "responses": pa.list_(pa.int32())}.get(name, F32)


def table(columns: Optional[Mapping[str, list]] = None, types: Optional[Mapping[str, pa.DataType]] = None,
          **named: list) -> pa.Table:
    """An Arrow table of ``columns`` (name -> Python rows; or the same as keywords), in their order, each typed
    by ``types`` or else by ``column_type``."""
    columns = {**(columns or {}), **named}
    types = dict(types or {})
    return pa.table({name: pa.array(rows, type=types.get(name) or column_type(name)) for name, rows in columns.items()})


def write(path: Path, columns: Optional[Mapping[str, list]] = None, types: Optional[Mapping[str, pa.DataType]] = None,
          **named: list) -> Path:
    """``table(columns, types=types, **named)`` written as Parquet at ``path``; returns ``path``."""
    pq.write_table(table(columns, types=types, **named), path)
    return path


def binary_scores(t: pa.Table) -> pa.Table:
    """``t`` with one 0/1 outcome per row, for estimators of binary rewards: 1 where the row's ``rm_scores`` (or
    ``score``) total is positive, placed at the row's last position, 0 everywhere else."""
    if "score" in t.column_names and "rm_scores" not in t.column_names:
        score = np.asarray(t["score"].to_pylist(), dtype=np.float64)
        return t.set_column(t.column_names.index("score"), "score", pa.array((score > 0).astype(np.float32)))
    rows = [[0.0] * (len(r) - 1) + [float(sum(r) > 0)] for r in t["rm_scores"].to_pylist()]
    return t.set_column(t.column_names.index("rm_scores"), "rm_scores", pa.array(rows, F32))


def ragged_rollouts(rows: int, seed: int, max_len: int = 40, uid: str = "s{seed}p{group}") -> pa.Table:
    """``rows`` seeded rows of 1 to ``max_len - 1`` tokens: ``uid`` (groups of 4, named by the pattern),
    ``response_mask`` (a fifth 0), ``rm_scores`` and ``values`` (normal), as a file of rollouts holds them."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, max_len, rows)
    offsets = pa.array(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32))
    n = int(lengths.sum())
    lst = lambda v: pa.ListArray.from_arrays(offsets, pa.array(v))  # noqa: E731
    return pa.table({
        "uid": [uid.format(seed=seed, group=i // 4) for i in range(rows)],
        "response_mask": lst((rng.random(n) > 0.2).astype(np.int8)),
        "rm_scores": lst(rng.normal(size=n).astype(np.float32)),
        "values": lst(rng.normal(size=n).astype(np.float32)),
    })


def read(path: Path) -> pa.Table:
    return pq.read_table(path)


def copy_sample(folder: Path, name: str) -> Path:
    """``sample_data/name`` copied into ``folder`` (a run may write beside it)."""
    dst = folder / name
    shutil.copyfile(SAMPLES / name, dst)
    return dst


def run(data: pa.Table, estimator: str, *, one_chunk: bool = False, **settings):
    """``rladv_cli.compute(data, estimator=estimator, **settings)`` -> (output table, report), on the CPU unless
    ``device`` is given; ``one_chunk``: the whole table as one chunk (``chunk_rows`` its rows, unless given)."""
    import rladv_cli

    settings.setdefault("device", "cpu")
    if one_chunk:
        settings.setdefault("chunk_rows", max(data.num_rows, 1))
    return rladv_cli.compute(data, estimator=estimator, **settings)


@functools.lru_cache(maxsize=None)
def _cases() -> tuple[dict, ...]:
    return tuple(json.loads((GOLDEN / "cases.json").read_text())["cases"])


def golden_cases() -> dict[str, dict]:
    """verl's golden cases (tests/golden/cases.json) by the stem of their expected file, in the file's order."""
    return {Path(c["expected"]).stem: c for c in _cases()}


def case_estimator(case: dict) -> str:
    """The estimator a golden case runs (its ``--estimator`` argument)."""
    args = case["rladv_args"]
    return args[args.index("--estimator") + 1]


# ---------------------------------------------------------------------------------- the command line
runner = CliRunner()


def rladv(*args: object, **invoke):
    """Invoke the CLI in-process (``invoke``: CliRunner's keywords, e.g. ``env``) as the executable runs it:
    ``compute``'s input file prefetched first where it would be (``io.prefetch``); arguments are stringified
    (paths, numbers). Python warnings raised during the run (which a real terminal would show as extra stderr
    lines) are kept in ``result.py_warnings``."""
    from rladv_cli.cli import app
    from rladv_cli.io import prefetch

    argv = [str(a) for a in args]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        prefetch.start(argv)
        try:
            result = runner.invoke(app, argv, **invoke)
        finally:
            prefetch.claim(())  # dropped, where the run did not take it
    result.py_warnings = [f"{w.category.__name__}: {w.message}" for w in caught]
    return result


def rladv_command() -> list[str]:
    """The ``rladv`` executable of this interpreter (the console script, else ``python -m rladv_cli``)."""
    script = Path(sys.executable).parent / "rladv"
    return [str(script)] if script.exists() else [sys.executable, "-m", "rladv_cli"]


# SIGINT, SIGTERM and SIGHUP as a terminal hands them to a command: to their default action, unblocked
_AS_FROM_A_TERMINAL = (
    "import os, signal, sys\n"
    "for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):\n"
    "    signal.signal(sig, signal.SIG_DFL)\n"
    "signal.pthread_sigmask(signal.SIG_UNBLOCK, (signal.SIGINT, signal.SIGTERM, signal.SIGHUP))\n"
    "os.execv(sys.argv[1], sys.argv[1:])\n"
)


def as_from_a_terminal(command: list[str]) -> list[str]:
    """``command`` started as from a terminal, whatever started pytest: an ignored signal disposition and a
    blocked signal survive ``exec``, and a background job of a script (``pytest &``) or a supervisor may hand
    pytest (and so every subprocess) an ignored or blocked SIGINT, which rladv rightly keeps (``nohup``). Tests
    that signal a subprocess and expect rladv's own handling start it through this (one more ``exec``)."""
    executable = shutil.which(command[0]) or command[0]
    return [sys.executable, "-c", _AS_FROM_A_TERMINAL, executable, *command[1:]]


# ------------------------------------------------------------------ the command line's error contract
def assert_generator_writes_the_fixtures(script: str, out: Path, pattern: str) -> list[Path]:
    """Run the fixture generator ``tests/data/SCRIPT`` (with the trainer's source its docstring names) writing into
    ``out`` instead of its committed folder (its ``HERE``), and check that it writes exactly the committed files
    matching ``pattern`` (searched recursively), byte for byte; their paths relative to the folder."""
    text = (DATA / script).read_text()
    here = re.search(r'Path\(__file__\)\.resolve\(\)\.parent / "([^"]+)"', text)
    committed = DATA / here.group(1)
    subprocess.run([sys.executable, "-c", text.replace(here.group(0), f"Path({str(out)!r})")], check=True,
                   capture_output=True)
    made = sorted(q.relative_to(out) for q in out.rglob(pattern))
    assert made == sorted(q.relative_to(committed) for q in committed.rglob(pattern))
    for name in made:
        assert (out / name).read_bytes() == (committed / name).read_bytes(), name
    return made


def listing(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def assert_one_line_error(result, *names: str, row: Optional[int] = None, column: Optional[str] = None) -> str:
    """Non-zero exit, a single ``Error:`` line that mentions ``names`` (and row/column), no traceback."""
    out = result.output
    assert result.exit_code != 0, out
    assert "Traceback" not in out
    # a warning would print extra lines on a real terminal's stderr
    assert not getattr(result, "py_warnings", []), result.py_warnings
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    lines = [line for line in out.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one line, got:\n{out}"
    line = lines[0]
    assert line.startswith("Error:"), line
    for name in names:
        assert name in line, f"{name!r} not named in: {line}"
    if row is not None:
        assert re.findall(r"\brow (\d+)\b", line) == [str(row)], line
    if column is not None:
        assert f"column {column}" in line, line
    return line


# rladv's columns of an output, after the input's (response_mask, an input column, is rewritten in place)
ADDED = ["token_level_rewards", "loss_mask", "advantages", "returns"]


def check_output(inp: Path, out: Path) -> pa.Table:
    """docs/contract.md §3: same rows, same order, input columns first and unchanged, rladv's columns typed."""
    src, dst = read(inp), read(out)
    assert dst.num_rows == src.num_rows
    expected_names = src.column_names + [c for c in ADDED if c not in src.column_names]
    assert dst.column_names == expected_names
    for name in src.column_names:
        if name == "response_mask":  # rewritten as int8 (no rejection here, so same values)
            assert dst[name].to_pylist() == src[name].to_pylist()
        else:
            assert dst[name].equals(src[name]), name
    assert dst.schema.field("response_mask").type == I8
    assert dst.schema.field("loss_mask").type == I8
    for name in ("token_level_rewards", "advantages", "returns"):
        assert dst.schema.field(name).type == F32, name
    m = np.concatenate([np.asarray(r) for r in dst["response_mask"].to_pylist()])
    for name in ("advantages", "returns"):
        v = np.concatenate([np.asarray(r, dtype=np.float32) for r in dst[name].to_pylist()])
        assert v.shape == m.shape
        assert np.all(v[m == 0] == 0), name
        assert np.all(np.isfinite(v)), name
    for name in ADDED:
        lens = [len(r) for r in dst[name].to_pylist()]
        assert lens == [len(r) for r in src["response_mask"].to_pylist()], name
    return dst


def assert_untouched(folder: Path, before: list[str], inputs: dict[Path, bytes]) -> None:
    """Nothing new in ``folder`` (no output, no report, no ``.rladv-*`` temporary) and inputs byte-identical."""
    assert listing(folder) == before
    assert not list(folder.glob(".rladv-*"))
    for path, data in inputs.items():
        assert path.read_bytes() == data


# ------------------------------------------------------------------ a valid dataset and its mutations
def good_columns(n: int = 4) -> dict:
    """A valid dataset with every column the command-line checks need: two uid groups of two, ragged rows."""
    lengths = [3, 4, 2, 5, 3, 4, 2, 5][:n]
    return {
        "uid": [f"u{i // 2}" for i in range(n)],
        "response_mask": [[1] * L if i % 2 == 0 else [1, 0] + [1] * (L - 2) for i, L in enumerate(lengths)],
        "rm_scores": [[0.0] * (L - 1) + [float(i % 3)] for i, L in enumerate(lengths)],
        "values": [[0.1 * (t + 1) for t in range(L)] for L in lengths],
        "old_log_probs": [[-0.5] * L for L in lengths],
        "ref_log_prob": [[-0.4] * L for L in lengths],
        "note": [f"row-{i}" for i in range(n)],
    }


Mutation = Callable[[dict], None]


def mutated(cols: dict, mutate: Mutation) -> dict:
    """A copy of ``cols`` (rows copied too) changed by ``mutate``."""
    cols = {k: [list(v) if isinstance(v, list) else v for v in vals] for k, vals in cols.items()}
    mutate(cols)
    return cols


def set_row(column: str, row: int, value) -> Mutation:
    def mutate(cols):
        cols[column][row] = value
    return mutate


def set_token(column: str, row: int, pos: int, value) -> Mutation:
    def mutate(cols):
        cols[column][row][pos] = value
    return mutate


def extend_row(column: str, row: int) -> Mutation:
    """One more token (0.0) at the end of a row of ``column``."""
    def mutate(cols):
        cols[column][row] = cols[column][row] + [0.0]
    return mutate


def drop(*columns: str) -> Mutation:
    def mutate(cols):
        for c in columns:
            del cols[c]
    return mutate
