"""Benchmark: rladv end to end and its kernels against the padded-loop baseline and the Parquet I/O floor.

    .venv/bin/python bench/bench.py [--tokens 0.2M,1.3M,5M] [--estimators gae,grpo,rloo,reinforce_plus_plus]
                                    [--loss-agg-mode MODE]

For each dataset size (generated once into bench/data/, seeded; lengths uniform in [T/4, T], groups of 4,
tool-observation spans) and estimator, one run prints:
  e2e      `rladv compute` as a fresh process (start-up, every pass, writing), wall seconds and tokens/s:
           the median of --repeat runs (single runs on a shared machine vary by about 15%)
  rss      the largest peak resident memory of those processes
  kernel   rladv's estimator function alone on the whole dataset as one flat batch (in process), best of 5
  loop     the baseline (bench/baseline.py): verl-style padded [B, T] tensors, Python loop over time
  floor    reading the input with pyarrow + writing rladv's output table (already in memory), zstd, pyarrow's
           other defaults (the issue's I/O floor); the median of --repeat measurements
  Every e2e run and floor measurement starts after os.sync(), so none pays for the last one's write-back; rladv's
           bytecode is written first (``compile_bytecode``), as an installed package has it from its first run.
           The e2e runs and the floors take turns (one e2e run, then one of each floor, and so on), so that a
           machine that slows down or speeds up over a cell moves both sides of e2e/floor alike.
  start    a fresh interpreter that imports pyarrow.parquet (numpy with it) and exits, as the executable runs it:
           the part of a fresh process that any Python reader and writer of Parquet pays before it reads; the
           median of --repeat measurements, taken in turn with the others. ``e2e/pfloor`` is e2e over
           ``start + floor``, the floor as a fresh process would pay it
  floor2   the same with rladv's own writer settings (no dictionary or statistics for token lists, 512-row groups)
  warm     ``rladv_cli.compute_file`` (the library, the executable's process settings) in one process that ran it
           once before: the median of --repeat runs, each after os.sync(), taken after the cell's other runs; what
           a run costs without a fresh interpreter and its imports
The floors run on pyarrow's default allocator (the machine line names it; measured here, jemalloc, which the
`rladv` executable picks on Linux, gives no lower floor), or on ARROW_DEFAULT_MEMORY_POOL when it is set.
"""
from __future__ import annotations

import argparse
import compileall
import os
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute  # noqa: F401 - pa.compute below
import pyarrow.parquet as pq
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import baseline  # noqa: E402

import rladv_cli  # noqa: E402
from rladv_cli.estimators.inputs import Inputs  # noqa: E402
from rladv_cli.io.write import ROW_GROUP_ROWS, writer_options  # noqa: E402
from rladv_cli.tensors.batch import as_array, from_arrow  # noqa: E402
from rladv_cli.tensors.groups import group_stats  # noqa: E402

DATA = Path(os.environ.get("RLADV_BENCH_DATA") or Path(__file__).resolve().parent / "data")  # datasets, outputs
T_MAX = 4096


def parse_size(text: str) -> int:
    text = text.strip().upper()
    scale = {"K": 1e3, "M": 1e6}.get(text[-1], 1)
    return int(float(text.rstrip("KM")) * scale)


def make_dataset(tokens: int, path: Path) -> None:
    """Rows of length uniform in [T/4, T] until ``tokens`` tokens; groups of 4; 1-3 observation spans."""
    rng = np.random.default_rng(tokens)
    lengths = []
    while sum(lengths) < tokens:
        lengths.append(int(rng.integers(T_MAX // 4, T_MAX + 1)))
    B = len(lengths)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    N = int(offsets[-1])
    mask = np.ones(N, dtype=np.int8)
    for i in range(B):
        for _ in range(rng.integers(1, 4)):
            a = int(offsets[i] + rng.integers(0, lengths[i]))
            mask[a:min(a + int(rng.integers(10, 200)), int(offsets[i + 1]) - 1)] = 0
    scores = np.zeros(N, dtype=np.float32)
    scores[offsets[1:] - 1] = rng.choice([0.0, 0.5, 1.0], B)
    values = (rng.normal(size=N).astype(np.float32) * mask).astype(np.float32)
    old = rng.normal(-1, 0.3, N).astype(np.float32)
    ref = (old + rng.normal(0, 0.05, N)).astype(np.float32)

    def lst(v):
        return pa.ListArray.from_arrays(pa.array(offsets), pa.array(v))

    order = rng.permutation(B)
    table = pa.table({
        "uid": [f"p{i // 4}" for i in range(B)],
        "response_mask": lst(mask), "rm_scores": lst(scores), "values": lst(values),
        "old_log_probs": lst(old), "ref_log_prob": lst(ref),
    }).take(order)
    pq.write_table(table, path, compression="zstd", row_group_size=1024)


def dataset(tokens: int) -> Path:
    """The seeded dataset of about ``tokens`` tokens in ``DATA``, generated the first time."""
    path = DATA / f"bench_{tokens}.parquet"
    if not path.exists():
        DATA.mkdir(parents=True, exist_ok=True)
        make_dataset(tokens, path)
    return path


def token_count(path: Path) -> int:
    mask = pq.read_table(path, columns=["response_mask"])["response_mask"]
    return int(pa.compute.sum(pa.compute.list_value_length(mask)).as_py())


def end_to_end(path: Path, estimator: str, out: Path, device: str = "cpu", extra: tuple[str, ...] = ()) -> tuple[float, float]:
    """`rladv compute` (with the flags ``extra``) as a fresh process, as the executable runs it: wall seconds and
    peak RSS (MiB)."""
    return fresh_process(["compute", str(path), "--estimator", estimator, "-o", str(out), "-q", "--device", device,
                          *extra])


def warm(path: Path, estimator: str, out: Path, repeat: int, extra: tuple[str, ...] = ()) -> float:
    """``rladv_cli.compute_file`` on the CPU, ``repeat`` times in one fresh process after one untimed run: the
    median seconds. ``extra``: command-line flags with a value (``--loss-agg-mode MODE``), given as settings."""
    settings = {flag.lstrip("-").replace("-", "_"): value for flag, value in zip(extra[::2], extra[1::2])}
    code = (
        "import os, statistics, time\n"
        "from rladv_cli.__main__ import set_environment\n"
        "set_environment()\n"
        "import rladv_cli\n"
        f"run = lambda: rladv_cli.compute_file({str(path)!r}, estimator={estimator!r}, output={str(out)!r}, "
        f"device='cpu', **{settings!r})\n"
        "run()\n"
        "times = []\n"
        f"for _ in range({repeat}):\n"
        "    os.sync()\n"
        "    t0 = time.perf_counter()\n"
        "    run()\n"
        "    times.append(time.perf_counter() - t0)\n"
        "print(statistics.median(times))\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(res.stdout.strip().splitlines()[-1])


def compile_bytecode() -> None:
    """Write rladv's bytecode (``__pycache__``) before the timed runs, as a package has it from its first run on.
    Where ``PYTHONDONTWRITEBYTECODE`` is set (as on our development machines) every fresh process would compile
    rladv's modules from source again: about 0.05 s of each run that no user's second run pays."""
    compileall.compile_dir(Path(rladv_cli.__file__).parent, quiet=1)


def fresh_process(argv: list[str]) -> tuple[float, float]:
    """``rladv ARGV`` in a fresh process, as the executable runs it: wall seconds and peak RSS (MiB)."""
    code = (
        "import atexit, sys\n"
        # VmHWM belongs to this process image; ru_maxrss would also count the parent's pages before exec.
        # the executable's own entry: its settings, the prefetch of the input, then cli.main, which runs the exit
        # handlers and leaves without the interpreter's teardown, as `rladv` does.
        "atexit.register(lambda: print(next(int(l.split()[1]) for l in open('/proc/self/status') "
        "if l.startswith('VmHWM')), flush=True))\n"
        f"sys.argv = ['rladv', *{argv!r}]\n"
        "from rladv_cli.__main__ import main\n"
        "main()\n"
    )
    os.sync()
    t0 = time.perf_counter()
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return time.perf_counter() - t0, int(res.stdout.strip().splitlines()[-1]) / 1024


def start_up() -> float:
    """Wall seconds of a fresh interpreter that imports ``pyarrow.parquet`` (and so numpy) with the executable's
    process settings, and exits without the interpreter's teardown, as ``rladv`` does."""
    code = ("from rladv_cli.__main__ import set_environment\nset_environment()\nimport os, pyarrow.parquet\n"
            "os._exit(0)\n")
    os.sync()
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True)
    return time.perf_counter() - t0


def kernel_time(table: pa.Table, estimator: str, device: str = "cpu") -> float:
    """rladv's estimator function alone on ``table`` as one flat batch on ``device``: the best of 5 calls
    (synchronised on a GPU)."""
    cfg = rladv_cli.Config(estimator=estimator, lam=0.95, device=device)
    est = rladv_cli.ESTIMATORS[estimator]
    longest = int(pa.compute.max(pa.compute.list_value_length(table["response_mask"])).as_py())
    # numpy arrays on the CPU, torch tensors on a GPU, as `rladv compute` holds them (docs/arrays.md)
    batch = replace(from_arrow(table, 0, device), pad_width=as_array(np.full(table.num_rows, longest), device))
    gid = as_array(np.unique(table["uid"].to_numpy(zero_copy_only=False), return_inverse=True)[1], device)
    reward = batch.row_total(batch.token_level_rewards)
    groups = group_stats(reward, gid, int(gid.max()) + 1, batch.row_sum(batch.response_mask), est.group_statistics)
    known = dict(reward_total=reward, group_index=gid, groups=groups)
    inputs = Inputs(**{name: value for name, value in known.items() if name in est.needs})
    params = cfg.params()
    fn = est.fn
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    fn(batch, inputs, params)
    sync()
    times = []
    for _ in range(5):  # the best of 5: one call's time swings 3x with whether its output pages are fresh
        t0 = time.perf_counter()
        fn(batch, inputs, params)
        sync()
        times.append(time.perf_counter() - t0)
    return min(times)


def loop_time(table: pa.Table, estimator: str) -> float:
    rows = {c: table[c].to_pylist() for c in ("response_mask", "rm_scores", "values")}
    B, T = table.num_rows, max(len(r) for r in rows["response_mask"])

    def pad(name, dtype):
        out = torch.zeros(B, T, dtype=dtype)
        for i, r in enumerate(rows[name]):
            out[i, : len(r)] = torch.tensor(r, dtype=dtype)
        return out

    m, r, v = pad("response_mask", torch.int64), pad("rm_scores", torch.float32), pad("values", torch.float32)
    index = np.array(table["uid"].to_pylist(), dtype=object)
    t0 = time.perf_counter()
    baseline.run(estimator, r, v, m, index)
    return time.perf_counter() - t0


def io_floor(path: Path, out_table: pa.Table, scratch: Path, **write_options) -> float:
    """Read the input with pyarrow, then write the output table, already in memory: zstd, pyarrow's defaults
    unless ``write_options`` (rladv's own: ``io.writer_options``, 512-row groups) say otherwise."""
    os.sync()
    t0 = time.perf_counter()
    pq.read_table(path)
    pq.write_table(out_table, scratch, **{"compression": "zstd", **write_options})
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", default="0.2M,1.3M,5M")
    ap.add_argument("--estimators", default="gae,grpo,rloo,reinforce_plus_plus")
    ap.add_argument("--no-loop", action="store_true", help="skip the padded-loop baseline")
    ap.add_argument("--repeat", type=int, default=3, help="end-to-end runs per cell (the median is shown)")
    ap.add_argument("--loss-agg-mode", metavar="MODE", help="also time each estimator with --loss-agg-mode MODE "
                    "(the row ESTIMATOR+MODE; its floor writes its own output, token_weight included)")
    args = ap.parse_args()
    torch.set_num_threads(1)  # as rladv runs by default; the baseline gets the same single thread
    DATA.mkdir(exist_ok=True)
    compile_bytecode()
    from rladv_cli.tensors.kernels import NATIVE_SCAN

    print(f"machine: {os.cpu_count()} cores, numpy {np.__version__} (rladv on the CPU), torch {torch.__version__} "
          f"(the baseline, threads {torch.get_num_threads()}), "
          f"C scan {'built' if NATIVE_SCAN else 'NOT built (torch scans)'}, "
          f"floors on Arrow's {pa.default_memory_pool().backend_name} allocator")
    header = (f"{'tokens':>9} {'estimator':<20} {'e2e s':>7} {'Mtok/s':>7} {'rss MiB':>8} {'kernel s':>9} {'loop s':>8} "
              f"{'loop/kern':>9} {'floor s':>8} {'e2e/floor':>9} {'start s':>7} {'e2e/pfloor':>10} {'floor2 s':>8} "
              f"{'e2e/floor2':>10} {'warm s':>7} {'warm/floor':>10}")
    print(header)
    for size in args.tokens.split(","):
        n = parse_size(size)
        path = dataset(n)
        tokens = token_count(path)
        variants = [(e, ()) for e in args.estimators.split(",")]
        if args.loss_agg_mode:
            variants += [(e, ("--loss-agg-mode", args.loss_agg_mode)) for e in args.estimators.split(",")]
        for estimator, extra in variants:
            out = DATA / f"out_{n}_{estimator}.parquet"
            label = estimator + (f"+{extra[1]}" if extra else "")
            # Each measurement starts from a quiet machine: no dirty pages of the last one still being written
            # back, and no large table held here during an e2e run (the output is read again for each floor).
            runs, floors, floors2, starts = [], [], [], []
            for _ in range(args.repeat):
                runs.append(end_to_end(path, estimator, out, extra=extra))
                written = pq.read_table(out)
                floors.append(io_floor(path, written, DATA / "floor.parquet"))
                floors2.append(io_floor(path, written, DATA / "floor.parquet", row_group_size=ROW_GROUP_ROWS,
                                        **writer_options(written.schema)))
                del written
                starts.append(start_up())
            e2e, rss = statistics.median(r[0] for r in runs), max(r[1] for r in runs)
            floor, floor2, start = statistics.median(floors), statistics.median(floors2), statistics.median(starts)
            library = warm(path, estimator, out, args.repeat, extra)
            table = pq.read_table(path)
            kern = kernel_time(table, estimator)
            loop = float("nan") if args.no_loop else loop_time(table, estimator)
            print(f"{tokens:>9} {label:<20} {e2e:>7.2f} {tokens / e2e / 1e6:>7.2f} {rss:>8.0f} {kern:>9.3f} "
                  f"{loop:>8.3f} {loop / kern:>9.1f} {floor:>8.2f} {e2e / floor:>9.2f} {start:>7.2f} "
                  f"{e2e / (start + floor):>10.2f} {floor2:>8.2f} {e2e / floor2:>10.2f} {library:>7.2f} "
                  f"{library / floor:>10.2f}")
            out.unlink()
            del table


if __name__ == "__main__":
    main()
