"""Rollout correction through the pipeline and the what-if sweep (`rladv offpolicy`)."""
import json
import math

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rladv_cli
from conftest import SAMPLES, runner
from rladv_cli.cli import app
from rladv_cli.diagnose.offpolicy import sweep


def hand_table():
    """Two groups. log ratio old - rollout per token; token_k1 '2.0' keeps ratios in [0.5, 2]."""
    big = math.log(3.0)  # ratio 3: outside [0.5, 2]
    return pa.table({
        "uid": ["a", "a", "b", "b"],
        "response_mask": pa.array([[1, 1, 1], [1, 1], [1, 0, 1], [1]], pa.list_(pa.int8())),
        "rm_scores": pa.array([[0, 0, 1], [0, 0.5], [0, 0, 1], [0]], pa.list_(pa.float32())),
        "old_log_probs": pa.array([[-1, -1, -1], [-1, -1], [-1, -1, -1], [-1]], pa.list_(pa.float32())),
        "rollout_log_probs": pa.array([[-1, -1 - big, -1], [-1 - big, -1 - big], [-1, -1 - big, -1], [-1 - big]],
                                      pa.list_(pa.float32())),
    })


def test_sweep_counts_on_a_hand_checked_batch(tmp_path):
    path = tmp_path / "h.parquet"
    pq.write_table(hand_table(), path)
    result = sweep([path], ["token_k1"], ["2.0", "5.0"])
    tight, loose = result.entries
    # valid tokens 3 + 2 + 2 + 1 = 8; rejected: row0 tok1, row1 both, row3 tok0 (row2's big ratio is on mask 0)
    assert result.valid_tokens == 8 and result.groups == 2
    assert tight.token_fraction_rejected == pytest.approx(4 / 8)
    assert tight.row_fraction_with_rejection == pytest.approx(3 / 4)
    assert tight.rows_fully_rejected == 2
    assert tight.groups_losing_all_tokens == 0
    assert tight.groups_with_one_surviving_row == 2
    assert (tight.surviving_tokens_per_group_mean, tight.surviving_tokens_per_group_min) == (2.0, 2)
    assert loose.token_fraction_rejected == 0 and loose.rows_fully_rejected == 0


def test_sweep_agrees_with_compute_and_with_any_chunking(tmp_path):
    path = SAMPLES / "multiturn.parquet"
    whole = sweep([path], ["seq_max_k2", "token_k3"], ["0.01", "0.1"])
    assert sweep([path], ["seq_max_k2", "token_k3"], ["0.01", "0.1"], chunk_rows=5) == whole
    table = pq.read_table(path)
    for entry in whole.entries:
        _, report = rladv_cli.compute(table, estimator="grpo", rollout_rs=entry.option,
                                      rollout_rs_threshold=entry.threshold, device="cpu")
        rr = report.rollout_rejection
        assert rr["rollout_rs_masked_fraction"] == pytest.approx(entry.token_fraction_rejected, rel=1e-6)
        fully = [w.count for w in report.warnings if w.code == "row_fully_rejected"]
        assert (fully[0] if fully else 0) == entry.rows_fully_rejected
        # an output of that run sweeps as its input: its loss_mask is the mask before rejection
        out, _ = rladv_cli.compute(table, estimator="grpo", rollout_rs=entry.option, rollout_rs_threshold=entry.threshold,
                                   device="cpu")
        pq.write_table(out, tmp_path / "out.parquet")
        again = sweep([tmp_path / "out.parquet"], ["seq_max_k2", "token_k3"], ["0.01", "0.1"])
        assert again.model_dump(exclude={"paths"}) == whole.model_dump(exclude={"paths"})


def test_offpolicy_cli_table_json_and_errors(tmp_path):
    path = str(SAMPLES / "multiturn.parquet")
    res = runner.invoke(app, ["offpolicy", path, "--rollout-rs", "token_k1", "--thresholds", "1.5,2.0", "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert [(e["option"], e["threshold"]) for e in data["entries"]] == [("token_k1", "1.5"), ("token_k1", "2.0")]
    res = runner.invoke(app, ["offpolicy", path, "--rollout-rs", "token_k1,seq_max_k2", "--threshold", "0.5_2.0,0.1"])
    assert res.exit_code == 0 and "token_k1,seq_max_k2" in res.stdout
    res = runner.invoke(app, ["offpolicy", path, "--rollout-rs", "seq_max_k2", "--thresholds", "0.5_2.0"])
    assert res.exit_code == 2 and res.stderr.count("\n") == 1 and "seq_max_k2" in res.stderr
    res = runner.invoke(app, ["offpolicy", str(SAMPLES / "groups.parquet"), "--rollout-rs", "token_k1", "--thresholds", "2"])
    assert res.exit_code == 2 and res.stderr.count("\n") == 1
    assert "column rollout_log_probs: missing; rollout rejection compares the old and the rollout" in res.stderr
    assert "did you mean" not in res.stderr  # ref_log_prob is a column of its own, not a misspelling
    res = runner.invoke(app, ["offpolicy", path, "--rollout-rs", "token_k1"])
    assert res.exit_code == 2 and "--thresholds" in res.stderr


def _random_table(seed, rows):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 12, rows)
    lists = {k: [] for k in ("response_mask", "rm_scores", "old_log_probs", "ref_log_prob", "rollout_log_probs", "loss_mask")}
    for i, L in enumerate(lengths):
        m = (rng.random(L) < 0.8).astype(np.int8)
        if i == 0:
            m[0] = 1  # verl refuses a batch without an actor token (tested elsewhere)
        old = rng.normal(-1, 0.3, L)
        lists["response_mask"].append(m.tolist())
        lists["loss_mask"].append(m.tolist())
        lists["rm_scores"].append(np.round(rng.normal(size=L), 2).tolist())
        lists["old_log_probs"].append(old.tolist())
        lists["ref_log_prob"].append((old + rng.normal(0, 0.1, L)).tolist())
        lists["rollout_log_probs"].append((old + rng.normal(0, 0.5, L)).tolist())
    cols = {"uid": [f"u{int(i)}" for i in rng.integers(0, max(rows // 3, 1), rows)]}
    for k, v in lists.items():
        cols[k] = pa.array(v, pa.list_(pa.int8() if "mask" in k else pa.float32()))
    return pa.table(cols)


@pytest.mark.slow  # hypothesis property
@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), rows=st.integers(2, 20),
       option=st.sampled_from(["token_k1", "token_k2", "seq_sum_k1", "seq_mean_k3", "seq_max_k2", "token_k1,seq_max_k3"]),
       chunk_rows=st.integers(1, 20), kl=st.booleans())
def test_rejection_changes_only_the_mask_and_is_chunk_independent(seed, rows, option, chunk_rows, kl):
    t = _random_table(seed, rows)
    threshold = {"token_k1": "0.7_1.5", "seq_sum_k1": "3.0", "token_k1,seq_max_k3": "2.0,0.2"}.get(option, "0.1")
    common = dict(estimator="grpo", device="cpu", kl_coef=0.05 if kl else 0.0, kl_penalty="k3")
    plain, _ = rladv_cli.compute(t, **common)
    rejected, _ = rladv_cli.compute(t, rollout_rs=option, rollout_rs_threshold=threshold, **common)
    chunked, _ = rladv_cli.compute(t, rollout_rs=option, rollout_rs_threshold=threshold, chunk_rows=chunk_rows, **common)
    assert rejected.equals(chunked)
    assert rejected["token_level_rewards"].equals(plain["token_level_rewards"])
    assert rejected["loss_mask"].equals(t["loss_mask"])
    # the output read back: loss_mask is its mask before rejection, so the same flags give the same output, and
    # without them the estimator takes the response_mask as rejected
    assert rladv_cli.compute(rejected, rollout_rs=option, rollout_rs_threshold=threshold, **common)[0].equals(rejected)
    assert rladv_cli.compute(rejected, **common)[0].equals(rejected)
    before = np.concatenate(t["response_mask"].to_numpy(zero_copy_only=False))
    after = np.concatenate(rejected["response_mask"].to_numpy(zero_copy_only=False))
    assert np.all(after <= before)


def test_an_output_with_rejection_replays_under_an_adaptive_kl_controller():
    """The adaptive controller's per-batch KL (the layout pass) is taken over the mask before rejection, the output's
    loss_mask, as in the run that wrote it."""
    t = _random_table(7, 30)
    t = t.append_column("step", pa.array([i % 3 for i in range(t.num_rows)]))
    common = dict(estimator="grpo", device="cpu", kl_coef=0.05, kl_penalty="k1", kl_ctrl="adaptive", kl_target=0.01,
                  kl_horizon=100, batch_key="step", rollout_rs="token_k1", rollout_rs_threshold="0.7_1.5")
    out, report = rladv_cli.compute(t, **common)
    assert report.tokens.rejected > 0 and len({b.coef for b in report.kl.batches}) == 3
    again, replayed = rladv_cli.compute(out, **common)
    assert again.equals(out) and replayed.kl == report.kl
