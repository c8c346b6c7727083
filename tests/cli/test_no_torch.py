"""``rladv compute`` on the CPU runs on numpy and never imports torch (docs/arrays.md). Each run is a fresh
interpreter (marked slow) that runs the command in-process, as the executable does (``cli.app``), then says
whether torch is in ``sys.modules``; the outputs are checked to be there. A Ray worker imports no torch either."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

from conftest import SAMPLES

# runs ``rladv ARGS`` in this interpreter, then prints whether torch was imported
COMMAND = """
import sys
from rladv_cli.cli import app
try:
    app(sys.argv[1:], prog_name="rladv")
except SystemExit as stop:
    assert stop.code in (0, None), f"exit {stop.code}"
print("torch" in sys.modules)
"""


def _fresh(code: str, *args: str) -> bool:
    """Run ``code`` in a fresh interpreter; whether it printed that torch was imported."""
    p = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    assert p.returncode == 0, p.stderr[-3000:] + p.stdout[-1000:]
    return p.stdout.split()[-1] == "True"


@pytest.mark.slow  # fresh interpreters
@pytest.mark.parametrize("sample, flags", [
    ("groups.parquet", ["--estimator", "grpo"]),  # group statistics
    ("groups.parquet", ["--estimator", "reinforce_plus_plus_baseline", "--adv-clip", "2",
                        "--loss-agg-mode", "token-mean"]),  # group statistics, whitening, token weights
    ("multiturn.parquet", ["--estimator", "gae", "--kl-coef", "0.1", "--kl-ctrl", "adaptive", "--batch-key", "uid",
                           "--rollout-is", "token", "--tool-reward-coef", "0.5"]),  # values: the GAE scan
    ("padded.parquet", ["--estimator", "rloo"]),
], ids=["grpo", "rpp-baseline", "gae", "rloo-padded"])
def test_compute_on_the_cpu_does_not_import_torch(tmp_path, sample, flags):
    out, report, page = tmp_path / "o.parquet", tmp_path / "r.json", tmp_path / "r.html"
    imported = _fresh(COMMAND, "compute", str(SAMPLES / sample), "-o", str(out), "--report", str(report),
                      "--html", str(page), "-q", "--engine", "local", "--device", "cpu", "--chunk-rows", "16", *flags)
    assert not imported, "torch imported"
    table = pq.read_table(out)
    assert table.num_rows == pq.read_metadata(SAMPLES / sample).num_rows
    assert {"advantages", "returns", "token_level_rewards"} <= set(table.column_names)
    assert json.loads(report.read_text())["timing"]["device"] == "cpu" and "<svg" in page.read_text()


@pytest.mark.slow  # a fresh interpreter
def test_auto_without_a_gpu_does_not_import_torch(tmp_path):
    """``--device auto`` (the default) asks torch only where a CUDA build of it and an NVIDIA device are there."""
    from rladv_cli.tensors.batch import may_have_cuda

    if may_have_cuda():
        pytest.skip("this machine may have a GPU: auto asks torch")
    out = tmp_path / "o.parquet"
    assert not _fresh(COMMAND, "compute", str(SAMPLES / "groups.parquet"), "--estimator", "grpo", "-o", str(out), "-q")
    assert pq.read_table(out).num_rows == 65


@pytest.mark.slow  # a fresh interpreter
def test_the_api_on_numpy_does_not_import_torch(tmp_path):
    """``rladv_cli.compute`` on an Arrow table (in memory, ``run_in_memory``) and ``compute_file`` with a rows filter."""
    code = f"""
import sys
import pyarrow.parquet as pq
import rladv_cli
table = pq.read_table({str(SAMPLES / "multiturn.parquet")!r})
out, report = rladv_cli.compute(table, estimator="gae", kl_coef=0.05, device="cpu", chunk_rows=10)
assert out.num_rows == table.num_rows and report.timing.device == "cpu"
rladv_cli.compute_file({str(SAMPLES / "groups.parquet")!r}, estimator="grpo", output={str(tmp_path / "o.parquet")!r},
                       device="cpu", where="step >= 0")
print("torch" in sys.modules)
"""
    assert not _fresh(code)
    assert (tmp_path / "o.parquet").exists()


@pytest.mark.slow  # a local Ray cluster in a fresh interpreter
def test_ray_workers_do_not_import_torch(tmp_path):
    """Each pass a worker runs notes whether its process has torch (a stand-in task, pickled by value)."""
    pytest.importorskip("ray")
    marker = tmp_path / "passes"
    code = f"""
import logging, sys
import ray
from rladv_cli.config.settings import Config
from rladv_cli.pipeline import ray_engine, ray_worker

real = ray_worker.run_shard

def task(held, stage, shard, given, work, known):
    result = real(held, stage, shard, given, work, known)
    with open({str(marker)!r}, "a") as f:
        f.write(f"{{stage}} {{'torch' in sys.modules}}\\n")
    return result

ray_worker.run_shard = task
ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
try:
    ray_engine.compute_ray([{str(SAMPLES / "groups.parquet")!r}], Config(estimator="grpo"),
                           output_dir={str(tmp_path / "out")!r}, workers=1)
finally:
    ray.shutdown()
print("torch" in sys.modules)
"""
    assert not _fresh(code), "torch imported by the driver"
    passes = [line.split() for line in marker.read_text().splitlines()]
    assert [stage for stage, _ in passes] == ["layout", "scan", "write"]
    assert {had for _, had in passes} == {"False"}, "torch imported by a worker"
    assert (tmp_path / "out" / "groups.adv.parquet").exists()
