"""``--engine ray`` against ``--engine local``: the same files in, the same numbers out, row for row.

One local Ray instance (2 CPUs) serves the module. The dataset has several shards (files) of uneven size,
read in chunks smaller than a shard, with uid groups and ``--batch-key`` batches that span shards. The tests
that compare every estimator and stage run on the same two kept workers (``served``), one run after another, so
they also check that a kept worker carries nothing from one run into the next; every other test begins with no
kept worker on the cluster and starts its own.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import binary_scores, runner
from rladv_cli import Config, compute_file
from rladv_cli.cli import app
from rladv_cli.errors import ConfigError, InputError, OutputError
from rladv_cli.estimators import ESTIMATORS
from rladv_cli.io.read import Dataset

pytestmark = pytest.mark.slow  # a local Ray cluster for the module, and the engines compared on every estimator

SHARD_ROWS = (9, 14, 1, 12)  # then the rest (at least 6 rows)
CHUNK_ROWS = 5


@pytest.fixture(scope="module")
def ray_instance():
    ray = pytest.importorskip("ray")
    import logging

    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def served(ray_instance):
    """Options for runs served by two workers kept across the module's tests (``--ray-keep-workers``)."""
    yield {"keep_workers": 600}
    stop_kept_workers(ray_instance)


@pytest.fixture(autouse=True)
def no_kept_workers(request):
    """A test that does not ask for ``served`` begins with no kept worker (they would hold the cluster's CPUs)."""
    if "served" not in request.fixturenames and "ray" in sys.modules and sys.modules["ray"].is_initialized():
        stop_kept_workers(sys.modules["ray"])


def stop_kept_workers(ray) -> None:
    for actor in ray.util.list_named_actors(all_namespaces=True):
        if actor["namespace"] == "rladv":
            try:
                ray.kill(ray.get_actor(actor["name"], namespace="rladv"))
            except ValueError:  # stopped meanwhile
                pass
    assert_workers_stopped(ray)


def rollouts(rng: np.random.Generator, sessions: bool = False) -> pa.Table:
    """14 groups of 3..5 rows under one of three ``step`` values, shuffled; masks with observation spans;
    every column some estimator or stage reads."""
    sizes = rng.integers(3, 6, 14)
    uid = np.repeat([f"p{i}" for i in range(sizes.size)], sizes)
    step = np.repeat(rng.integers(0, 3, sizes.size), sizes)
    n = uid.size
    lengths = rng.integers(3, 20, n)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    mask = np.ones(offsets[-1], dtype=np.int8)
    for i in range(n):
        if rng.random() < 0.5:
            a = offsets[i] + rng.integers(0, lengths[i])
            mask[a:min(a + rng.integers(1, 5), offsets[i + 1])] = 0
    scores = np.zeros(offsets[-1], dtype=np.float32)
    scores[offsets[1:] - 1] = rng.integers(-8, 9, n) / 4
    old = -rng.exponential(0.5, offsets[-1]).astype(np.float32)

    def lst(v, t):
        return pa.ListArray.from_arrays(pa.array(offsets), pa.array(v, type=t))

    cols = {
        "uid": uid, "step": step,
        "response_mask": lst(mask, pa.int8()), "rm_scores": lst(scores, pa.float32()),
        "values": lst(rng.normal(size=offsets[-1]).astype(np.float32) * mask, pa.float32()),
        "old_log_probs": lst(old, pa.float32()),
        "ref_log_prob": lst(old + rng.normal(0, 0.2, offsets[-1]).astype(np.float32), pa.float32()),
        "rollout_log_probs": lst(old + rng.normal(0, 0.3, offsets[-1]).astype(np.float32), pa.float32()),
        "sum_pi_squared": lst(rng.uniform(0.1, 1, offsets[-1]).astype(np.float32), pa.float32()),
        "reward_baselines": rng.integers(-4, 5, n).astype(np.float32) / 4,
        "correct": rng.integers(0, 2, n).astype(np.float32),
        "short": rng.integers(0, 2, n).astype(np.float32),
    }
    if sessions:
        cols["session_id"] = [f"s{i // 2}" for i in range(n)]
        cols["output_index"] = np.arange(n) % 2
    return pa.table(cols).take(rng.permutation(n))


def write_shards(table: pa.Table, folder: Path) -> Path:
    folder.mkdir()
    start = 0
    for i, count in enumerate(SHARD_ROWS + (table.num_rows - sum(SHARD_ROWS),)):
        pq.write_table(table.slice(start, count), folder / f"part-{i:02d}.parquet")
        start += count
    return folder


@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> Path:
    return write_shards(rollouts(np.random.default_rng(7)), tmp_path_factory.mktemp("data") / "rollouts")


@pytest.fixture(scope="module")
def binary_shards(tmp_path_factory) -> Path:
    """The same rows with 0/1 scores, for the estimators of binary rewards."""
    return write_shards(binary_scores(rollouts(np.random.default_rng(7))), tmp_path_factory.mktemp("binary") / "rollouts")


def shards_for(request, estimator: str) -> Path:
    return request.getfixturevalue("binary_shards" if ESTIMATORS[estimator].binary_rewards else "shards")


def run_both(folder: Path, tmp: Path, ray_options: dict | None = None, **settings):
    from rladv_cli.pipeline.ray_engine import compute_ray

    cfg = Config(chunk_rows=CHUNK_ROWS, device="cpu", **settings)
    local = compute_file([str(folder)], cfg, output=str(tmp / "local.parquet"))
    distributed = compute_ray([str(folder)], cfg, output_dir=tmp / "out", **(ray_options or {}))
    return local, distributed


def assert_workers_stopped(ray, wait: float = 30) -> None:
    """The run's workers are gone: the cluster's CPUs are all free again (``ray.kill`` is asynchronous)."""
    import time

    deadline = time.monotonic() + wait
    while ray.available_resources().get("CPU", 0) < ray.cluster_resources()["CPU"]:
        assert time.monotonic() < deadline, f"workers still hold CPUs: {ray.available_resources()}"
        time.sleep(0.1)


def assert_same(folder: Path, tmp: Path, local, distributed) -> None:
    """Every output shard concatenated equals the local output (exact), and so do the reports."""
    names = [p.name.removesuffix(".parquet") + ".adv.parquet" for p in sorted(folder.glob("*.parquet"))]
    assert sorted(os.listdir(tmp / "out")) == sorted(names + ["report.json"])
    parts = [pq.read_table(tmp / "out" / n) for n in names]
    assert [t.num_rows for t in parts] == [pq.read_metadata(p).num_rows for p in sorted(folder.glob("*.parquet"))]
    assert pa.concat_tables(parts).equals(pq.read_table(tmp / "local.parquet"))
    drop = {"timing", "output"}
    assert distributed.model_dump(exclude=drop) == local.model_dump(exclude=drop)
    assert json.loads((tmp / "out" / "report.json").read_text())["output"] == str(tmp / "out")


@pytest.mark.parametrize("estimator", sorted(ESTIMATORS))
def test_every_estimator_matches_the_local_engine(served, request, tmp_path, estimator):
    shards = shards_for(request, estimator)
    extra = {"reward_components": ["correct", "short"], "reward_weights": [1.0, 0.5]} if ESTIMATORS[estimator].components else {}
    local, distributed = run_both(shards, tmp_path, served, estimator=estimator, batch_key="step", **extra)
    assert local.groups.batches == 3
    assert_same(shards, tmp_path, local, distributed)


@pytest.mark.parametrize("settings", [
    dict(estimator="grpo", kl_coef=0.05, kl_penalty="low_var_kl"),
    dict(estimator="reinforce_plus_plus", kl_coef=0.1, kl_ctrl="adaptive", kl_target=0.01, kl_horizon=10,
         batch_key="step"),
    dict(estimator="grpo", rollout_rs="token_k1,seq_max_k2", rollout_rs_threshold="0.5_2.0,2.5",
         rollout_is="token", rollout_is_batch_normalize=True, batch_key="step"),
    dict(estimator="rloo", overlong_buffer_len=4, max_resp_len=16, overlong_penalty_factor=0.5),
    dict(estimator="grpo", rollout_rs="token_k1", rollout_rs_threshold="0.5_2.0", rollout_is="token",
         batch_key="step", loss_agg_mode="seq-mean-token-sum-norm"),
], ids=["kl", "adaptive-kl", "rollout-rejection", "overlong", "token-weights"])
def test_stages_match_the_local_engine(served, shards, tmp_path, settings):
    local, distributed = run_both(shards, tmp_path, served, **settings)
    assert_same(shards, tmp_path, local, distributed)


def test_agent_sessions_fold_across_shards(ray_instance, tmp_path):
    folder = write_shards(rollouts(np.random.default_rng(11), sessions=True), tmp_path / "sessions")
    extra = {"report_path": tmp_path / "r.json", "html_path": tmp_path / "r.html"}
    local, distributed = run_both(folder, tmp_path, extra, estimator="grpo", batch_key="step")
    assert local.sessions["folded"]
    assert_same(folder, tmp_path, local, distributed)
    assert (tmp_path / "r.json").read_text() == (tmp_path / "out" / "report.json").read_text()
    assert "<svg" in (tmp_path / "r.html").read_text()


def _fail_on(shard_index: int, marker: Path, how: str):
    """A stand-in for a worker's task (``ray_worker.run_shard``) that fails on shard ``shard_index``'s write: once
    (then ``marker`` exists) or, with ``how == "always"``, every time. Pickled by value, so it reaches the
    workers."""
    from rladv_cli.pipeline import ray_worker

    real = ray_worker.run_shard

    def task(held, stage, shard, given, work, known):
        if stage == "write" and shard.index == shard_index and (how == "always" or not marker.exists()):
            marker.touch()
            if how == "crash":
                os._exit(1)
            raise OSError(f"injected failure on shard {shard_index}")
        return real(held, stage, shard, given, work, known)

    return task


@pytest.mark.parametrize("how", ["crash", "exception"])
def test_a_task_that_fails_once_is_retried(ray_instance, shards, tmp_path, monkeypatch, how):
    from rladv_cli.pipeline import ray_engine

    monkeypatch.setattr(ray_engine.ray_worker, "run_shard", _fail_on(1, tmp_path / "failed", how))
    local, distributed = run_both(shards, tmp_path, estimator="grpo", batch_key="step")
    assert (tmp_path / "failed").exists()
    assert_same(shards, tmp_path, local, distributed)


def _lose_file(shard_index: int, marker: Path, how: str):
    """A worker's task whose first write of shard ``shard_index`` does not end in its staged file: its commit,
    which runs on a thread while the next call computes, raises (``how == "commit"``), or the file is deleted once
    committed (``"deleted"``: as when the worker died before its commit ended, and a restarted one settles)."""
    from rladv_cli.pipeline import ray_worker

    real = ray_worker.run_shard

    def task(held, stage, shard, given, work, known):
        first = stage == "write" and shard.index == shard_index and not marker.exists()
        if not first:
            return real(held, stage, shard, given, work, known)
        marker.touch()
        writer = held.writer

        def failing(s):
            sink = writer(s)
            sink.commit = lambda: (_ for _ in ()).throw(OSError("injected failure of the commit"))
            return sink

        held.writer = failing if how == "commit" else writer
        try:
            result = real(held, stage, shard, given, work, known)
        finally:
            del held.writer
        if how == "deleted":
            assert held.settled(shard)  # committed; now the file goes
            os.unlink(held.staged(shard))
        return result

    return task


@pytest.mark.parametrize("how", ["commit", "deleted"])
def test_a_shard_whose_staged_file_failed_is_written_again(ray_instance, shards, tmp_path, monkeypatch, how):
    """A worker's write call returns before the shard's file is finished (its last row groups are encoded
    while the next call computes); the write pass ends only once every shard is in its staged file, and a shard
    whose commit failed, or whose file is not there, is written again (from its file), with the same bytes."""
    from rladv_cli.pipeline import ray_engine

    monkeypatch.setattr(ray_engine.ray_worker, "run_shard", _lose_file(1, tmp_path / "lost", how))
    local, distributed = run_both(shards, tmp_path, {"workers": 2}, estimator="grpo", batch_key="step")
    assert (tmp_path / "lost").exists()
    assert_same(shards, tmp_path, local, distributed)


def test_a_task_that_always_fails_leaves_no_output(ray_instance, shards, tmp_path, monkeypatch):
    from rladv_cli.pipeline import ray_engine

    monkeypatch.setattr(ray_engine, "MAX_RETRIES", 1)
    monkeypatch.setattr(ray_engine.ray_worker, "run_shard", _fail_on(1, tmp_path / "failed", "always"))
    out = tmp_path / "out"
    result = runner.invoke(app, ["compute", str(shards), "--estimator", "grpo", "--engine", "ray",
                                      "-o", str(out), "-q", "--device", "cpu"])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: --engine ray: a write task failed")
    assert "injected failure on shard 1" in lines[0]
    assert not out.exists()  # the run made the folder, and took it away again
    assert_workers_stopped(ray_instance)


def test_a_data_error_in_a_worker_is_the_local_engines_error(ray_instance, tmp_path):
    table = rollouts(np.random.default_rng(3))
    masks = table["response_mask"].to_pylist()
    masks[30][0] = 2  # row 30 lands in the third shard with rows (9, 14, 1, ...)
    folder = write_shards(table.set_column(table.schema.get_field_index("response_mask"), "response_mask",
                                           pa.array(masks, pa.list_(pa.int8()))), tmp_path / "bad")
    args = ["compute", str(folder), "--estimator", "grpo", "-q", "--device", "cpu", "--chunk-rows", str(CHUNK_ROWS)]
    local = runner.invoke(app, args + ["-o", str(tmp_path / "local.parquet")])
    distributed = runner.invoke(app, args + ["--engine", "ray", "-o", str(tmp_path / "out")])
    assert local.exit_code == distributed.exit_code == 2
    assert "part-03.parquet: row 6" in local.output and distributed.output == local.output
    assert not (tmp_path / "out").exists()


def test_a_missing_column_is_the_local_engines_error_and_stops_the_workers(ray_instance, tmp_path):
    """The driver checks the columns once the workers have been asked for (they start meanwhile): the same one
    line as the local engine, no output folder, and the workers stopped."""
    table = rollouts(np.random.default_rng(3)).drop_columns(["rm_scores"])
    folder = write_shards(table, tmp_path / "bad")
    args = ["compute", str(folder), "--estimator", "grpo", "-q", "--device", "cpu"]
    local = runner.invoke(app, args + ["-o", str(tmp_path / "local.parquet")])
    distributed = runner.invoke(app, args + ["--engine", "ray", "--ray-workers", "2", "-o", str(tmp_path / "out")])
    assert local.exit_code == distributed.exit_code == 2 and "rm_scores" in local.output
    assert distributed.output == local.output
    assert sorted(os.listdir(tmp_path)) == ["bad"]
    assert_workers_stopped(ray_instance)


def test_a_failed_run_removes_only_the_output_folder_it_created(ray_instance, tmp_path):
    """A run that fails takes away the -o folder it made (the audit found it left empty), but never one that
    was there before, nor what that one holds; --report and --html are not written either."""
    table = rollouts(np.random.default_rng(3))
    masks = table["response_mask"].to_pylist()
    masks[30] = []  # an empty row in the third shard
    folder = write_shards(table.set_column(table.schema.get_field_index("response_mask"), "response_mask",
                                           pa.array(masks, pa.list_(pa.int8()))), tmp_path / "bad")
    args = ["compute", str(folder), "--estimator", "grpo", "-q", "--engine", "ray", "--ray-workers", "2",
            "--report", str(tmp_path / "r.json"), "--html", str(tmp_path / "r.html")]
    made = runner.invoke(app, args + ["-o", str(tmp_path / "new")])
    assert made.exit_code == 2 and made.output.startswith("Error: ") and "part-03.parquet: row 6" in made.output
    assert not (tmp_path / "new").exists()
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "notes.txt").write_text("mine")
    again = runner.invoke(app, args + ["-o", str(kept)])
    assert again.exit_code == 2 and again.output == made.output
    assert sorted(os.listdir(kept)) == ["notes.txt"]
    assert sorted(os.listdir(tmp_path)) == ["bad", "kept"]


@pytest.mark.parametrize("where", ["same", "file's folder", "symlinked folder"])
def test_the_ray_engine_never_writes_into_its_input_folder(tmp_path, where):
    """-o naming the folder the inputs are listed in (the folder itself, the folder of a file given, a link to
    it) is refused before Ray starts: the shards and report.json would be read as input by the next run."""
    pytest.importorskip("ray")
    folder = write_shards(rollouts(np.random.default_rng(5)), tmp_path / "rollouts")
    before = {p: p.read_bytes() for p in folder.iterdir()}
    source = str(folder / "part-00.parquet") if where == "file's folder" else str(folder)
    out = folder
    if where == "symlinked folder":
        out = tmp_path / "link"
        out.symlink_to(folder)
    res = runner.invoke(app, ["compute", source, "--estimator", "grpo", "--engine", "ray", "-o", str(out),
                              "--report", str(tmp_path / "r.json")])
    assert res.exit_code == 2 and res.output == (
        f"Error: -o {out} holds input files; --engine ray writes its shards and report.json into a folder of their "
        "own, where the next run over the inputs does not read them as input\n"), res.output
    assert {p: p.read_bytes() for p in folder.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["rollouts"] + (["link"] if out != folder else []))


def test_output_folder_and_names(tmp_path):
    from rladv_cli.pipeline.ray_engine import default_output_dir, output_names

    folder = write_shards(rollouts(np.random.default_rng(5)), tmp_path / "rollouts")
    data = Dataset([str(folder)])
    assert default_output_dir([str(folder)], data) == tmp_path / "rollouts.adv"
    glob = str(folder / "part-0*.parquet")
    assert Dataset([glob]).paths == data.paths
    assert default_output_dir([glob], Dataset([glob])) == tmp_path / "rollouts.adv"
    one = str(folder / "part-01.parquet")
    assert default_output_dir([one], Dataset([one])) == folder / "part-01.adv"
    assert output_names(data, tmp_path / "new")[:2] == ["part-00.adv.parquet", "part-01.adv.parquet"]
    assert (tmp_path / "new").is_dir()
    with pytest.raises(OutputError, match="part-00.adv.parquet"):
        other = tmp_path / "other"
        other.mkdir()
        (other / "part-00.parquet").write_bytes((folder / "part-00.parquet").read_bytes())
        output_names(Dataset([str(folder), str(other / "part-00.parquet")]), tmp_path / "new")
    with pytest.raises(InputError, match="matches no file"):
        Dataset([str(folder / "nothing-*.parquet")])


def test_the_ray_engine_runs_on_cpu(ray_instance, shards, tmp_path):
    from rladv_cli.pipeline.ray_engine import compute_ray

    with pytest.raises(ConfigError, match="CPU workers"):
        compute_ray([str(shards)], Config(estimator="grpo", device="cuda"), output_dir=tmp_path / "out")
    assert not (tmp_path / "out").exists()
    report = compute_ray([str(shards)], Config(estimator="grpo"), output_dir=tmp_path / "out")
    assert report.timing.device == "cpu"


def test_without_ray_the_engine_asks_for_the_extra(shards, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    result = runner.invoke(app, ["compute", str(shards), "--estimator", "grpo", "--engine", "ray",
                                      "-o", str(tmp_path / "out"), "-q"])
    assert result.exit_code == 2
    assert result.output.strip() == 'Error: --engine ray needs Ray: pip install "ray>=2.10" (rladv\'s [ray] extra)'


def test_the_local_engine_never_imports_ray(shards, tmp_path):
    code = ("import sys, rladv_cli\n"
            "from rladv_cli.cli import app\n"
            f"sys.argv = ['rladv', 'compute', {str(shards)!r}, '--estimator', 'grpo', '-q', '-o', "
            f"{str(tmp_path / 'out.parquet')!r}]\n"
            "try:\n    app(prog_name='rladv')\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
            "assert 'ray' not in sys.modules, 'ray was imported'\n")
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})


def test_one_file_gives_the_bytes_the_local_engine_writes(served, shards, tmp_path):
    """The same input and settings give the same bytes on either engine: the shard's writer copies the carried
    columns from its file as the local writer does (docs/performance.md, "Carried columns copied")."""
    folder = tmp_path / "one"
    folder.mkdir()
    (folder / "part-00.parquet").write_bytes(next(shards.glob("*.parquet")).read_bytes())
    run_both(folder, tmp_path, served, estimator="grpo")
    written = tmp_path / "out" / "part-00.adv.parquet"
    assert written.read_bytes() == (tmp_path / "local.parquet").read_bytes()
    # the input's own pages: pyarrow's default writer gave its token lists a dictionary, rladv's writer does not
    meta = pq.ParquetFile(written).metadata.row_group(0)
    assert {meta.column(c).path_in_schema for c in range(meta.num_columns) if meta.column(c).has_dictionary_page} >= {
        "rm_scores.list.element", "values.list.element"}


@pytest.mark.parametrize("estimator", sorted(ESTIMATORS))
def test_the_local_engine_gives_one_file_and_its_shards_the_same_numbers(request, tmp_path, estimator):
    shards = shards_for(request, estimator)
    whole = tmp_path / "whole.parquet"
    pq.write_table(pa.concat_tables([pq.read_table(p) for p in sorted(shards.glob("*.parquet"))]), whole)
    extra = {"reward_components": ["correct", "short"], "reward_weights": [1.0, 0.5]} if ESTIMATORS[estimator].components else {}
    cfg = Config(estimator=estimator, batch_key="step", chunk_rows=CHUNK_ROWS, device="cpu", **extra)
    split = compute_file([str(shards)], cfg, output=str(tmp_path / "split.parquet"))
    one = compute_file([str(whole)], cfg, output=str(tmp_path / "one.parquet"))
    assert pq.read_table(tmp_path / "split.parquet").equals(pq.read_table(tmp_path / "one.parquet"))
    drop = {"timing", "output", "inputs", "warnings", "verdict"}  # warnings name rows within their file
    assert split.model_dump(exclude=drop) == one.model_dump(exclude=drop)
    # the verdict's examples name the files; its numbers are the same
    numbers = lambda v: {**v.model_dump(), "causes": [{**c, "example": None} for c in v.model_dump()["causes"]]}  # noqa: E731
    assert numbers(split.verdict) == numbers(one.verdict)
    assert [(w.code, w.count) for w in split.warnings] == [(w.code, w.count) for w in one.warnings]


def _kept_at_write(marker: Path):
    """A worker's task that notes, at each shard's write pass, whether the shard's chunks were still kept in
    memory (decoded once, when the worker started) and, at every pass, which worker ran it."""
    from rladv_cli.pipeline import ray_worker

    real = ray_worker.run_shard

    def task(held, stage, shard, given, work, known):
        once = held.source._once
        with open(marker, "a") as f:
            f.write(f"{stage} {shard.index} {os.getpid()} {once is not None and once.kept}\n")
        return real(held, stage, shard, given, work, known)

    return task


@pytest.mark.parametrize("cache_mib", [512, 0])
def test_each_shard_is_decoded_once_by_the_worker_that_holds_it(ray_instance, shards, tmp_path, monkeypatch, cache_mib):
    """Two workers hold the five shards for the whole run (balanced by rows): every pass of a shard runs on the
    same worker, and with the default cache every pass takes the chunks decoded when it started; with
    ``--cache-mib 0`` each pass reads the file, with the same numbers."""
    from rladv_cli.pipeline import ray_engine

    marker = tmp_path / "calls"
    monkeypatch.setattr(ray_engine.ray_worker, "run_shard", _kept_at_write(marker))
    local, distributed = run_both(shards, tmp_path, {"workers": 2}, estimator="grpo", batch_key="step",
                                  cache_mib=cache_mib)
    assert_same(shards, tmp_path, local, distributed)
    calls = [line.split() for line in marker.read_text().splitlines()]
    assert [stage for stage, *_ in calls] == ["layout"] * 5 + ["scan"] * 5 + ["write"] * 5
    worker_of = {}
    for stage, shard, pid, _ in calls:
        assert worker_of.setdefault(shard, pid) == pid
    assert len(set(worker_of.values())) == 2
    assert {kept for stage, _, _, kept in calls if stage == "write"} == {str(cache_mib > 0)}
    assert_workers_stopped(ray_instance)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="pyarrow ships jemalloc on Linux")
def test_a_worker_takes_arrows_buffers_from_jemalloc(ray_instance, shards, tmp_path, monkeypatch):
    """A Ray worker starts with its raylet's environment, not the driver's: it takes Arrow's buffers from
    jemalloc itself, as the ``rladv`` executable does on Linux (mimalloc cost a kept worker ~0.8 s per run)."""
    from rladv_cli.pipeline import ray_engine
    from rladv_cli.pipeline.ray_engine import compute_ray

    assert "ARROW_DEFAULT_MEMORY_POOL" not in os.environ  # so the workers of ``ray_instance`` have none either
    marker, real = tmp_path / "pools", ray_engine.ray_worker.run_shard

    def task(held, stage, shard, given, work, known):
        with open(marker, "a") as f:
            f.write(f"{pa.default_memory_pool().backend_name}\n")
        return real(held, stage, shard, given, work, known)

    monkeypatch.setattr(ray_engine.ray_worker, "run_shard", task)
    compute_ray([shards], Config(estimator="grpo"), output_dir=tmp_path / "out", workers=2)
    assert marker.read_text().split() == ["jemalloc"] * 15


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="pyarrow ships jemalloc on Linux")
@pytest.mark.parametrize("named", [None, "system"])
def test_a_pool_the_workers_environment_names_is_left_alone(monkeypatch, named):
    from rladv_cli.pipeline import ray_worker

    before = pa.default_memory_pool()
    monkeypatch.delenv("ARROW_DEFAULT_MEMORY_POOL", raising=False)
    if named:
        monkeypatch.setenv("ARROW_DEFAULT_MEMORY_POOL", named)
    try:
        pa.set_memory_pool(pa.system_memory_pool())
        ray_worker._jemalloc_pool()
        assert pa.default_memory_pool().backend_name == ("system" if named else "jemalloc")
    finally:
        pa.set_memory_pool(before)


def test_a_worker_hands_each_shard_to_its_own_writer(shards, tmp_path, monkeypatch):
    """What a worker holds for a run (``ray_worker.Holding``, here in this process): once its shards are decoded
    (a worker imports no torch meanwhile), each shard's staged writer gets that shard's rows, in order, then
    their end, so that their carried columns are encoded before the write pass, as the local engine's are."""
    from rladv_cli.io.write import AtomicParquetWriter, computed_columns, output_schema
    from rladv_cli.pipeline import ray_worker

    handed: dict[str, list] = {}
    monkeypatch.setattr(AtomicParquetWriter, "carry", lambda self, table: handed.setdefault(
        os.path.basename(self.path), []).append(None if table is None else table["uid"].to_pylist()))
    dataset = Dataset([str(shards)])
    schema = output_schema(dataset.schema, with_is_weights=False)
    names = {s.index: f"part-{s.index:02d}.adv.parquet" for s in dataset.shards}
    carried = tuple(n for n in dataset.columns if n not in computed_columns(False))
    plan = ray_worker.RunPlan(tuple(dataset.shards), str(tmp_path), names, schema, carried,
                              tuple(dataset.names.written(schema.names)), CHUNK_ROWS, 64 << 20)
    held = ray_worker.Holding(plan, decode=True)
    try:
        for shard in dataset.shards:  # the first pass, which ends once every shard is decoded
            assert sum(chunk.table.num_rows for chunk in held.source.shard_chunks(shard, None, CHUNK_ROWS)) == shard.num_rows
    finally:
        held.close()
    assert set(handed) == set(names.values())
    for shard in dataset.shards:
        rows = handed[names[shard.index]]
        assert rows[-1] is None and sum(rows[:-1], []) == pq.read_table(shard.path)["uid"].to_pylist()


def _raise_interrupted(signum, frame):
    """The executable's SIGTERM/SIGHUP handler, as ``rladv_cli.cli`` installs it (less the ignoring of a second)."""
    from rladv_cli.errors import Interrupted

    raise Interrupted(signum)


def test_a_termination_signal_interrupts_a_blocking_ray_call(ray_instance):
    """Ray's blocking calls stop for a ``KeyboardInterrupt`` only: the executable's ``Interrupted``, raised by its
    SIGTERM handler inside ``ray.get``, stayed pending until the task ended and then came out as a
    ``SystemError``. While Ray runs, the engine relays it as a ``KeyboardInterrupt`` and raises it again outside."""
    import signal
    import threading
    import time

    from rladv_cli.errors import Interrupted
    from rladv_cli.pipeline.ray_engine import _interrupts_for_ray

    @ray_instance.remote
    def slow():
        time.sleep(30)

    previous = signal.signal(signal.SIGTERM, _raise_interrupted)
    ref = slow.remote()
    try:
        start = time.monotonic()
        with pytest.raises(Interrupted) as stop:
            with _interrupts_for_ray():
                threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGTERM)).start()
                ray_instance.get(ref)
        assert stop.value.signum == signal.SIGTERM and time.monotonic() - start < 20
        assert signal.getsignal(signal.SIGTERM) is _raise_interrupted  # the handler is back
    finally:
        signal.signal(signal.SIGTERM, previous)
        ray_instance.cancel(ref, force=True)


def test_a_signal_as_the_staging_folder_is_made_leaves_nothing(ray_instance, shards, tmp_path, monkeypatch):
    """A SIGTERM that lands just as the staging folder is made (here: inside ``mkdtemp``) is acted on once the
    cleanup knows the folder; it used to leave ``OUT_DIR/.rladv-*`` behind, and so the output folder too."""
    import signal
    import tempfile

    from rladv_cli.errors import Interrupted
    from rladv_cli.pipeline import ray_engine

    def mkdtemp(*args, **kwargs):
        path = real(*args, **kwargs)
        signal.raise_signal(signal.SIGTERM)
        return path

    real = tempfile.mkdtemp
    monkeypatch.setattr(ray_engine.tempfile, "mkdtemp", mkdtemp)
    previous = signal.signal(signal.SIGTERM, _raise_interrupted)
    try:
        with pytest.raises(Interrupted):
            ray_engine.compute_ray([str(shards)], Config(estimator="grpo"), output_dir=tmp_path / "out")
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert os.listdir(tmp_path) == []


def test_an_address_ray_cannot_take_is_a_one_line_config_error():
    # ray.init raises ValueError for a ray:// address without the ray[client] package (seen with ray[data] only)
    from rladv_cli.pipeline.ray_engine import _init

    class NoClient:
        @staticmethod
        def init(**options):
            raise ValueError("Ray Client requires pip package `ray[client]`.\nmore")

    # Ray's message runs over several lines: joined into one
    with pytest.raises(ConfigError, match=r"^--ray-address ray://head:10001: Ray Client requires .*ray\[client\]`\. more$"):
        _init(NoClient, address="ray://head:10001")


def test_quiet_is_quiet_with_more_workers_than_shards(ray_instance, tmp_path):
    """One input file, two workers: Ray Data warned that its task limit exceeded its inputs (rladv's own setting,
    nothing the user can act on) through ``-q``."""
    path = tmp_path / "one.parquet"
    pq.write_table(rollouts(np.random.default_rng(5)), path)
    result = runner.invoke(app, ["compute", str(path), "--estimator", "grpo", "--engine", "ray", "--ray-workers", "2",
                                      "-q", "-o", str(tmp_path / "out")])
    assert result.exit_code == 0 and result.output == ""


def test_shards_are_balanced_by_rows():
    from rladv_cli.io.read import Shard
    from rladv_cli.pipeline.ray_engine import balanced

    shards = [Shard(i, f"part-{i}", 0, n) for i, n in enumerate([9, 14, 1, 12, 6])]
    sets = balanced(shards, 2)
    assert [[s.index for s in group] for group in sets] == [[1, 2, 4], [0, 3]]  # 21 and 21 rows, each in order
    assert [[s.index for s in group] for group in balanced(shards, 9)] == [[1], [3], [0], [4], [2]]
    assert [[s.index for s in group] for group in balanced(shards, 1)] == [[0, 1, 2, 3, 4]]


@pytest.fixture
def kept(ray_instance):
    """The module's Ray instance, with no kept worker left on it after the test."""
    yield ray_instance
    stop_kept_workers(ray_instance)


def kept_names(ray) -> list[str]:
    return sorted(a["name"] for a in ray.util.list_named_actors(all_namespaces=True) if a["namespace"] == "rladv")


def test_kept_workers_serve_the_next_run(kept, shards, tmp_path, monkeypatch):
    """With ``--ray-keep-workers`` the second run is served by the first run's two worker processes, which
    decode its shards once again (its write pass takes kept chunks) and give the local engine's numbers."""
    from rladv_cli.pipeline import ray_engine

    marker = tmp_path / "calls"
    monkeypatch.setattr(ray_engine.ray_worker, "run_shard", _kept_at_write(marker))
    pids = []
    for run in ("first", "second"):
        (tmp_path / run).mkdir()
        local, distributed = run_both(shards, tmp_path / run, {"workers": 2, "keep_workers": 60}, estimator="grpo",
                                      batch_key="step")
        assert_same(shards, tmp_path / run, local, distributed)
        calls = [line.split() for line in marker.read_text().splitlines()]
        marker.unlink()
        assert {kept_chunks for stage, _, _, kept_chunks in calls if stage == "write"} == {"True"}
        pids.append({pid for _, _, pid, _ in calls})
        assert len(kept_names(kept)) == 2 and all(n.endswith(("-2x1-0", "-2x1-1")) for n in kept_names(kept))
    assert len(pids[0]) == 2 and pids[1] == pids[0]
    assert kept.available_resources().get("CPU", 0) == 0  # the two kept workers hold a CPU each


def test_kept_workers_stop_once_idle_for_their_time(kept, shards, tmp_path):
    import time

    run_both(shards, tmp_path, {"workers": 1, "keep_workers": 0.5}, estimator="grpo")
    deadline = time.monotonic() + 30
    while kept_names(kept):
        assert time.monotonic() < deadline, f"kept workers still up: {kept_names(kept)}"
        time.sleep(0.1)
    assert_workers_stopped(kept)


def test_a_failed_run_keeps_no_worker(kept, shards, tmp_path, monkeypatch):
    from rladv_cli.pipeline import ray_engine

    monkeypatch.setattr(ray_engine, "MAX_RETRIES", 1)
    monkeypatch.setattr(ray_engine.ray_worker, "run_shard", _fail_on(1, tmp_path / "failed", "always"))
    with pytest.raises(ray_engine.ComputeError, match="injected failure on shard 1"):
        run_both(shards, tmp_path, {"workers": 2, "keep_workers": 60}, estimator="grpo")
    assert not (tmp_path / "out").exists()
    assert_workers_stopped(kept)
    assert kept_names(kept) == []


def test_a_run_of_another_shape_takes_the_cpus_of_idle_kept_workers(kept, shards, tmp_path):
    """Kept workers hold their CPUs while they wait: one worker kept with both CPUs, then a run that wants two
    workers (kept too), then one that keeps none; each runs at once, the idle workers stopping for it."""
    first, second, third = (tmp_path / name for name in ("first", "second", "third"))
    for folder in (first, second, third):
        folder.mkdir()
    run_both(shards, first, {"workers": 1, "keep_workers": 60}, estimator="grpo")
    assert [n.rsplit("-", 2)[1:] for n in kept_names(kept)] == [["1x2", "0"]]
    assert_same(shards, second, *run_both(shards, second, {"workers": 2, "keep_workers": 60}, estimator="grpo"))
    assert [n.rsplit("-", 2)[1:] for n in kept_names(kept)] == [["2x1", "0"], ["2x1", "1"]]
    assert_same(shards, third, *run_both(shards, third, {"workers": 2}, estimator="grpo"))
    assert_workers_stopped(kept)
    assert kept_names(kept) == []


def test_keeping_workers_needs_a_running_cluster(shards, tmp_path, monkeypatch):
    ray = pytest.importorskip("ray")
    from rladv_cli.pipeline.ray_engine import compute_ray

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    with pytest.raises(ConfigError, match=r"^--ray-keep-workers needs a running cluster"):
        compute_ray([str(shards)], Config(estimator="grpo"), output_dir=tmp_path / "out", keep_workers=5)
    with pytest.raises(ConfigError, match=r"^--ray-keep-workers must be 0 or more seconds, got -1"):
        compute_ray([str(shards)], Config(estimator="grpo"), output_dir=tmp_path / "out", keep_workers=-1)
    assert os.listdir(tmp_path) == []
