"""Benchmark: ``rladv compute --engine ray`` on an already running Ray cluster with 1 and 2 workers, against the
local engine in the same run, and a model of N workers from the measured figures.

    .venv/bin/python bench/ray_scaling.py [--tokens 20M] [--shards 8] [--workers 1,2] [--estimator grpo]
                                          [--repeat 3] [--ray-address HOST:PORT]

The dataset is bench.py's (seeded; lengths uniform in [T/4, T], groups of 4, rows shuffled so groups span
shards), split by rows into ``--shards`` files under bench/data/. Without ``--ray-address`` the script starts a
cluster on this machine (``ray start --head --block``, every CPU) before the first run and stops it after the
last, so no run pays for a cluster's start, as a user who joins a cluster does not. Each run is a fresh
process: the local engine as ``rladv compute``, Ray's through ``bench/ray_timeline.py`` (the same command with
timing hooks), run in turn (local, 1 worker, 2 workers, then again) after one warm-up each; then, for each
worker count, runs with ``--ray-keep-workers`` ("kept": the warm-up starts the workers, every later run is
served by them) in turn with the local engine. Each figure is the best of ``--repeat``; the local
engine's, which runs in every block, the best of all its runs. "passes" is the time the report measured inside the run; "worker s" the seconds the
workers spent in their calls (Σ over calls, from the timeline).

The model (docs/ray.md), once from the best 1-worker run and once from the best kept one: ``c`` = worker seconds per shard, ``D`` = the driver's
part of the passes (passes − worker seconds: merges, reductions, transfers), ``S`` = wall − passes (start-up,
joining, the actors' start, exit). A dataset of ``k`` times as many shards of the same size on ``N`` workers,
each with cores of its own, takes ``S + k·D + ceil(k·shards / N)·c``; the local engine
``(wall − passes) + k·passes``. The last line of the output gives, for each N, the dataset size from which
Ray takes less time: ``k > (S − (wall − passes)) / (passes − D − shards·c / N)`` ("always" where Ray's start
costs no more than the local engine's, "<1M" below a million tokens, "never" where a shard costs Ray more).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import DATA, compile_bytecode, make_dataset, parse_size  # noqa: E402

HERE = Path(__file__).resolve().parent
KEEP_S = 60  # --ray-keep-workers of the kept runs


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


@contextmanager
def cluster(address: str | None):
    """The cluster's address: ``address``, or that of one started here for the block (and stopped after)."""
    if address:
        yield address
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # a token of its own, for the cluster and every run (a Ray 2.59+ head checks one when ~/.ray has one)
    os.environ.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(32))
    ray = Path(sys.executable).with_name("ray")
    head = subprocess.Popen([str(ray), "start", "--head", "--block", f"--port={port}", "--node-ip-address=127.0.0.1",
                             f"--num-cpus={os.cpu_count()}", "--include-dashboard=false", "--disable-usage-stats"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or head.poll() is not None:
                    raise SystemExit("ray start --head did not come up")
                time.sleep(0.2)
        yield f"127.0.0.1:{port}"
    finally:
        os.killpg(head.pid, signal.SIGTERM)  # --block: ray start stops what it started
        head.wait(timeout=60)


def run(command: list[str], report: Path, timeline: Path | None = None) -> dict:
    """One fresh process: wall seconds, the report's passes and, from a Ray timeline, the workers' seconds."""
    env = {**os.environ, "RLADV_TIMELINE_JSON": str(timeline)} if timeline else None
    t0 = time.perf_counter()
    subprocess.run([*command, "-q", "--device", "cpu", "--report", str(report)], check=True, env=env,
                   stderr=subprocess.DEVNULL if timeline else None)
    figures = {"wall": time.perf_counter() - t0, "passes": json.loads(report.read_text())["timing"]["seconds"]["total"]}
    if timeline:
        begun: dict[tuple[str, str], float] = {}
        busy = 0.0
        for t, who, what in json.loads(timeline.read_text()):
            call = what.split(" (")[0].rsplit(" ", 1)
            if who.startswith("worker") and call[-1] in ("begins", "done") and " shard " in call[0]:
                if call[-1] == "begins":
                    begun[who, call[0]] = t
                else:
                    busy += t - begun.pop((who, call[0]))
        figures["worker"] = busy
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", default="20M")
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--estimator", default="grpo")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--ray-address", default=None, help="a running cluster (default: one started here)")
    opts = parser.parse_args()
    compile_bytecode()  # the driver's and the workers' imports, as on an installed package
    tokens = parse_size(opts.tokens)
    folder = shards(tokens, opts.shards)
    workers = [int(w) for w in opts.workers.split(",")]
    scratch = Path(tempfile.mkdtemp(prefix="rladv-ray-bench-"))
    rladv = [sys.executable, "-c", "from rladv_cli.__main__ import main; main()", "compute", str(folder),
             "--estimator", opts.estimator]
    with cluster(opts.ray_address) as address:
        local = ([*rladv, "-o", str(scratch / "local.parquet")], None)

        def ray_run(n: int, keep: bool) -> tuple[list[str], Path]:
            name = f"ray{n}{'kept' if keep else ''}"
            return ([sys.executable, str(HERE / "ray_timeline.py"), *rladv[3:], "--engine", "ray", "--ray-address",
                     address, "--ray-workers", str(n), *(["--ray-keep-workers", str(KEEP_S)] if keep else []),
                     "-o", str(scratch / name)], scratch / f"{name}.events.json")

        # fresh workers, all in turn; then kept workers, one shape at a time (a run of another shape would stop
        # them), each in turn with the local engine
        blocks = [{"local": local, **{f"ray {n}": ray_run(n, False) for n in workers}}]
        blocks += [{"local": local, f"ray {n} kept": ray_run(n, True)} for n in workers]
        best: dict[str, dict] = {}
        for commands in blocks:
            for rounds in range(opts.repeat + 1):  # round 0 warms the page cache, the cluster and kept workers up
                for name, (command, timeline) in commands.items():
                    figures = run(command, scratch / f"{name}.json", timeline)
                    if rounds and (name not in best or figures["wall"] < best[name]["wall"]):
                        best[name] = figures
    print(f"{tokens} tokens in {opts.shards} shards ({folder}), estimator {opts.estimator}, "
          f"{os.cpu_count()} cores, best of {opts.repeat}, cluster {'at ' + opts.ray_address if opts.ray_address else 'started here'}")
    local = best["local"]
    print(f"{'engine':>8} {'workers':>7} {'wall s':>7} {'passes s':>8} {'worker s':>8} {'Mtok/s':>7} "
          f"{'wall x':>6} {'passes x':>8}")
    for name, f in best.items():
        kind, _, n = name.partition(" ")
        print(f"{kind:>8} {n or '-':>7} {f['wall']:7.2f} {f['passes']:8.2f} {f.get('worker', float('nan')):8.2f} "
              f"{tokens / f['wall'] / 1e6:7.2f} {f['wall'] / local['wall']:6.2f} {f['passes'] / local['passes']:8.2f}")
    for name in ("ray 1", "ray 1 kept"):
        if name in best:
            model(name, best[name], local, tokens, opts.shards)


def model(name: str, one: dict, local: dict, tokens: int, shards: int) -> None:
    """The model (module docstring) from the 1-worker run ``one``: its table and the "Ray wins from" line."""
    c, d, s = one["worker"] / shards, one["passes"] - one["worker"], one["wall"] - one["passes"]
    print(f"\nmodel, from the {name} run: c = {c:.3f} s per shard, D = {d:.2f} s (driver in the passes), "
          f"S = {s:.2f} s (start-up and exit); local: {local['wall'] - local['passes']:.2f} s + {local['passes']:.2f} s")
    print(f"{'dataset':>10} {'local s':>8}" + "".join(f" {f'N={n} s':>8}" for n in (1, 2, 4, 8, 16, 64)))
    for k in (1, 4, 16, 64):
        ray = [s + k * d + math.ceil(k * shards / n) * c for n in (1, 2, 4, 8, 16, 64)]
        local_s = local["wall"] - local["passes"] + k * local["passes"]
        print(f"{k * tokens / 1e6:9.0f}M {local_s:8.1f}" + "".join(f" {t:8.1f}" for t in ray))
    # k·(passes − D − shards·c/N) > S − (wall − passes): the size from which N workers take less time than local
    even = []
    for n in (1, 2, 4, 8, 16, 64):
        gain = local["passes"] - d - shards * c / n
        lead = s - local["wall"] + local["passes"]
        size = lead / gain * tokens / 1e6 if gain > 0 else 0.0
        even.append("never" if gain <= 0 else "always" if lead <= 0 else f"{size:.0f}M" if size >= 1 else "<1M")
    print(f"{'Ray wins from':>19}" + "".join(f" {e:>8}" for e in even))


if __name__ == "__main__":
    main()
