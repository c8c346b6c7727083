"""Benchmark: `rladv compute --engine ray` on a local Ray cluster of 1 and 2 workers, and the local engine.

    .venv/bin/python bench/ray_scaling.py [--tokens 5M] [--shards 8] [--workers 1,2] [--estimator grpo] [--repeat 3]

The dataset is bench.py's (seeded; lengths uniform in [T/4, T], groups of 4, rows shuffled so groups span
shards), split by rows into ``--shards`` files under bench/data/. Each run is a fresh process, so the wall
time includes start-up (torch, and for Ray the cluster's start and shutdown); "passes" is the time the
report measured inside the run (the passes alone). Each figure is the best of ``--repeat`` runs, which keeps
other work on a shared machine out of it as far as it can.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import DATA, make_dataset, parse_size  # noqa: E402


def shards(tokens: int, count: int) -> Path:
    """``count`` files of (nearly) equal row counts holding bench.py's dataset of ``tokens`` tokens."""
    folder = DATA / f"shards_{tokens}_{count}"
    if folder.is_dir() and len(list(folder.glob("*.parquet"))) == count:
        return folder
    whole = DATA / f"bench_{tokens}.parquet"
    if not whole.exists():
        DATA.mkdir(parents=True, exist_ok=True)
        make_dataset(tokens, whole)
    table = pq.read_table(whole)
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        start, stop = i * table.num_rows // count, (i + 1) * table.num_rows // count
        pq.write_table(table.slice(start, stop - start), folder / f"part-{i:03d}.parquet", compression="zstd",
                       row_group_size=1024)
    return folder


def run(args: list[str], report: Path, repeat: int) -> tuple[float, float]:
    """The least (wall seconds of a fresh ``rladv compute`` process, seconds its report measured) of
    ``repeat`` runs."""
    best = (float("inf"), float("inf"))
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "from rladv_cli.cli import main; main()", "compute", *args, "-q",
                        "--device", "cpu", "--report", str(report)], check=True)
        wall = time.perf_counter() - t0
        best = min(best[0], wall), min(best[1], json.loads(report.read_text())["timing"]["seconds"]["total"])
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", default="5M")
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--estimator", default="grpo")
    parser.add_argument("--repeat", type=int, default=3)
    opts = parser.parse_args()
    tokens = parse_size(opts.tokens)
    folder = shards(tokens, opts.shards)
    out = DATA / "ray_out"
    print(f"{tokens} tokens in {opts.shards} shards ({folder}), estimator {opts.estimator}")
    print(f"{'engine':>10} {'workers':>8} {'wall s':>8} {'passes s':>9} {'Mtok/s':>7}")
    local_wall, local_passes = run([str(folder), "--estimator", opts.estimator, "-o", str(DATA / "local.parquet")],
                                   DATA / "local.json", opts.repeat)
    print(f"{'local':>10} {'-':>8} {local_wall:8.2f} {local_passes:9.2f} {tokens / local_wall / 1e6:7.2f}")
    for n in (int(w) for w in opts.workers.split(",")):
        wall, passes = run([str(folder), "--estimator", opts.estimator, "--engine", "ray", "--ray-workers", str(n),
                            "-o", str(out)], DATA / f"ray{n}.json", opts.repeat)
        print(f"{'ray':>10} {n:>8} {wall:8.2f} {passes:9.2f} {tokens / wall / 1e6:7.2f}")


if __name__ == "__main__":
    main()
