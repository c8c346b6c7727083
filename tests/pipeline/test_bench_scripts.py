"""The benchmark scripts stay runnable: ``bench/gpu_check.py`` run against the CPU itself (its own check; a
GPU session runs it with ``--device cuda``) on the smallest dataset."""
import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT, SAMPLES

pytestmark = pytest.mark.slow  # the bench scripts as subprocesses


def test_gpu_check_runs_end_to_end_against_the_cpu(tmp_path):
    env = {**os.environ, "RLADV_BENCH_DATA": str(tmp_path / "data"), "PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))}
    p = subprocess.run([sys.executable, str(ROOT / "bench" / "gpu_check.py"), "--device", "cpu", "--tokens", "20K",
                        "--parity-tokens", "20K", "--estimators", "gae,grpo", "--repeat", "1", "--out",
                        str(tmp_path / "out")], capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stderr + p.stdout
    result = json.loads((tmp_path / "out" / "gpu_check.json").read_text())
    checked = {(r["data"], r["estimator"]) for r in result["parity"]}
    assert ("multiturn.parquet", "remax") in checked and ("multiturn.parquet", "optimal_token_baseline") in checked
    assert ("bench_20000.parquet", "gae") in checked
    assert all("replay" in r for r in result["parity"] if r["data"] == "multiturn.parquet")
    assert all(max(v for k, v in r.items() if k not in ("data", "estimator")) == 0.0 for r in result["parity"])
    assert [k["estimator"] for k in result["kernels"]] == ["gae", "grpo"] and result["kernels"][0]["device_s"] > 0
    assert [e["estimator"] for e in result["e2e"]] == ["gae", "grpo"] and result["e2e"][0]["cpu_s"] > 0
    assert "largest parity difference 0.00e+00 (within 1e-05)" in p.stdout


def test_the_timeline_names_every_phase_of_a_run_in_order(tmp_path):
    """``bench/timeline.py`` runs ``rladv compute`` with hooks on rladv's own functions; renaming one of
    them must fail here, not leave the timeline silently short. The sample's carried columns are copied; the
    same rows in 16-row groups are encoded early instead."""
    import pyarrow.parquet as pq

    small = tmp_path / "small_groups.parquet"
    pq.write_table(pq.read_table(SAMPLES / "multiturn.parquet"), small, row_group_size=16)
    for path, carried in ((SAMPLES / "multiturn.parquet", "copied columns: the last row group's chunks handed out "
                                                          "(1 row groups)"),
                          (small, "carried columns: last row group done")):
        out = tmp_path / "out.parquet"
        p = subprocess.run([sys.executable, str(ROOT / "bench" / "timeline.py"), "compute", "--estimator", "gae",
                            str(path), "-o", str(out), "-q", "--device", "cpu"],
                           capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr + p.stdout
        phases = [line.split(" s  ", 1)[1] for line in p.stderr.splitlines() if " s  " in line]
        order = ["import passes begins", "import passes done", "layout pass begins", "scan pass done",
                 "write pass begins", "write pass done", "report begins", "report done",
                 "output: the last row group in, the footer written", "output committed", "exit"]
        assert [ph for ph in phases if ph in order] == order
        assert "reading done" in phases
        assert any(ph.startswith(carried) for ph in phases), phases
        assert out.exists()


def test_the_ray_timeline_names_the_driver_and_every_worker_call(tmp_path):
    """``bench/ray_timeline.py`` (hooks on the Ray engine's own functions and a timed subclass of its worker) on a
    local cluster: the driver's phases in order, each worker's start, and one call per shard and pass."""
    pytest.importorskip("ray")
    folder = tmp_path / "shards"
    folder.mkdir()
    import pyarrow.parquet as pq

    table = pq.read_table(SAMPLES / "groups.parquet")
    half = table.num_rows // 2
    pq.write_table(table.slice(0, half), folder / "a.parquet")
    pq.write_table(table.slice(half), folder / "b.parquet")
    events = tmp_path / "events.json"
    p = subprocess.run([sys.executable, str(ROOT / "bench" / "ray_timeline.py"), "compute", str(folder), "--estimator",
                        "grpo", "--engine", "ray", "--ray-workers", "2", "-o", str(tmp_path / "out"), "-q"],
                       capture_output=True, text=True, timeout=300, env={**os.environ, "RLADV_TIMELINE_JSON": str(events)})
    assert p.returncode == 0, p.stderr + p.stdout
    timeline = json.loads(events.read_text())
    driver = [what for _, who, what in timeline if who == "driver"]
    order = ["import ray done", "ray.init done", "actors requested (the driver builds the run next)", "layout pass begins",
             "scan pass done", "write pass done", "actors stopped", "exit"]
    assert [ph for ph in driver if ph in order] == order
    workers = {who for _, who, _ in timeline if who != "driver"}
    assert len(workers) == 2
    calls = [what for _, who, what in timeline if who != "driver" and what.endswith(" begins") and " shard " in what]
    assert sorted(calls) == sorted(f"{stage} shard {i} begins" for stage in ("layout", "scan", "write") for i in (0, 1))
    for worker in workers:
        mine = [what for _, who, what in timeline if who == worker]
        assert mine[0] == "process started" and "the passes imported" in mine
        assert mine.index("settle done") > max(i for i, what in enumerate(mine) if what.startswith("write shard"))
    assert [line for line in p.stderr.splitlines() if " s  " in line]  # printed too


def test_the_scaling_model_gives_the_break_even_by_hand(capsys):
    """``bench/ray_scaling.py``'s model, from a 1-worker run of 8 shards with wall 3.0 s, passes 1.0 s, worker
    0.8 s (c = 0.1 s per shard, D = 0.2 s, S = 2.0 s) against local wall 2.6 s, passes 1.2 s. The 4x dataset:
    local 1.4 + 4·1.2 = 6.2 s; on N workers S + 4·D + ceil(32 / N)·c = 6.0, 4.4, 3.6, 3.2, 3.0, 2.9 s. Ray takes
    less time from k > (S − 1.4) / (1.2 − D − 8·c/N) = 0.6 / 0.2, 0.6 / 0.6, 0.6 / 0.8, 0.6 / 0.9, 0.6 / 0.95,
    0.6 / 0.9875: 60M, 20M, 15M, 13.3M, 12.6M, 12.2M tokens."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import ray_scaling
    finally:
        sys.path.remove(str(ROOT / "bench"))
    ray_scaling.model("ray 1", {"wall": 3.0, "passes": 1.0, "worker": 0.8}, {"wall": 2.6, "passes": 1.2},
                      20_000_000, 8)
    lines = capsys.readouterr().out.splitlines()
    assert "c = 0.100 s per shard, D = 0.20 s" in lines[1] and "S = 2.00 s" in lines[1]
    assert lines[4].split() == ["80M", "6.2", "6.0", "4.4", "3.6", "3.2", "3.0", "2.9"]
    assert lines[-1].split() == ["Ray", "wins", "from", "60M", "20M", "15M", "13M", "13M", "12M"]
    ray_scaling.model("kept", {"wall": 2.01, "passes": 1.0, "worker": 0.8}, {"wall": 2.0, "passes": 1.0},
                      20_000_000, 8)
    assert capsys.readouterr().out.splitlines()[-1].split()[3:] == ["never", "<1M", "<1M", "<1M", "<1M", "<1M"]
