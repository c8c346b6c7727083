"""Pipeline behaviour that crosses stages: adaptive KL per batch, batch order, padding, progress, devices."""
import io

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from rich.console import Console

import rladv_cli
from conftest import SAMPLES
from rladv_cli.cli.progress import progress
from rladv_cli.stages.shaping import KLController


def kl_table():
    # two batches (step 2 listed first in the file); k1 estimate per token = old - ref
    return pa.table({
        "step": [2, 1, 1, 2],
        "uid": ["b", "a", "a", "b"],
        "response_mask": pa.array([[1, 1], [1, 1], [1, 1], [1, 0]], pa.list_(pa.int8())),
        "rm_scores": pa.array([[0, 1.0], [0, 1.0], [0, 0.0], [0, 0.5]], pa.list_(pa.float32())),
        "old_log_probs": pa.array([[-1, -1], [-0.5, -1], [-1, -1], [-1, -2]], pa.list_(pa.float32())),
        "ref_log_prob": pa.array([[-1.2, -1], [-1, -1], [-1, -1.5], [-1, -1]], pa.list_(pa.float32())),
    })


def test_adaptive_kl_is_stepped_per_batch_in_key_order():
    t = kl_table()
    out, report = rladv_cli.compute(t, estimator="grpo", kl_coef=0.1, kl_penalty="kl", kl_ctrl="adaptive",
                                    kl_target=0.01, kl_horizon=10, batch_key="step", device="cpu")
    # batch step=1 (rows 1, 2) runs first with beta = 0.1; its current_kl = mean(0.25, 0.25) = 0.25
    ctrl = KLController("adaptive", 0.1, 0.01, 10)
    ctrl.update(0.25, n_steps=2)
    beta2 = ctrl.value
    assert [b.batch for b in report.kl.batches] == ["step=1", "step=2"]
    assert [b.coef for b in report.kl.batches] == [0.1, pytest.approx(beta2)]
    rewards = out["token_level_rewards"].to_pylist()
    np.testing.assert_allclose(rewards[1], [0 - 0.1 * 0.5, 1.0], atol=1e-7)
    np.testing.assert_allclose(rewards[0], [0 - np.float32(beta2) * np.float32(0.2), 1.0], atol=1e-7)
    np.testing.assert_allclose(rewards[3], [0, 0.5], atol=1e-7)  # the -1 estimate sits on a mask-0 token


def test_fixed_kl_single_batch_reports_verls_metric():
    out, report = rladv_cli.compute(kl_table(), estimator="grpo", kl_coef=0.1, kl_penalty="kl", device="cpu",
                                    batch_key="none")
    # rows' masked means: 0.1, 0.25, 0.25, 0.0 -> mean 0.15
    assert report.kl.mean == pytest.approx(0.15)
    assert report.kl.coef == 0.1 and len(report.kl.batches) == 1


def test_groups_never_cross_batches():
    t = pa.table({
        "step": [1, 2, 1, 2],
        "uid": ["a", "a", "a", "a"],
        "response_mask": pa.array([[1]] * 4, pa.list_(pa.int8())),
        "score": pa.array([1.0, 1.0, 0.0, 0.0], pa.float32()),
    })
    _, whole = rladv_cli.compute(t, estimator="grpo", device="cpu", batch_key="none")
    _, split = rladv_cli.compute(t, estimator="grpo", device="cpu", batch_key="step")
    _, default = rladv_cli.compute(t, estimator="grpo", device="cpu")  # the step column is the batch key
    assert whole.groups.count == 1 and split.groups.count == 2 and split.groups.batches == 2
    assert default.groups == split.groups and default.config["batch_key"] == "step"


def test_progress_bar_shows_each_pass_on_a_terminal():
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=100)
    t = kl_table()
    with progress(lambda: console, enabled=True) as update:
        rladv_cli.compute(t, estimator="grpo", chunk_rows=1, device="cpu", progress=update)
    text = buf.getvalue()
    assert "scan pass" in text and "write pass" in text
    with progress(lambda: console, enabled=False) as update:
        assert update is None


def test_device_auto_resolves_to_cpu_without_cuda():
    _, report = rladv_cli.compute(kl_table(), estimator="grpo")
    import torch

    assert report.timing.device == ("cuda" if torch.cuda.is_available() else "cpu")


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("estimator", ["gae", "grpo", "reinforce_plus_plus", "reinforce_plus_plus_baseline"])
def test_cuda_equals_cpu(estimator):

    import pyarrow.parquet as pq

    t = pq.read_table(SAMPLES / "multiturn.parquet")
    cpu, _ = rladv_cli.compute(t, estimator=estimator, device="cpu", kl_coef=0.01)
    gpu, _ = rladv_cli.compute(t, estimator=estimator, device="cuda", kl_coef=0.01)
    for column in ("token_level_rewards", "advantages", "returns"):
        a = np.concatenate([np.asarray(r) for r in cpu[column].to_pylist()])
        b = np.concatenate([np.asarray(r) for r in gpu[column].to_pylist()])
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


# every estimator family: group baselines, the GAE and REINFORCE++ scans, ReMax, the optimal-token baselines
TORCH_PATH = ["grpo", "rloo", "gae", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "remax",
              "optimal_token_baseline"]


@pytest.mark.parametrize("estimator", TORCH_PATH)
def test_the_torch_path_on_the_cpu_equals_the_numpy_path(monkeypatch, estimator):
    """The passes on torch tensors (a CUDA run's code path) held on the CPU give the numpy run's numbers: the same
    bits except where an exp enters (the KL penalty, IS weights: torch's exp is not correctly rounded), so CI
    checks the GPU path's code without a GPU (docs/arrays.md)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from rladv_cli.pipeline import driver

    t = pq.read_table(SAMPLES / "multiturn.parquet")
    if estimator == "remax":
        t = t.append_column("reward_baselines", pc.multiply(pc.cast(pc.list_value_length(t["responses"]), pa.float32()),
                                                           pa.scalar(0.001, pa.float32())))
    if estimator == "optimal_token_baseline":  # Σπ² = p² of the sampled token alone, p = exp(old_log_prob)
        old = t["old_log_probs"].combine_chunks()
        p = np.exp(old.flatten().to_numpy().astype(np.float64))
        t = t.append_column("sum_pi_squared", pa.ListArray.from_arrays(
            pc.subtract(old.offsets, old.offsets[0]), pa.array(p * p, pa.float32())))
    settings = dict(estimator=estimator, kl_coef=0.01, rollout_is="token", chunk_rows=7)
    numpy_run, report = rladv_cli.compute(t, device="cpu", **settings)
    monkeypatch.setattr(driver, "resolve_device", lambda name: "cpu:0")  # torch tensors, on the CPU
    torch_run, torch_report = rladv_cli.compute(t, device="cpu", **settings)
    assert report.timing.device == "cpu" and torch_report.timing.device == "cpu:0"
    for column in ("token_level_rewards", "advantages", "returns"):
        a = np.concatenate([np.asarray(r, dtype=np.float32) for r in numpy_run[column].to_pylist()])
        b = np.concatenate([np.asarray(r, dtype=np.float32) for r in torch_run[column].to_pylist()])
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=column)


def test_batch_normalised_is_weights_per_batch_equal_each_batch_alone():

    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    t = pq.read_table(SAMPLES / "multiturn.parquet")
    t = t.append_column("step", pa.array([i % 2 for i in range(t.num_rows)], pa.int64()))
    settings = dict(estimator="grpo", rollout_is="sequence", rollout_is_batch_normalize=True, device="cpu")
    both, report = rladv_cli.compute(t, batch_key="step", chunk_rows=5, **settings)
    assert set(report.rollout_rejection["batches"]) == {"step=0", "step=1"}
    for step in (0, 1):
        rows = pc.equal(t["step"], step)
        alone, _ = rladv_cli.compute(t.filter(rows), **settings)
        assert both.filter(rows)["rollout_is_weights"].equals(alone["rollout_is_weights"])
        assert both.filter(rows)["advantages"].equals(alone["advantages"])


def test_non_finite_results_stop_the_run_naming_the_row(tmp_path):
    # each score is a finite float32, their reward-to-go is not
    t = pa.table({
        "response_mask": pa.array([[1], [1, 1]], pa.list_(pa.int8())),
        "rm_scores": pa.array([[1.0], [3e38, 3e38]], pa.list_(pa.float32())),
        "reward_baselines": pa.array([0.0, 0.0], pa.float32()),
    })
    with pytest.raises(rladv_cli.ComputeError, match="row 1: remax produced a non-finite advantage or return at position 0"):
        rladv_cli.compute(t, estimator="remax", device="cpu")


def test_whitening_that_overflows_float32_stops_the_run():
    # finite values whose variance is not a float32: verl's rsqrt(inf) would zero every advantage
    t = pa.table({
        "response_mask": pa.array([[1, 1], [1, 1]], pa.list_(pa.int8())),
        "rm_scores": pa.array([[0.0, 1.0], [0.0, 0.0]], pa.list_(pa.float32())),
        "values": pa.array([[-3e38, 0.0], [0.0, 0.0]], pa.list_(pa.float32())),
    })
    with pytest.raises(rladv_cli.ComputeError, match="gae: the variance of the values to whiten in the dataset overflows"):
        rladv_cli.compute(t, estimator="gae", device="cpu")


def test_a_nan_batch_key_is_an_input_error_naming_the_row():
    t = pa.table({
        "step": pa.array([1.0, float("nan"), 1.0]),
        "uid": ["a", "a", "b"],
        "response_mask": pa.array([[1]] * 3, pa.list_(pa.int8())),
        "score": pa.array([1.0, 0.0, 0.0], pa.float32()),
    })
    with pytest.raises(rladv_cli.InputError, match="row 1, column step: is NaN"):
        rladv_cli.compute(t, estimator="grpo", device="cpu", batch_key="step")


@pytest.mark.parametrize("estimator", ["gae", "grpo", "rloo", "reinforce_plus_plus", "opo"])
def test_compute_reads_the_callers_table_without_writing_to_it(estimator):
    """Token columns become tensors over the Arrow buffers themselves (no copies): no stage may write to
    them, with overlong and KL shaping on and whatever the estimator."""

    import pyarrow.parquet as pq

    t = pq.read_table(SAMPLES / "multiturn.parquet")
    before = {name: [bytes(b) for chunk in t[name].chunks for b in chunk.buffers() if b is not None]
              for name in t.column_names}
    rladv_cli.compute(t, estimator=estimator, kl_coef=0.05, overlong_buffer_len=4, overlong_penalty_factor=1.0,
                      max_resp_len=40)
    after = {name: [bytes(b) for chunk in t[name].chunks for b in chunk.buffers() if b is not None]
             for name in t.column_names}
    assert "rm_scores" in before and after == before


@pytest.mark.parametrize("estimator", ["grpo", "rloo", "gae"])
def test_pad_width_is_a_floor_on_each_batchs_width(estimator):
    """``pad_width`` at most a batch's longest response changes nothing; wider, it sums row totals as the
    wider padded batch does (the same as ``compute(pad_widths=...)``, which ``inspect`` passes), per batch.
    The report records it with the settings."""
    sample = pq.read_table(SAMPLES / "multiturn.parquet")
    longest = max(len(m) for m in sample["response_mask"].to_pylist())
    plain, _ = rladv_cli.compute(sample, estimator=estimator, device="cpu")
    floor, report = rladv_cli.compute(sample, estimator=estimator, device="cpu", pad_width=longest)
    assert floor.equals(plain) and report.config["pad_width"] == longest
    wide, _ = rladv_cli.compute(sample, estimator=estimator, device="cpu", pad_width=longest + 300)
    given, _ = rladv_cli.compute(sample, estimator=estimator, device="cpu", pad_widths={None: longest + 300})
    assert wide.equals(given)


@pytest.mark.parametrize("helpers", [0, 1, 2])
def test_the_scan_pass_computes_ahead_and_takes_results_and_errors_in_order(helpers):
    """``shard._ahead``: each item's result in order, ``work`` run ahead on at most ``helpers`` threads (with none,
    only when its result is asked for), and an error raised when its own item's turn comes."""
    import threading

    from rladv_cli.pipeline.shard import _ahead

    started, running, most = [], [0], [0]
    lock = threading.Lock()

    def work(i):
        with lock:
            started.append(i)
            running[0] += 1
            most[0] = max(most[0], running[0])
        try:
            if i == 4:
                raise ValueError(f"item {i}")
            return i * i
        finally:
            with lock:
                running[0] -= 1

    taken = []
    with pytest.raises(ValueError, match="item 4"):
        for (i,), result in _ahead(((i,) for i in range(8)), work, helpers):
            if helpers == 0:
                assert started == list(range(i))  # nothing runs before its result is asked for
            taken.append(result())
    assert taken == [0, 1, 4, 9]
    assert most[0] <= max(helpers, 1) and len(started) <= 5 + helpers


def test_the_first_bad_row_is_named_whichever_chunk_the_scan_helpers_reach_first(tmp_path, monkeypatch):
    """A chunk's checks (on a helper thread) fail at row 21 and a later chunk's uid (taken in on the main
    thread) at row 33: the error names row 21, as a scan without helpers does."""
    import threading

    from rladv_cli.pipeline import shard

    rows = 40
    lengths = [3 + i % 4 for i in range(rows)]
    table = pa.table({
        "uid": [None if i == 33 else f"u{i // 4}" for i in range(rows)],
        "response_mask": [[1] * n for n in lengths],
        "rm_scores": [[0.0] * (n - 1) + [float(i % 2)] if i != 21 else [0.0] * (n + 1) for i, n in enumerate(lengths)],
    })
    path = tmp_path / "bad.parquet"
    pq.write_table(table, path)
    messages, threads, raised = [], [], []
    scanned = shard.ShardWork._scanned

    def noted(self, chunk, at, shaping):
        threads.append(threading.current_thread().name)
        try:
            return scanned(self, chunk, at, shaping)
        except rladv_cli.RladvError:
            raised.append(chunk.start)
            raise

    monkeypatch.setattr(shard.ShardWork, "_scanned", noted)
    for helpers in (2, 0):
        monkeypatch.setattr(shard, "SCAN_HELPERS", helpers)
        with pytest.raises(rladv_cli.RladvError) as err:
            rladv_cli.compute_file(str(path), estimator="grpo", output=tmp_path / "out.parquet", chunk_rows=5,
                                   cache_mib=0, device="cpu")
        messages.append(str(err.value))
    assert messages[0] == messages[1] and "row 21" in messages[0], messages
    assert threads[0].startswith("rladv-scan") and threads[-1] == "MainThread"  # the helpers did run
    assert raised.count(20) == 2  # both times the scan pass's checks found it, in the chunk of rows 20-24
