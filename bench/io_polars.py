"""Benchmark: polars' Parquet reader and writer against rladv's pyarrow path, on bench.py's datasets.

    .venv/bin/python bench/io_polars.py [--tokens 5M,20M] [--repeat 3]

Each measurement runs in a fresh process (peak resident memory is its own, VmHWM, imports and set-up included)
after os.sync(); seconds are the timed step alone, the median of --repeat runs:
  read  pyarrow   ParquetFile.iter_batches(512 rows), every column: what each rladv pass does (Shard.chunks)
        polars    scan_parquet(...).collect_batches(chunk_size=512) to Arrow: the streaming equivalent
        polars*   read_parquet, the whole file at once on every core (no streaming; for reference)
  write rladv     AtomicParquetWriter (rladv's writer: 512-row groups, zstd, no dictionary or statistics for
                  token lists, a temporary file renamed), the output table handed over in 512-row chunks
        polars    DataFrame.write_parquet (zstd, 512-row groups, statistics off), multi-threaded
  Each writer writes the same output twice; "same bytes" says whether the two files are identical.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402

CHUNK = 512
READERS = {  # (set-up, timed)
    "pyarrow": ("import pyarrow.parquet as pq\n",
                "f = pq.ParquetFile(PATH, pre_buffer=False)\n"
                "rows = sum(b.num_rows for b in f.iter_batches(batch_size=512))\n"),
    "polars": ("import polars as pl\n",
               "rows = sum(df.to_arrow().num_rows for df in pl.scan_parquet(PATH).collect_batches(chunk_size=512))\n"),
    "polars*": ("import polars as pl\n", "rows = pl.read_parquet(PATH).height\n"),
}
WRITERS = {
    "rladv": ("import pyarrow.parquet as pq\n"
              "from rladv_cli.io.write import AtomicParquetWriter\n"
              "t = pq.read_table(SOURCE)\n",
              "with AtomicParquetWriter(OUT, t.schema) as w:\n"
              "    for i in range(0, t.num_rows, 512):\n"
              "        w.write(t.slice(i, 512))\n"
              "    w.finish()\n"
              "    w.commit()\n"),
    "polars": ("import polars as pl\n"
               "df = pl.read_parquet(SOURCE)\n",
               "df.write_parquet(OUT, compression='zstd', row_group_size=512, statistics=False)\n"),
}


def _child(setup: str, timed: str, **names: str) -> tuple[float, float]:
    """Run ``setup`` then ``timed`` in a fresh interpreter: (seconds of ``timed``, peak RSS in MiB)."""
    code = ("import time\n" + "".join(f"{k} = {v!r}\n" for k, v in names.items()) + setup
            + "t0 = time.perf_counter()\n" + timed + "print(time.perf_counter() - t0)\n"
            "print(next(int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmHWM')))\n")
    os.sync()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    return float(out[-2]), int(out[-1]) / 1024


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", default="5M,20M")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    import polars as pl
    import pyarrow as pa

    import rladv_cli

    print(f"polars {pl.__version__}, pyarrow {pa.__version__}, {os.cpu_count()} CPUs, median of {args.repeat}")
    print(f"{'tokens':>8} {'what':<6} {'path':<8} {'seconds':>8} {'Mtok/s':>7} {'peak MiB':>9} {'same bytes':>10}")
    for size in (bench.parse_size(s) for s in args.tokens.split(",")):
        path = bench.dataset(size)
        tokens = bench.token_count(path)
        output = bench.DATA / f"io_output_{size}.parquet"  # the output table, written once by rladv itself
        if not output.exists():
            rladv_cli.compute_file(str(path), estimator="grpo", output=str(output), device="cpu")
        for name, (setup, timed) in READERS.items():
            runs = [_child(setup, timed, PATH=str(path)) for _ in range(args.repeat)]
            secs, rss = statistics.median(r[0] for r in runs), max(r[1] for r in runs)
            print(f"{size:>8} {'read':<6} {name:<8} {secs:8.3f} {tokens / secs / 1e6:7.1f} {rss:9.0f} {'-':>10}")
        for name, (setup, timed) in WRITERS.items():
            outs = [bench.DATA / f"io_{name}_{k}.parquet" for k in range(args.repeat)]
            runs = [_child(setup, timed, SOURCE=str(output), OUT=str(out)) for out in outs]
            secs, rss = statistics.median(r[0] for r in runs), max(r[1] for r in runs)
            same = len({_digest(out) for out in outs}) == 1
            print(f"{size:>8} {'write':<6} {name:<8} {secs:8.3f} {tokens / secs / 1e6:7.1f} {rss:9.0f} {str(same):>10}")
            for out in outs:
                out.unlink()


if __name__ == "__main__":
    main()
