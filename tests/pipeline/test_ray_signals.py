"""``rladv compute --engine ray`` stopped by SIGTERM, as the local engine is (tests/io/test_atomic.py): exit 143, nothing
on stderr, no output, no report, no ``.rladv-*`` staging folder or temporary file, the input untouched, an output
folder that was there before left as it was, and no process of the run (local Ray cluster) left behind.

``ray.init`` used to replace the executable's SIGTERM handler with Ray's own: the run exited 15, after a C++ stack
trace from Ray on stderr.
"""
from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import as_from_a_terminal, rladv_command

pytest.importorskip("ray")
pytestmark = [pytest.mark.skipif(not sys.platform.startswith("linux"), reason="finds the run's processes in /proc"),
              pytest.mark.slow]  # slow: Ray runs as subprocesses, stopped by signals

SHARDS, ROWS = 4, 2_000  # rows per shard, ~100 tokens each: a few seconds of passes on 2 workers
TIMEOUT = 90  # seconds, for each wait: a loaded 2-core machine starts Ray slowly


def _dataset(folder: Path) -> dict[str, str]:
    """``SHARDS`` files of grpo rollouts (groups of 4) in ``folder``; their digests by name."""
    rng = np.random.default_rng(5)
    folder.mkdir()
    for i in range(SHARDS):
        lengths = rng.integers(50, 150, ROWS)
        offsets = pa.array(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32))
        scores = np.zeros(int(lengths.sum()), dtype=np.float32)
        scores[np.cumsum(lengths) - 1] = rng.integers(0, 2, ROWS)
        pq.write_table(pa.table({
            "uid": [f"s{i}-g{r // 4}" for r in range(ROWS)],
            "response_mask": pa.ListArray.from_arrays(offsets, pa.array(np.ones(int(lengths.sum()), np.int8))),
            "rm_scores": pa.ListArray.from_arrays(offsets, pa.array(scores)),
        }), folder / f"part-{i}.parquet")
    return _digests(folder)


def _digests(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def _staging(out: Path) -> list[Path]:
    try:
        return [p for p in out.iterdir() if p.name.startswith(".rladv-")]
    except FileNotFoundError:
        return []


def _started_writing(out: Path) -> bool:
    """The write pass has begun: a shard's temporary file in the staging folder holds more than its leading
    ``PAR1`` (a worker makes each shard's file as it begins the run, and appends its first row group in the
    write pass)."""
    try:
        return any(f.stat().st_size > 4 for s in _staging(out) for f in s.iterdir())
    except FileNotFoundError:  # the staging folder, or a file, went between the looks
        return False


def _session(sid: int) -> list[str]:
    """The live processes of session ``sid`` (the run and what it started: Ray's raylet, GCS and workers,
    which stay in its session); zombies aside, which hold nothing and are init's to reap."""
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except (FileNotFoundError, ProcessLookupError):
            continue
        name, fields = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:].split()
        if fields[0] != "Z" and int(fields[3]) == sid:  # state, ppid, pgrp, session
            found.append(f"{entry} {name}")
    return found


def _signalled(args: list[str], ready, sig: int, env: dict | None = None) -> tuple[subprocess.Popen, str]:
    """``rladv ARGS`` started as from a terminal (a signal that whatever started pytest left ignored would be
    ignored by rladv too), sent ``sig`` once ``ready()``; the ended process and its stderr."""
    proc = subprocess.Popen(as_from_a_terminal(rladv_command() + args), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + TIMEOUT
        while not ready() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert proc.poll() is None, f"the run ended before the signal: {proc.returncode} {proc.stderr.read()}"
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc, err


@pytest.mark.parametrize("moment", ["passes", "write"])
def test_sigterm_stops_a_ray_run_as_it_stops_a_local_one(tmp_path, moment):
    """SIGTERM as soon as the staging folder appears (Ray is up, the passes begin), or once the write pass has
    begun, into an output folder that already holds an earlier output."""
    inputs = tmp_path / "in"
    digests = _dataset(inputs)
    out = tmp_path / "out"
    if moment == "write":
        out.mkdir()
        (out / "part-0.adv.parquet").write_bytes(b"an earlier output")
        (out / "notes.txt").write_text("mine")
    before = _digests(out) if out.exists() else None
    ready = _staging if moment == "passes" else _started_writing
    proc, err = _signalled(["compute", str(inputs), "--estimator", "grpo", "--engine", "ray", "--ray-workers", "2",
                            "-o", str(out), "--report", str(tmp_path / "r.json"), "-q"],
                           lambda: ready(out), signal.SIGTERM)
    assert (proc.returncode, err) == (128 + signal.SIGTERM, ""), err
    assert sorted(os.listdir(tmp_path)) == ["in"] + (["out"] if before else [])
    if before:
        assert sorted(os.listdir(out)) == sorted(before) and _digests(out) == before
    assert _digests(inputs) == digests
    deadline = time.monotonic() + TIMEOUT
    while _session(proc.pid) and time.monotonic() < deadline:  # Ray's workers go a moment after the run
        time.sleep(0.2)
    assert _session(proc.pid) == []


def test_ctrl_c_stops_a_run_on_a_running_cluster_and_stops_its_workers(tmp_path):
    """On a cluster the run joined (``--ray-address``), Ctrl-C (SIGINT) in the write pass: exit 130, nothing on
    stderr, no output, and the run's workers stopped (the cluster's CPUs all free again): the cluster stays up."""
    import secrets
    import socket

    inputs = tmp_path / "in"
    digests = _dataset(inputs)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
    ray = Path(sys.executable).with_name("ray")
    head = subprocess.Popen([str(ray), "start", "--head", "--block", f"--port={port}", "--node-ip-address=127.0.0.1",
                             "--num-cpus=2", "--include-dashboard=false", "--disable-usage-stats"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True)
    address = f"127.0.0.1:{port}"
    out = tmp_path / "out"
    try:
        deadline = time.monotonic() + TIMEOUT
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert head.poll() is None and time.monotonic() < deadline, "the cluster did not start"
                time.sleep(0.2)
        proc, err = _signalled(["compute", str(inputs), "--estimator", "grpo", "--engine", "ray", "--ray-address",
                                address, "--ray-workers", "2", "-o", str(out), "-q"],
                               lambda: _started_writing(out), signal.SIGINT, env)
        assert (proc.returncode, err) == (128 + signal.SIGINT, ""), err
        assert sorted(os.listdir(tmp_path)) == ["in"] and _digests(inputs) == digests
        # a second driver (its own process: the token settings stay out of this one) waits for the CPUs
        code = ("import ray, sys, time\nray.init(address=sys.argv[1], log_to_driver=False, logging_level=40)\n"
                "deadline = time.monotonic() + float(sys.argv[2])\n"
                "while ray.available_resources().get('CPU', 0) < ray.cluster_resources()['CPU']:\n"
                "    assert time.monotonic() < deadline, ray.available_resources()\n    time.sleep(0.1)\n")
        freed = subprocess.run([sys.executable, "-c", code, address, str(TIMEOUT)], capture_output=True, text=True,
                               env=env, timeout=2 * TIMEOUT)
        assert freed.returncode == 0, f"the run's workers still hold CPUs: {freed.stderr[-500:]}"
        assert head.poll() is None  # the cluster is the user's: still up
    finally:
        os.killpg(head.pid, signal.SIGTERM)  # --block: ray start stops what it started
        head.wait(timeout=TIMEOUT)
