"""Benchmark: `rladv compare` of three runs against the named baseline "one rladv compute" on the same data.

    .venv/bin/python bench/compare.py [--tokens 1.3M,5M,20M] [--repeat 3] [--output]

Each size is bench.py's seeded dataset (bench/data/, or RLADV_BENCH_DATA: lengths uniform in [T/4, T], groups
of 4, tool-observation spans, values and log-probs). Every command runs as a fresh process, as the executable
runs it, after os.sync(), in this order, --repeat times:
  one rladv compute   `rladv compute DATA --estimator grpo -o OUT -q --device cpu` (start-up, every pass, the
                      output written): the baseline
  compare, 3 runs     `rladv compare DATA --run "grpo: --estimator grpo" --run "dr grpo: --estimator grpo
                      --no-norm-adv-by-std" --run "rloo: --estimator rloo" -q --device cpu`
  compare, 3 runs -o  the same writing the input rows and the three advantages columns (with --output)
and prints per command the median wall seconds, tokens per second (the dataset's tokens over the wall time),
the largest peak resident memory (VmHWM) and the ratio of its median to the baseline's. The issue's target is
compare at most 1.6x one compute at 20M tokens.

What compare shares between its runs: one process start and torch import, one read and check of the dataset
(decoded once, kept in memory when it fits --cache-mib, as compute keeps it for its passes). Each run's passes
are its own; instead of an output it writes its advantages to a temporary spill file (4 bytes per token), and
one last pass compares them chunk by chunk.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import DATA, dataset, fresh_process, parse_size, token_count  # noqa: E402

RUNS = ["--run", "grpo: --estimator grpo", "--run", "dr grpo: --estimator grpo --no-norm-adv-by-std",
        "--run", "rloo: --estimator rloo"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", default="1.3M,5M")
    ap.add_argument("--repeat", type=int, default=3, help="runs per command (the median is shown)")
    ap.add_argument("--output", action="store_true", help="also time compare writing -o")
    args = ap.parse_args()
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at the start")
    print(f"{'tokens':>9} {'command':<20} {'wall s':>7} {'Mtok/s':>7} {'rss MiB':>8} {'x compute':>9}")
    for size in args.tokens.split(","):
        path = dataset(parse_size(size))
        tokens = token_count(path)
        out = DATA / "compare_out.parquet"
        commands = {
            "one rladv compute": ["compute", str(path), "--estimator", "grpo", "-o", str(out), "-q", "--device", "cpu"],
            "compare, 3 runs": ["compare", str(path), *RUNS, "-q", "--device", "cpu"],
        }
        if args.output:
            commands["compare, 3 runs -o"] = [*commands["compare, 3 runs"], "-o", str(out)]
        measured = {name: [] for name in commands}
        for _ in range(args.repeat):  # interleaved, so that a busy spell of the machine hits every command
            for name, argv in commands.items():
                measured[name].append(fresh_process(argv))
        base = statistics.median(s for s, _ in measured["one rladv compute"])
        for name, runs in measured.items():
            wall, rss = statistics.median(s for s, _ in runs), max(r for _, r in runs)
            print(f"{tokens:>9} {name:<20} {wall:>7.2f} {tokens / wall / 1e6:>7.2f} {rss:>8.0f} {wall / base:>9.2f}")
        out.unlink(missing_ok=True)
    print(f"load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
