"""Atomic output under SIGKILL (issue 7, item 3) and byte-identical, repeatable output (issue 7, item 4).

A dataset of ~3M tokens is written into tmp_path; ``rladv compute`` runs on it as a subprocess and is killed
with SIGKILL at seeded moments: at random times after the start, when the temporary output has reached a random
fraction of its final size (i.e. in the middle of the large write), and in the window right after the temporary
file was renamed. After every kill:

- the output path holds exactly the previous output (pre-created, byte-identical), or, when no previous output
  existed, nothing, or (only if the kill came after the rename) the complete new output, byte-identical to an
  uninterrupted run; never a partial file;
- the same holds for the ``--report`` JSON;
- the input is byte-identical;
- temporary ``.rladv-*.tmp`` files a killed process could not remove are allowed (they are counted and printed,
  ``pytest -s`` shows the figures) but never sit at the output name.

Determinism: for every estimator (and a few stage-heavy option sets), on ``sample_data/multiturn.parquet`` with
the columns the estimators need added, outputs are byte-identical and report numbers identical (timings,
the output path and ``config.chunk_rows`` aside) across ``--chunk-rows`` 1, 7 and the default, across two runs
in one process, and across fresh processes with different ``PYTHONHASHSEED`` values.
"""
from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import Future
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import SAMPLES, as_from_a_terminal, binary_scores, rladv_command, runner
from rladv_cli.cli import app
from rladv_cli.estimators.registry import ESTIMATORS

SEED = 7
ROWS, MEAN_LEN = 16_000, 200  # ~3.2M tokens
KILL_POINTS = [("time", True), ("size", True), ("size", True), ("time", False), ("size", False), ("commit", True)]


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def make_dataset(path: Path, seed: int = SEED) -> int:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(MEAN_LEN // 2, MEAN_LEN * 3 // 2, ROWS)
    offsets = pa.array(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32))
    tokens = int(lengths.sum())
    mask = (rng.random(tokens) < 0.9).astype(np.int8)

    def lists(values, t):
        return pa.ListArray.from_arrays(offsets, pa.array(values, type=t))

    table = pa.table({
        "uid": pa.array([f"p{i // 8}" for i in range(ROWS)]),
        "response_mask": lists(mask, pa.int8()),
        "old_log_probs": lists(rng.normal(-1, 0.3, tokens).astype(np.float32), pa.float32()),
        "score": pa.array(rng.integers(0, 2, ROWS).astype(np.float32)),
        "step": pa.array(np.arange(ROWS) // 4000, pa.int64()),
    })
    pq.write_table(table, path)
    return tokens


def _temps(folder: Path) -> list[Path]:
    return sorted(folder.glob(".rladv-*"))


def _kill_when(proc: subprocess.Popen, folder: Path, strategy: str, value: float, t0: float) -> str:
    """Poll until the kill condition holds, then SIGKILL; returns what was observed at the kill."""
    seen_tmp = False
    while proc.poll() is None:
        tmps = [p for p in _temps(folder) if p.name.endswith(".parquet.tmp")]
        seen_tmp = seen_tmp or bool(tmps)
        if strategy == "time" and time.monotonic() - t0 >= value:
            break
        if strategy == "size" and tmps:
            try:
                if max(p.stat().st_size for p in tmps) >= value:
                    break
            except FileNotFoundError:
                pass  # renamed meanwhile
        if strategy == "commit" and seen_tmp and not tmps:
            break  # the temporary output was just renamed; the process is finishing
        time.sleep(0.0005)
    if proc.poll() is not None:
        return "finished before the kill"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    # it may have exited between the poll and the signal (the "commit" point is its last moment): a SIGKILL to
    # a process that has exited but was not yet reaped does nothing
    return "finished before the kill" if proc.returncode == 0 else "killed"


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    root = tmp_path_factory.mktemp("atomic")
    inp = root / "rollouts.parquet"
    tokens = make_dataset(inp)
    ref_dir = root / "ref"
    ref_dir.mkdir()
    args = ["compute", str(inp), "--estimator", "grpo", "--batch-key", "step", "-q"]
    t0 = time.monotonic()
    p = subprocess.run(rladv_command() + args + ["-o", str(ref_dir / "out.parquet"),
                                                 "--report", str(ref_dir / "r.json")],
                       capture_output=True, text=True, timeout=300)
    duration = time.monotonic() - t0
    assert p.returncode == 0, p.stderr
    # a valid previous output and report: a smaller run of the same command
    prev_in = root / "small.parquet"
    pq.write_table(pq.read_table(inp).slice(0, 2000), prev_in)
    prev_dir = root / "prev"
    prev_dir.mkdir()
    p = subprocess.run(rladv_command() + ["compute", str(prev_in), "--estimator", "grpo", "-q",
                                          "-o", str(prev_dir / "out.parquet"), "--report", str(prev_dir / "r.json")],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return dict(root=root, inp=inp, tokens=tokens, args=args, duration=duration,
                ref=(ref_dir / "out.parquet").read_bytes(), ref_report=json.loads((ref_dir / "r.json").read_text()),
                prev=(prev_dir / "out.parquet").read_bytes(), prev_report=(prev_dir / "r.json").read_bytes())


def _report_numbers(report: dict) -> dict:
    return {k: v for k, v in report.items() if k not in ("timing", "output")}


@pytest.mark.slow  # rladv subprocesses, killed and signalled
def test_sigkill_leaves_previous_or_complete_output(big):
    rng = np.random.default_rng(SEED)
    assert 2_000_000 <= big["tokens"] <= 5_000_000
    input_digest = _digest(big["inp"])
    final_size = len(big["ref"])
    outcomes, temps_left = [], 0
    for i, (strategy, with_previous) in enumerate(KILL_POINTS):
        folder = big["root"] / f"kill{i}"
        folder.mkdir()
        out, report = folder / "out.parquet", folder / "r.json"
        if with_previous:
            out.write_bytes(big["prev"])
            report.write_bytes(big["prev_report"])
        value = {"time": float(rng.uniform(0.3, big["duration"])), "size": float(rng.uniform(0.05, 0.95)) * final_size,
                 "commit": 0.0}[strategy]
        t0 = time.monotonic()
        proc = subprocess.Popen(rladv_command() + big["args"] + ["-o", str(out), "--report", str(report)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        how = _kill_when(proc, folder, strategy, value, t0)
        at = time.monotonic() - t0
        # the output name: previous output, nothing, or the complete new output; never a partial file
        if out.exists():
            data = out.read_bytes()
            if data == big["prev"] and with_previous:
                state = "previous output intact"
            else:
                assert data == big["ref"], f"kill {i} ({strategy} at {at:.2f}s): a partial or foreign file at the output name"
                state = "complete new output"
        else:
            assert not with_previous, f"kill {i}: the previous output was removed"
            state = "no output"
        if report.exists():
            text = report.read_bytes()
            if not (with_previous and text == big["prev_report"]):
                assert _report_numbers(json.loads(text)) == _report_numbers(big["ref_report"]), f"kill {i}: partial report"
        pq.read_table(out) if out.exists() else None  # whatever is there reads as Parquet
        left = _temps(folder)
        assert all(p.name.startswith(".rladv-") and p.name.endswith(".tmp") for p in left), left
        assert out not in left
        temps_left += len(left)
        assert _digest(big["inp"]) == input_digest
        outcomes.append((i, strategy, round(value, 3), round(at, 2), how, state, len(left)))
        if how == "finished before the kill":
            assert proc.returncode == 0 and state == "complete new output"
        else:
            assert proc.returncode == -signal.SIGKILL
    print(f"\natomic: {big['tokens']} tokens, uninterrupted run {big['duration']:.2f}s, output {final_size} bytes")
    for row in outcomes:
        print("  kill %d: %-6s value=%-12s at %5.2fs  %-24s -> %-24s temp files left: %d" % row)
    print(f"  temp files left in total: {temps_left}")
    killed = [o for o in outcomes if o[4] == "killed"]
    assert len(killed) >= 4, outcomes  # most kill points must really interrupt the run
    assert any(o[5] != "complete new output" for o in killed)


def _signal_when(proc: subprocess.Popen, folder: Path, suffix: str, sig: int) -> bool:
    """Send ``sig`` as soon as a temporary file ending in ``suffix`` appears; False when the run ended first."""
    while proc.poll() is None:
        if any(p.name.endswith(suffix) for p in _temps(folder)):
            proc.send_signal(sig)
            return True
        time.sleep(0.0002)
    return False


@pytest.mark.slow  # rladv subprocesses, killed and signalled
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT], ids=lambda s: s.name)
def test_a_termination_signal_cleans_up_as_ctrl_c_does(big, sig):
    """SIGTERM and SIGHUP used to kill the process where it stood (exit -15 / -1), leaving the temporary
    output behind; they now unwind as SIGINT does: exit 128 + signal, no output, no report, no page, no
    temporary file, no traceback. Sent while the output is written, and again once the report is staged
    (the window where a SIGHUP once left a finished report and no output): the three files appear together
    or not at all."""
    input_digest = _digest(big["inp"])
    interrupted = 0
    for i, suffix in enumerate((".parquet.tmp", ".json.tmp")):
        folder = big["root"] / f"{sig.name}-{i}"
        folder.mkdir()
        names = ["out.parquet", "r.html", "r.json"]  # sorted, as listed below
        # as from a terminal: a SIGINT that whatever started pytest left ignored would be ignored by rladv too
        proc = subprocess.Popen(as_from_a_terminal(rladv_command() + big["args"] + [
                                    "-o", str(folder / "out.parquet"), "--report", str(folder / "r.json"), "--html",
                                    str(folder / "r.html")]),
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        sent = _signal_when(proc, folder, suffix, sig)
        _, err = proc.communicate(timeout=120)
        left = sorted(os.listdir(folder))
        assert "Traceback" not in err and not err.strip(), err
        assert left in ([], names), (suffix, left)  # never a part of the run
        if not sent or proc.returncode == 0:  # the run ended before the file appeared or the signal arrived
            assert proc.returncode == 0 and read_all_ok(folder, big)  # (a loaded machine): nothing to interrupt
            continue
        assert proc.returncode == 128 + sig, (suffix, proc.returncode)
        interrupted += 1
        # nothing, or (the signal landed in the shielded renames, which a loaded machine can reach between
        # seeing the temporary file and the signal's delivery) all three, complete
        assert left == [] or read_all_ok(folder, big)
        print(f"\n{sig.name} at the first {suffix}: sent={sent} exit={proc.returncode} left={left}")
    assert interrupted, "neither run was interrupted"  # one may end first on a loaded machine, not both
    assert _digest(big["inp"]) == input_digest


def read_all_ok(folder: Path, big: dict) -> bool:
    return (folder / "out.parquet").read_bytes() == big["ref"] and _report_numbers(
        json.loads((folder / "r.json").read_text())) == _report_numbers(big["ref_report"])


@pytest.fixture
def python_handles_sigint():
    """SIGINT to Python's own handler (``KeyboardInterrupt``) and SIGINT/SIGTERM unblocked in this thread, as a
    terminal starts Python, for the test only: whatever started pytest may have left SIGINT ignored (a
    background job of a script) or blocked, and ``signals_deferred`` leaves alone a signal that Python does not
    handle, so the test below passed or failed with the way pytest was started."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    mask = signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        if previous is not None:  # None: set outside Python, which Python cannot set back
            signal.signal(signal.SIGINT, previous)


def test_signals_inside_the_commit_are_acted_on_after_it(python_handles_sigint):
    """``signals_deferred`` holds SIGINT/SIGTERM/SIGHUP while the renames run and raises the first one to its
    handler once they are done."""
    from rladv_cli.io.write import signals_deferred

    seen = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: seen.append(("handler", signum)))
    try:
        with signals_deferred():
            signal.raise_signal(signal.SIGTERM)
            signal.raise_signal(signal.SIGINT)
            seen.append("inside")
        assert seen == ["inside", ("handler", signal.SIGTERM)]
        with pytest.raises(KeyboardInterrupt):
            with signals_deferred():
                signal.raise_signal(signal.SIGINT)
                seen.append("inside again")
        assert seen[-1] == "inside again"
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_a_signal_python_does_not_handle_is_left_to_the_system_inside_the_commit(python_handles_sigint):
    """An ignored SIGINT (``nohup``) stays ignored: the block neither defers it nor raises it afterwards."""
    from rladv_cli.io.write import signals_deferred

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with signals_deferred():
        signal.raise_signal(signal.SIGINT)
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN


# ------------------------------------------------------------------------------------------- determinism
VARIANTS = {name: (["--reward-components", "acc,fmt"] if e.components else []) for name, e in ESTIMATORS.items()}
VARIANTS.update({
    "grpo+kl+rollout-correction+batches": ["--kl-coef", "0.05", "--kl-penalty", "low_var_kl", "--rollout-is", "token",
                                           "--rollout-rs", "token_k1,seq_max_k2", "--rollout-rs-threshold",
                                           "0.5_2.0,2.5", "--batch-key", "step"],
    "gae+adaptive-kl+batches": ["--gamma", "0.99", "--lam", "0.95", "--kl-coef", "0.1", "--kl-ctrl", "adaptive",
                                "--kl-target", "0.01", "--kl-horizon", "100", "--batch-key", "step"],
    "reinforce_plus_plus_baseline+is-sequence-normalized": ["--rollout-is", "sequence", "--rollout-is-batch-normalize"],
    "optimal_token_baseline+is": ["--rollout-is", "token"],
    "grpo+overlong": ["--overlong-buffer-len", "8", "--max-resp-len", "40", "--overlong-penalty-factor", "0.5"],
})


def _estimator(variant: str) -> str:
    return variant.split("+", 1)[0]


def _variant_args(variant: str) -> list[str]:
    return ["--estimator", _estimator(variant), *VARIANTS[variant]]


@pytest.fixture(scope="module")
def multiturn(tmp_path_factory) -> Path:
    """sample_data/multiturn.parquet plus reward_baselines, sum_pi_squared, two reward components and a step (a
    uid group's rows share theirs, as a trainer's dump's do: the step column is the batch key)."""
    rng = np.random.default_rng(SEED)
    table = pq.read_table(SAMPLES / "multiturn.parquet")
    n = table.num_rows
    lengths = [len(m) for m in table["response_mask"].to_pylist()]
    offsets = pa.array(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32))
    spi = rng.uniform(0.05, 1.0, int(sum(lengths))).astype(np.float32)
    table = (table.append_column("reward_baselines", pa.array(rng.uniform(0, 1, n).astype(np.float32)))
             .append_column("sum_pi_squared", pa.ListArray.from_arrays(offsets, pa.array(spi)))
             .append_column("acc", pa.array(rng.integers(0, 2, n).astype(np.float64)))
             .append_column("fmt", pa.array(rng.uniform(0, 1, n)))
             .append_column("step", pa.array([int(u.rsplit("-", 1)[1]) % 3 for u in table["uid"].to_pylist()],
                                             pa.int64())))
    path = tmp_path_factory.mktemp("determinism") / "multiturn.parquet"
    pq.write_table(table, path)
    pq.write_table(binary_scores(table), path.with_name("binary.parquet"))  # for estimators of binary rewards
    return path


def _input(multiturn: Path, variant: str) -> Path:
    """The fixture a variant runs on: its 0/1 copy for an estimator of binary rewards."""
    return multiturn.with_name("binary.parquet") if ESTIMATORS[_estimator(variant)].binary_rewards else multiturn


def _strip(report: dict) -> dict:
    """Report numbers that must repeat: everything but timings, the output path and the chunk size."""
    out = {k: v for k, v in report.items() if k not in ("timing", "output")}
    out["config"] = {k: v for k, v in report["config"].items() if k != "chunk_rows"}
    return out


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_byte_identical_across_chunk_sizes_and_runs(multiturn, tmp_path, variant):
    outputs, reports = {}, {}
    for label, chunk in (("chunk 1", ["--chunk-rows", "1"]), ("chunk 7", ["--chunk-rows", "7"]), ("default", []),
                         ("default, again", [])):
        folder = tmp_path / label.replace(" ", "_").replace(",", "")
        folder.mkdir()
        result = runner.invoke(app, ["compute", str(_input(multiturn, variant)), *_variant_args(variant), *chunk, "-q",
                                     "-o", str(folder / "out.parquet"), "--report", str(folder / "r.json")])
        assert result.exit_code == 0, (label, result.output)
        outputs[label] = (folder / "out.parquet").read_bytes()
        reports[label] = _strip(json.loads((folder / "r.json").read_text()))
    for label in outputs:
        assert outputs[label] == outputs["default"], f"{variant}: {label} output differs from the default run"
        assert reports[label] == reports["default"], f"{variant}: {label} report numbers differ"


_SCRIPT = """
import json, sys
from pathlib import Path
import rladv_cli
inputs, out = json.loads(sys.argv[1]), Path(sys.argv[2])
for variant, args in json.loads(sys.argv[3]).items():
    inp = inputs[variant]
    settings = {}
    it = iter(args)
    for flag in it:
        key = flag.lstrip("-").replace("-", "_")
        if key in ("rollout_is_batch_normalize",):
            settings[key] = True
            continue
        value = next(it)
        settings[key] = value.split(",") if key in ("reward_components",) else value
    rep = rladv_cli.compute_file([inp], output=str(out / (variant + ".parquet")),
                                 report_path=str(out / (variant + ".json")), device="cpu", **settings)
"""


@pytest.mark.slow  # fresh interpreters, every variant
def test_byte_identical_across_processes_and_hash_seeds(multiturn, tmp_path):
    """Fresh interpreters with different PYTHONHASHSEED (set/dict order of string uids) give the same bytes as
    the in-process CLI."""
    variants = {v: _variant_args(v) for v in sorted(VARIANTS)}
    procs = {}
    for seed in ("1", "4242"):
        folder = tmp_path / f"seed{seed}"
        folder.mkdir()
        inputs = json.dumps({v: str(_input(multiturn, v)) for v in variants})
        procs[seed] = (folder, subprocess.Popen([sys.executable, "-c", _SCRIPT, inputs, str(folder),
                                                 json.dumps(variants)], env={**os.environ, "PYTHONHASHSEED": seed},
                                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    here = tmp_path / "cli"
    here.mkdir()
    for variant, args in variants.items():
        result = runner.invoke(app, ["compute", str(_input(multiturn, variant)), *args, "--device", "cpu", "-q",
                                     "-o", str(here / f"{variant}.parquet"), "--report", str(here / f"{variant}.json")])
        assert result.exit_code == 0, (variant, result.output)
    for seed, (folder, proc) in procs.items():
        stdout, stderr = proc.communicate(timeout=300)
        assert proc.returncode == 0, stderr
        for variant in variants:
            assert (folder / f"{variant}.parquet").read_bytes() == (here / f"{variant}.parquet").read_bytes(), (seed, variant)
            got = _strip(json.loads((folder / f"{variant}.json").read_text()))
            want = _strip(json.loads((here / f"{variant}.json").read_text()))
            assert got == want, (seed, variant)


def test_a_table_of_another_schema_is_refused_and_leaves_nothing(tmp_path):
    import pyarrow as pa
    import pytest

    from rladv_cli.io.write import AtomicParquetWriter

    out = tmp_path / "out.parquet"
    out.write_bytes(b"previous")
    schema = pa.schema([pa.field("x", pa.int64())])
    with pytest.raises(ValueError, match="schema does not match"):
        with AtomicParquetWriter(str(out), schema) as sink:
            sink.write(pa.table({"x": pa.array([1, 2], pa.int64())}))
            sink.write(pa.table({"y": pa.array(["not the schema"] * 2000)}))
    assert out.read_bytes() == b"previous"
    assert [p.name for p in tmp_path.iterdir()] == ["out.parquet"]


@pytest.mark.parametrize("fail_at", [1, 3])
def test_an_error_while_encoding_reaches_the_caller_and_leaves_nothing(tmp_path, monkeypatch, fail_at):
    """Row groups are encoded on other threads: a failure surfaces in a later ``write`` or in ``commit``,
    and the temporary file goes, an earlier output untouched."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from rladv_cli.io.write import ROW_GROUP_ROWS, AtomicParquetWriter

    calls = []
    real = pq.ParquetWriter.write_table

    def flaky(self, table, *args, **kwargs):
        calls.append(1)
        if len(calls) == fail_at:
            raise OSError("disk on fire")
        return real(self, table, *args, **kwargs)

    monkeypatch.setattr(pq.ParquetWriter, "write_table", flaky)
    out = tmp_path / "out.parquet"
    out.write_bytes(b"previous")
    schema = pa.schema([pa.field("x", pa.int64())])
    with pytest.raises(OSError, match="disk on fire"):
        with AtomicParquetWriter(str(out), schema) as sink:
            for start in range(0, 5 * ROW_GROUP_ROWS, 100):
                sink.write(pa.table({"x": pa.array(range(start, start + 100), pa.int64())}))
            sink.commit()
    assert out.read_bytes() == b"previous"
    assert [p.name for p in tmp_path.iterdir()] == ["out.parquet"]


@pytest.mark.parametrize("chunks", [[1], [7, 500, 3, 1100], [512], [5000]])
def test_the_file_is_the_bytes_of_one_parquet_writer_whatever_the_chunks(tmp_path, chunks):
    """Row groups are encoded apart (``parquet_join``); the file is what one ``ParquetWriter`` writes for
    ``ROW_GROUP_ROWS``-row groups, however the rows arrived."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from rladv_cli.io.write import ROW_GROUP_ROWS, AtomicParquetWriter, writer_options

    rng = np.random.default_rng(0)
    rows = 3000
    lengths = rng.integers(1, 20, rows)
    offsets = pa.array(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32))
    values = pa.array(rng.normal(size=int(lengths.sum())).astype(np.float32))
    table = pa.table({"uid": pa.array([f"u{i // 3}" for i in range(rows)]),
                      "advantages": pa.ListArray.from_arrays(offsets, values)})
    out = tmp_path / "out.parquet"
    with AtomicParquetWriter(str(out), table.schema) as sink:
        start, i = 0, 0
        while start < rows:
            sink.write(table.slice(start, chunks[i % len(chunks)]))
            start += chunks[i % len(chunks)]
            i += 1
        sink.commit()
    one = tmp_path / "one.parquet"
    with pq.ParquetWriter(one, table.schema, **writer_options(table.schema)) as writer:
        for start in range(0, rows, ROW_GROUP_ROWS):
            writer.write_table(table.slice(start, ROW_GROUP_ROWS), row_group_size=ROW_GROUP_ROWS)
    assert out.read_bytes() == one.read_bytes()


def _long_rows(rows: int, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, 120, rows)
    offsets = pa.array(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32))
    n = int(lengths.sum())
    return pa.table({"uid": pa.array([f"u{i // 3}" for i in range(rows)]),
                     "advantages": pa.ListArray.from_arrays(offsets, pa.array(rng.normal(size=n).astype(np.float32))),
                     "loss_mask": pa.ListArray.from_arrays(offsets, pa.array(rng.integers(0, 2, n).astype(np.int8)))})


def test_a_row_group_reaches_the_encoder_as_slices_of_whole_rows(monkeypatch):
    """``_in_pieces``: a table of more than ``PIECE_VALUES`` list values comes back as slices of whole rows, each of
    about that many values, holding the same rows without a copy; a smaller one comes back as it is."""
    from rladv_cli.io import write

    monkeypatch.setattr(write, "PIECE_VALUES", 1000)
    table = _long_rows(300).combine_chunks()
    values = len(table["advantages"].chunk(0).values)
    pieces = write._in_pieces(table)
    per_piece = 300 * 1000 // values  # rows per slice, from the table's mean row length
    assert [len(c) for c in pieces["advantages"].chunks] == [per_piece] * (300 // per_piece) + [300 % per_piece] * bool(300 % per_piece)
    assert pieces.equals(table)
    assert pieces["advantages"].chunk(1).values.buffers()[1].address == table["advantages"].chunk(0).values.buffers()[1].address
    small = table.slice(100, 5).combine_chunks()  # a slice's own values count, not its buffer's
    assert write._in_pieces(small) is small
    assert write._in_pieces(table.slice(0, 0)).num_rows == 0


@pytest.mark.parametrize("chunks", [[7, 500, 3, 1100], [5000]])
def test_row_groups_written_in_pieces_are_the_bytes_of_one_writer_fed_the_same_pieces(tmp_path, monkeypatch, chunks):
    """Row groups of many list values are handed to the encoder in slices: the file holds the same table, is what
    one ``ParquetWriter`` writes when fed each row group in the same slices of whole rows, and still does not
    depend on how the rows arrived."""
    from rladv_cli.io import write

    monkeypatch.setattr(write, "PIECE_VALUES", 2000)
    table = _long_rows(1500, seed=1)
    files = []
    for i, sizes in enumerate([chunks, [1500]]):
        out = tmp_path / f"out{i}.parquet"
        with write.AtomicParquetWriter(str(out), table.schema) as sink:
            start, k = 0, 0
            while start < table.num_rows:
                sink.write(table.slice(start, sizes[k % len(sizes)]))
                start, k = start + sizes[k % len(sizes)], k + 1
            sink.commit()
        files.append(out.read_bytes())
    assert files[0] == files[1]
    one = tmp_path / "one.parquet"
    with pq.ParquetWriter(one, table.schema, **write.writer_options(table.schema)) as writer:
        for start in range(0, table.num_rows, write.ROW_GROUP_ROWS):
            group = table.slice(start, write.ROW_GROUP_ROWS).combine_chunks()
            values = len(group["advantages"].chunk(0).values)
            rows = max(1, group.num_rows * 2000 // values)
            assert rows < group.num_rows  # each row group is cut
            writer.write_table(pa.Table.from_batches(group.to_batches(max_chunksize=rows)), row_group_size=group.num_rows)
    assert files[0] == one.read_bytes()
    assert pq.read_table(tmp_path / "out0.parquet").equals(table)


def test_the_writer_thread_keeps_rows_in_order_across_row_groups(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from rladv_cli.io.write import ROW_GROUP_ROWS, AtomicParquetWriter

    out = tmp_path / "out.parquet"
    schema = pa.schema([pa.field("x", pa.int64())])
    with AtomicParquetWriter(str(out), schema) as sink:
        for start in range(0, 5000, 333):
            sink.write(pa.table({"x": pa.array(range(start, min(start + 333, 5000)), pa.int64())}))
        sink.commit()
    f = pq.ParquetFile(out)
    assert f.read().column("x").to_pylist() == list(range(5000))
    full, rest = divmod(5000, ROW_GROUP_ROWS)
    assert [f.metadata.row_group(i).num_rows for i in range(f.num_row_groups)] == [ROW_GROUP_ROWS] * full + [rest]


def test_an_output_that_replaces_a_file_is_sent_to_disk_as_it_is_written(tmp_path, monkeypatch):
    """ext4 writes a file renamed over another out in the rename itself; the writer begins that as each row
    group lands (``sync_file_range``), and only then: a new file is left to the kernel. The bytes are the same."""
    import pyarrow as pa

    from rladv_cli.io import write

    started = []
    monkeypatch.setattr(write, "_start_writeback", lambda fd, start=write._start_writeback: (started.append(fd),
                                                                                              start(fd)))
    schema = pa.schema([pa.field("x", pa.int64())])
    written = {}
    for name in ("new", "replaced", "replaced"):
        out = tmp_path / f"{name}.parquet"
        before = len(started)
        with write.AtomicParquetWriter(str(out), schema) as sink:
            sink.write(pa.table({"x": pa.array(range(3000), pa.int64())}))
            sink.commit()
        written.setdefault(name, []).append((len(started) - before, out.read_bytes()))
    assert [n for n, _ in written["new"] + written["replaced"]] == [0, 0, 6]  # the file exists from the 2nd on
    assert len({data for _, data in written["new"] + written["replaced"]}) == 1


def test_row_groups_are_the_default_chunks():
    """At the default --chunk-rows each chunk is written as one row group, without the copy that joining
    parts of two chunks takes."""
    from rladv_cli.config.settings import Config
    from rladv_cli.io.write import ROW_GROUP_ROWS

    assert Config.model_fields["chunk_rows"].default == ROW_GROUP_ROWS


def test_token_lists_are_written_without_a_dictionary_and_labels_with_one(tmp_path):
    """Dictionary encoding is kept for label columns (``uid``) and skipped for token lists, whose values
    rarely repeat (``io.writer_options``)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from rladv_cli.io.write import AtomicParquetWriter

    out = tmp_path / "out.parquet"
    table = pa.table({"uid": pa.array(["a", "b"] * 1000),
                      "advantages": pa.array([[0.5, -0.5]] * 2000, pa.list_(pa.float32()))})
    with AtomicParquetWriter(str(out), table.schema) as sink:
        sink.write(table)
        sink.commit()
    chunk = pq.ParquetFile(out).metadata.row_group(0)
    encodings = {chunk.column(i).path_in_schema: chunk.column(i).encodings for i in range(chunk.num_columns)}
    assert any("DICTIONARY" in e for e in encodings["uid"])
    assert not any("DICTIONARY" in e for e in encodings["advantages.list.element"])
    assert pq.read_table(out).equals(table)


def test_token_lists_carry_no_statistics_and_labels_do(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from rladv_cli.io.write import AtomicParquetWriter

    out = tmp_path / "out.parquet"
    table = pa.table({"uid": pa.array(["a", "b"] * 10), "advantages": pa.array([[0.5, -0.5]] * 20, pa.list_(pa.float32()))})
    with AtomicParquetWriter(str(out), table.schema) as sink:
        sink.write(table)
        sink.commit()
    chunk = pq.ParquetFile(out).metadata.row_group(0)
    stats = {chunk.column(i).path_in_schema: chunk.column(i).is_stats_set for i in range(chunk.num_columns)}
    assert stats == {"uid": True, "advantages.list.element": False}


class _Early:
    """Stands in for the writers' background encoders (``write._CARRY_POOL``): runs each early encoding at once
    (``now``), never (``never``), or claims it without finishing it (``stuck``: an encoder starved at the
    lowest priority)."""

    def __init__(self, mode: str):
        self.mode = mode

    def submit(self, early) -> Future:
        if self.mode == "now":
            early()
        elif self.mode == "stuck":
            early.__self__._claimed.acquire()
        return Future()


def _carried_table(rows: int) -> pa.Table:
    rng = np.random.default_rng(rows)
    lengths = rng.integers(1, 20, rows)
    offsets = pa.array(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32))
    n = int(lengths.sum())
    return pa.table({"uid": pa.array([f"u{i // 3}" for i in range(rows)]),
                     "responses": pa.ListArray.from_arrays(offsets, pa.array(rng.integers(0, 1000, n).astype(np.int32))),
                     "advantages": pa.ListArray.from_arrays(offsets, pa.array(rng.normal(size=n).astype(np.float32))),
                     "score": pa.array(rng.normal(size=rows))})


def _write_with_carry(monkeypatch, path, table, mode: str, carried_rows: int, chunk: int = 37, end: bool = True):
    from rladv_cli.io import write

    if mode != "threads":
        monkeypatch.setattr(write, "_CARRY_POOL", _Early(mode))
    with write.AtomicParquetWriter(str(path), table.schema, carried=["uid", "responses", "score"]) as sink:
        for start in range(0, carried_rows, chunk):
            sink.carry(table.slice(start, min(chunk, carried_rows - start)))
        if end:
            sink.carry(None)
        for start in range(0, table.num_rows, chunk):
            sink.write(table.slice(start, chunk))
        sink.commit()
    return path.read_bytes()


@pytest.mark.parametrize("mode", ["threads", "now", "never", "stuck"])
@pytest.mark.parametrize("carried_rows, end", [(300, True), (150, False), (0, True)])
def test_carried_columns_encoded_apart_give_the_bytes_of_one_writer(tmp_path, monkeypatch, mode, carried_rows, end):
    """The input columns the output holds unchanged may be encoded early, as the input is read; whether their
    encoding finished early, never started, or is stuck on a starved thread, and whether every row group or
    only the first ones were carried, the file is the one a single writer writes."""
    from rladv_cli.io import write as rio

    monkeypatch.setattr(rio, "ROW_GROUP_ROWS", 64)
    table = _carried_table(300)
    got = _write_with_carry(monkeypatch, tmp_path / "carried.parquet", table, mode, carried_rows, end=end)
    one = tmp_path / "one.parquet"
    with pq.ParquetWriter(one, table.schema, **rio.writer_options(table.schema)) as writer:
        for start in range(0, 300, 64):
            writer.write_table(table.slice(start, 64), row_group_size=64)
    assert got == one.read_bytes()


def test_carried_rows_that_do_not_line_up_with_the_written_ones_leave_nothing(tmp_path, monkeypatch):
    from rladv_cli.io import write as rio

    monkeypatch.setattr(rio, "ROW_GROUP_ROWS", 64)
    table = _carried_table(300)
    with pytest.raises(RuntimeError, match="row group of 64 rows, carried columns of 36"):
        _write_with_carry(monkeypatch, tmp_path / "out.parquet", table, "now", carried_rows=100)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread priorities are Linux's")
def test_the_early_encoders_run_at_the_lowest_priority():
    """They take only CPU time the torch import and the reading leave idle (nice 19, this thread only)."""
    import threading

    from rladv_cli.io.write import _lowest_priority

    seen = []

    def probe():
        _lowest_priority()
        seen.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))

    worker = threading.Thread(target=probe)
    worker.start()
    worker.join()
    assert seen == [19]
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) != 19


def test_every_writer_of_a_process_shares_its_early_encoders(tmp_path, monkeypatch):
    """A Ray worker holds one writer per shard: their carried columns are encoded by the same ``ENCODERS``
    threads, not by threads of each writer's own that would queue for the GIL beside the passes."""
    import threading

    from rladv_cli.io import write

    monkeypatch.setattr(write, "ROW_GROUP_ROWS", 64)
    monkeypatch.setattr(write, "_CARRY_POOL", write._CarryPool())
    table = _carried_table(300)
    writers = [write.AtomicParquetWriter(str(tmp_path / f"{i}.parquet"), table.schema, carried=["uid", "responses", "score"])
               for i in range(2 * write.ENCODERS + 1)]
    try:
        for sink in writers:
            sink.carry(table)
            sink.carry(None)
        for sink in writers:
            for start in range(0, table.num_rows, 64):
                sink.write(table.slice(start, 64))
            sink.commit()
    finally:
        for sink in writers:
            sink.abort()
    carriers = {t.name for t in threading.enumerate() if t.name.startswith("rladv-carry")}
    assert 0 < len(write._CARRY_POOL._pool._threads) <= write.ENCODERS and len(carriers) <= write.ENCODERS
    first = (tmp_path / "0.parquet").read_bytes()
    assert all((tmp_path / f"{i}.parquet").read_bytes() == first for i in range(len(writers)))
