"""Property-based fuzzing of the reader and validator (issue 7, item 2).

Two sources of hostile Parquet files:

- random Arrow tables: a random subset of the contract columns (and extra ones), each with a random Arrow type
  (right or wrong), random nulls (whole rows and single values), random row lengths (mostly consistent,
  sometimes not, sometimes 0), masks mostly 0/1 and floats mostly moderate, with NaN/inf now and then;
- random byte corruptions of a good file: bytes overwritten, a range zeroed, truncated, or bytes inserted.

For each, ``rladv_cli.compute_file`` (and ``rladv_cli.validate``) must either succeed, and then the output holds
the contract columns (docs/contract.md §3) with finite numbers, or raise ``rladv_cli.RladvError`` and leave nothing
behind. Any other exception is a crash; an example running past ``HANG_S`` seconds is a hang (SIGALRM).

Floats are kept inside float32's range (|x| <= 1e4): a float64 beyond it is a known, separately tested rladv
bug (``tests/contract/test_hostile.py::float32-overflow-*``) that would otherwise mask everything else here.
"""
from __future__ import annotations

import os
import signal
import tempfile
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import rladv_cli
import rladv_cli.pipeline.driver  # noqa: F401  (imports torch now, not inside the first timed example)
from rladv_cli.estimators.registry import ESTIMATORS

pytestmark = pytest.mark.slow  # hypothesis fuzzing of the reader and validator

HANG_S = 20
CONTRACT_OUT = ("token_level_rewards", "response_mask", "loss_mask", "advantages", "returns")
# Deterministic by default (the same examples every run, so CI is stable); RLADV_FUZZ_EXAMPLES=5000
# RLADV_FUZZ_RANDOM=1 searches further with fresh random examples.
FUZZ = settings(max_examples=int(os.environ.get("RLADV_FUZZ_EXAMPLES", "1000")), deadline=timedelta(seconds=10),
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
                derandomize=not os.environ.get("RLADV_FUZZ_RANDOM"), database=None)


class Hang(Exception):
    pass


@contextmanager
def time_limit(seconds: int):
    """Raise ``Hang`` in the main thread if the body runs longer than ``seconds``."""
    def on_alarm(signum, frame):
        raise Hang(f"still running after {seconds} s")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


# -------------------------------------------------------------------------------------- random tables
LIST_COLUMNS = ("response_mask", "rm_scores", "values", "old_log_probs", "ref_log_prob", "rollout_log_probs",
                "sum_pi_squared", "attention_mask", "loss_mask", "responses")
SCALAR_COLUMNS = ("score", "reward_baselines", "acc", "step")
MASKS = ("response_mask", "attention_mask", "loss_mask")

LIST_TYPES = [pa.list_(pa.float32()), pa.list_(pa.float64()), pa.list_(pa.int8()), pa.list_(pa.int32()),
              pa.list_(pa.uint8()), pa.list_(pa.bool_()), pa.large_list(pa.float32()), pa.list_(pa.string()),
              pa.list_(pa.list_(pa.float32())), pa.float32(), pa.string()]
SCALAR_TYPES = [pa.float32(), pa.float64(), pa.int64(), pa.int8(), pa.bool_(), pa.string(),
                pa.list_(pa.float32())]
UID_TYPES = [pa.string(), pa.int64(), pa.large_string(), pa.float64(), pa.bool_(), pa.list_(pa.string())]

LOG_PROBS = ("old_log_probs", "ref_log_prob", "rollout_log_probs")
log_prob = st.one_of(st.sampled_from([0.0, -1.0, -20.0]), st.floats(-30, 0, width=32))
unit = st.floats(0, 1, width=32)
finite = st.one_of(st.sampled_from([0.0, 1.0, -1.0, 0.5]), st.floats(-1e4, 1e4, allow_nan=False, width=32))
odd_float = st.sampled_from([float("nan"), float("inf"), float("-inf")])


def _leaf(t: pa.DataType, column: str, wild: bool, draw) -> object:
    """One value of Arrow type ``t`` for ``column``; ``wild`` columns get out-of-contract values (masks outside
    {0, 1}, NaN/inf) now and then."""
    if pa.types.is_boolean(t):
        return draw(st.booleans())
    if pa.types.is_integer(t):
        lo, hi = (0, 1) if column in MASKS and not (wild and draw(st.integers(0, 3)) == 0) else (-3, 5)
        if pa.types.is_unsigned_integer(t):
            lo = max(lo, 0)
        return draw(st.integers(lo, hi))
    if pa.types.is_floating(t):
        if column in MASKS:
            return float(draw(st.integers(0, 1)))
        if wild and draw(st.integers(0, 4)) == 0:
            return draw(odd_float) if draw(st.booleans()) else draw(finite)
        return draw(log_prob if column in LOG_PROBS else unit if column == "sum_pi_squared" else finite)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return draw(st.sampled_from(["a", "b", "1", "01", "", "x y"]))
    raise AssertionError(t)


def _value(t: pa.DataType, column: str, length: int, wild: bool, draw) -> object:
    """One row of column ``column`` with Arrow type ``t`` (a list of ``length`` items for list types)."""
    if wild and draw(st.integers(0, 8)) == 0:
        return None  # a null row
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        inner = t.value_type
        out = []
        for _ in range(length):
            if wild and draw(st.integers(0, 30)) == 0:
                out.append(None)  # a null inside the list
            elif pa.types.is_list(inner):
                out.append([_leaf(inner.value_type, column, wild, draw) for _ in range(draw(st.integers(0, 2)))])
            else:
                out.append(_leaf(inner, column, wild, draw))
        return out
    return _leaf(t, column, wild, draw)


def _right_type(name: str) -> pa.DataType:
    if name in MASKS:
        return pa.list_(pa.int8())
    if name == "responses":
        return pa.list_(pa.int32())
    if name in LIST_COLUMNS:
        return pa.list_(pa.float32())
    if name in ("uid", "note"):
        return pa.string()
    if name == "step":
        return pa.int64()
    return pa.float32()


@st.composite
def rollout_tables(draw, needs: frozenset = frozenset()) -> pa.Table:
    """A random table: the columns ``needs`` names (each kept with probability 0.9), the others at random; about
    one column in ten is "wild" (a wrong type, nulls, lengths that disagree, values outside the contract)."""
    n = draw(st.integers(1, 7)) if draw(st.integers(0, 19)) else 0
    lengths = [draw(st.integers(1, 6)) if draw(st.integers(0, 40)) else 0 for _ in range(n)]
    score = draw(st.sampled_from(["rm_scores"] * 5 + ["score"] * 4 + [None]))
    names = []
    for c in LIST_COLUMNS + SCALAR_COLUMNS + ("uid", "note"):
        if c in ("rm_scores", "score"):
            keep = c == score
        elif c in needs or c == "response_mask":
            keep = draw(st.integers(0, 9)) > 0
        else:
            keep = draw(st.integers(0, 9)) < 3
        if keep:
            names.append(c)
    names = draw(st.permutations(names))
    cols: dict[str, pa.Array] = {}
    for name in names:
        wild = draw(st.integers(0, 9)) == 0 and name != "note"
        t = _right_type(name)
        if wild and draw(st.integers(0, 3)) == 0:
            t = draw(st.sampled_from(UID_TYPES if name == "uid" else LIST_TYPES if name in LIST_COLUMNS else SCALAR_TYPES))
        rows = []
        for i in range(n):
            L = draw(st.integers(0, 7)) if wild and draw(st.integers(0, 10)) == 0 else lengths[i]
            rows.append(_value(t, name, L, wild, draw))
        cols[name] = pa.array(rows, type=t)
    return pa.table(cols) if cols else pa.table({"note": pa.array([], pa.string())})


@st.composite
def run_settings(draw) -> dict:
    estimator = draw(st.sampled_from(sorted(ESTIMATORS)))
    s = {"estimator": estimator, "chunk_rows": draw(st.sampled_from([1, 2, 3, 1024])), "device": "cpu"}
    if draw(st.integers(0, 3)) == 0:
        s["kl_coef"] = 0.1
        s["kl_penalty"] = draw(st.sampled_from(["kl", "low_var_kl", "mse", "abs+"]))
    if draw(st.integers(0, 4)) == 0:
        s["rollout_is"] = draw(st.sampled_from(["token", "sequence"]))
    if draw(st.integers(0, 5)) == 0:
        s["rollout_rs"], s["rollout_rs_threshold"] = "token_k1,seq_max_k2", "0.5_2.0,2.5"
    if draw(st.integers(0, 5)) == 0:
        s["batch_key"] = "step"
    if ESTIMATORS[estimator].components and draw(st.booleans()):
        s["reward_components"] = ("acc",)
    if draw(st.integers(0, 6)) == 0:
        s["overlong_buffer_len"], s["max_resp_len"] = 2, 5
    return s


def needed_columns(s: dict) -> frozenset:
    """The columns the drawn settings read (so most drawn tables get far enough to compute something)."""
    need = set(ESTIMATORS[s["estimator"]].columns) | ({"uid"} if ESTIMATORS[s["estimator"]].groups else set())
    if s.get("kl_coef"):
        need |= {"old_log_probs", "ref_log_prob"}
    if s.get("rollout_is") or s.get("rollout_rs"):
        need |= {"old_log_probs", "rollout_log_probs"}
    if s.get("batch_key"):
        need.add("step")
    need |= set(s.get("reward_components") or ())
    return frozenset(need)


# -------------------------------------------------------------------------------------------- checks
def _leftovers(folder: Path, keep: set[str]) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name not in keep)


def run_and_check(path: Path, settings_: dict) -> str:
    """compute_file + validate on ``path``: success with a well-formed output, or RladvError and nothing left."""
    folder = path.parent
    out = folder / "out.parquet"
    before = path.read_bytes()
    try:
        with time_limit(HANG_S):
            rladv_cli.compute_file([str(path)], output=str(out), **settings_)
    except rladv_cli.RladvError as err:
        assert str(err) and "\n" not in str(err).strip(), repr(str(err))
        assert _leftovers(folder, {path.name}) == [], "a failed run left files behind"
        outcome = f"error:{type(err).__name__}: {_kind(str(err))}"
    else:
        check_output(path, out)
        outcome = "ok"
        out.unlink()
    assert path.read_bytes() == before, "the input changed"
    try:
        with time_limit(HANG_S):
            rladv_cli.validate([str(path)], settings_["estimator"])
    except rladv_cli.RladvError:
        pass
    assert _leftovers(folder, {path.name}) == []
    return outcome


def _moderate(table: pa.Table) -> bool:
    """Every number below 1e6 in magnitude, log-probs <= 0 and sum_pi_squared in [0, 1]."""
    for name in table.column_names:
        lo, hi = _range(table[name])
        if max(abs(lo), abs(hi)) > 1e6:
            return False
        if name in LOG_PROBS and hi > 0 or name == "sum_pi_squared" and (lo < 0 or hi > 1):
            return False
    return True


def _range(column: pa.ChunkedArray) -> tuple[float, float]:
    """(min, max) of a numeric column or numeric list column, NaN ignored ((0, 0) for anything else)."""
    t = column.type
    arr = column.combine_chunks()
    while pa.types.is_list(t) or pa.types.is_large_list(t):
        arr, t = arr.flatten(), t.value_type
    if not (pa.types.is_floating(t) or pa.types.is_integer(t)) or len(arr) == 0:
        return 0.0, 0.0
    v = arr.to_numpy(zero_copy_only=False).astype(np.float64)
    v = v[~np.isnan(v)]
    return (float(v.min()), float(v.max())) if v.size else (0.0, 0.0)


def _kind(message: str) -> str:
    """A short label of an error message, for hypothesis' statistics."""
    tail = message.rsplit(": ", 1)[-1]
    return " ".join(tail.split()[:4])


def check_output(inp: Path, out: Path) -> None:
    # the input as rladv decodes it: a corrupted footer can break only what pq.read_table reads besides the
    # data (a column chunk's redundant type field, which ParquetFile ignores and read_table refuses)
    src, dst = pq.ParquetFile(inp).read(), pq.read_table(out)
    assert dst.num_rows == src.num_rows
    for name in CONTRACT_OUT:
        assert name in dst.column_names, name
    for name in src.column_names:
        assert name in dst.column_names, name
        if name not in CONTRACT_OUT:
            assert dst[name].equals(src[name]), name
    lengths = [len(r) for r in dst["response_mask"].to_pylist()]
    assert all(L >= 1 for L in lengths)
    # NaN/inf in the output is a bug when every input number is moderate; a corrupted page can decode to
    # finite float32 values near 3e38, whose sums overflow in verl's float32 arithmetic as well, and a positive
    # "log-prob" such as 88 overflows exp() in the optimal-token baselines (as in verl)
    moderate = _moderate(src)
    mask = np.concatenate([np.asarray(r, dtype=np.int8) for r in dst["response_mask"].to_pylist()])
    assert set(np.unique(mask).tolist()) <= {0, 1}
    for name in ("token_level_rewards", "advantages", "returns"):
        rows = dst[name].to_pylist()
        assert [len(r) for r in rows] == lengths, name
        v = np.concatenate([np.asarray(r, dtype=np.float32) for r in rows])
        if moderate:
            assert np.all(np.isfinite(v)), f"{name} holds NaN/inf although every input number is moderate"
        else:
            event("huge input values: finiteness not checked")
        if name != "token_level_rewards":
            assert np.all(v[mask == 0] == 0), name


# --------------------------------------------------------------------------------------------- tests
@FUZZ
@given(data=st.data())
def test_random_tables_succeed_or_fail_cleanly(data):
    s = data.draw(run_settings(), label="settings")
    table = data.draw(rollout_tables(needed_columns(s)), label="table")
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "in.parquet"
        pq.write_table(table, path)
        event(run_and_check(path, s))


def _good_table(seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    n = 12
    lengths = rng.integers(1, 9, n)
    def floats(lo, hi):
        return pa.array([rng.uniform(lo, hi, L).astype(np.float32).tolist() for L in lengths], pa.list_(pa.float32()))
    masks = [[int(x) for x in (rng.random(L) < 0.8)] for L in lengths]
    return pa.table({
        "uid": pa.array([f"g{i // 3}" for i in range(n)]),
        "response_mask": pa.array(masks, pa.list_(pa.int8())),
        "rm_scores": pa.array([[0.0] * (L - 1) + [float(rng.integers(0, 2))] for L in lengths], pa.list_(pa.float32())),
        "values": floats(-1, 1),
        "old_log_probs": floats(-2, 0),
        "ref_log_prob": floats(-2, 0),
        "step": pa.array([i % 2 for i in range(n)], pa.int64()),
    })


GOOD = {}
for _compression in ("none", "snappy", "zstd"):
    _sink = pa.BufferOutputStream()
    pq.write_table(_good_table(7), _sink, compression=_compression, row_group_size=5)
    GOOD[_compression] = _sink.getvalue().to_pybytes()


@st.composite
def corruptions(draw) -> tuple[str, bytes, str]:
    compression = draw(st.sampled_from(sorted(GOOD)))
    data = bytearray(GOOD[compression])
    kind = draw(st.sampled_from(["overwrite", "zero-range", "truncate", "insert", "footer"]))
    if kind == "overwrite":
        for _ in range(draw(st.integers(1, 8))):
            data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
    elif kind == "zero-range":
        a = draw(st.integers(0, len(data) - 1))
        data[a:a + draw(st.integers(1, 64))] = bytes(min(64, len(data) - a))[: len(data[a:a + 64])]
    elif kind == "truncate":
        data = data[: draw(st.integers(0, len(data) - 1))]
    elif kind == "insert":
        a = draw(st.integers(0, len(data)))
        data[a:a] = draw(st.binary(min_size=1, max_size=16))
    else:  # inside the footer (the Thrift metadata), where lengths and offsets live
        n = int.from_bytes(data[-8:-4], "little")
        for _ in range(draw(st.integers(1, 4))):
            data[draw(st.integers(len(data) - 8 - n, len(data) - 9))] = draw(st.integers(0, 255))
    return compression, bytes(data), kind


@FUZZ
@given(corrupt=corruptions(), estimator=st.sampled_from(["grpo", "gae", "reinforce_plus_plus", "rloo", "opo"]),
       chunk_rows=st.sampled_from([1, 4, 1024]))
def test_corrupted_files_succeed_or_fail_cleanly(corrupt, estimator, chunk_rows):
    compression, data, kind = corrupt
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "in.parquet"
        path.write_bytes(data)
        outcome = run_and_check(path, {"estimator": estimator, "chunk_rows": chunk_rows, "device": "cpu"})
        event(f"{kind}/{compression}: {outcome}")


def test_good_file_is_computed():
    """The uncorrupted file itself succeeds (so the corruption test exercises both outcomes)."""
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "in.parquet"
        for data in GOOD.values():
            path.write_bytes(data)
            assert run_and_check(path, {"estimator": "gae", "device": "cpu"}) == "ok"


def test_a_wrong_type_in_a_column_chunks_footer_metadata_is_read_as_the_schema_says(tmp_path):
    """A fuzz find: one byte of the footer turned the ``values`` column chunks' ``ColumnMetaData.type`` (a copy of
    the schema's physical type) from FLOAT into BOOLEAN. ``pq.read_table`` refuses such a file; ParquetFile, which
    rladv reads with, decodes the pages by the schema, so the run must give exactly the intact file's output."""
    from rladv_cli.io.parquet_join import MAGIC, encode_footer, split_file

    pages, footer = split_file(GOOD["none"])
    changed = 0
    for row_group in next(f for f in footer if f[0] == 4)[2][1]:          # FileMetaData.row_groups
        for chunk in next(f for f in row_group if f[0] == 1)[2][1]:       # RowGroup.columns
            meta = next(f for f in chunk if f[0] == 3)[2]                 # ColumnChunk.meta_data
            path = next(f for f in meta if f[0] == 3)[2][1]               # path_in_schema
            if path[0] == b"values":
                kind = next(f for f in meta if f[0] == 1)                 # ColumnMetaData.type
                assert kind[2] == 4                                       # FLOAT
                kind[2], changed = 0, changed + 1                         # BOOLEAN
    assert changed == 3  # three row groups
    tail = encode_footer(footer)
    bad, good = tmp_path / "bad.parquet", tmp_path / "good.parquet"
    bad.write_bytes(MAGIC + bytes(pages) + tail + len(tail).to_bytes(4, "little") + MAGIC)
    good.write_bytes(GOOD["none"])
    with pytest.raises(OSError, match="ColumnMetaData type"):
        pq.read_table(bad)
    out = {}
    for path in (bad, good):
        rladv_cli.compute_file([str(path)], output=str(tmp_path / f"{path.stem}.out.parquet"), estimator="gae",
                               device="cpu")
        out[path.stem] = pq.read_table(tmp_path / f"{path.stem}.out.parquet")
    assert out["bad"].equals(out["good"])
    alone = tmp_path / "alone"
    alone.mkdir()
    (alone / "in.parquet").write_bytes(bad.read_bytes())
    assert run_and_check(alone / "in.parquet", {"estimator": "gae", "device": "cpu"}) == "ok"  # the fuzz test's check
