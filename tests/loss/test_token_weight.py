"""``token_weight`` through the pipeline (docs/weights.md): the advantage times the row's scale, the oracle's
numbers for every mode of every trainer, verl's rejected tokens in its token-mean denominator, importance weights,
and the report's gradient section and hazards on batches whose figures are worked out by hand."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import reference as ref
from conftest import SAMPLES, run, table
from rladv_cli.loss.modes import AGGREGATIONS

ESTIMATOR = {"verl": "grpo", "trl": "grpo", "openrlhf": "group_norm", "nemo_rl": "grpo", "skyrl": "grpo"}


def ragged(seed: int, prompts: int = 4, n: int = 4, extra: dict | None = None) -> pa.Table:
    """``prompts`` uid groups of ``n`` consecutive rows: random lengths, tool-observation spans, a score per row."""
    rng = np.random.default_rng(seed)
    masks, scores = [], []
    for _ in range(prompts * n):
        L = int(rng.integers(1, 25))
        m = np.ones(L, dtype=int)
        for _ in range(int(rng.integers(0, 3))):
            a = int(rng.integers(0, L))
            m[a:a + int(rng.integers(1, 5))] = 0
        masks.append(m.tolist())
        scores.append(float(rng.choice([0.0, 1.0, 0.5, -0.25])))
    uid = [f"p{k}" for k in range(prompts) for _ in range(n)]
    return table(uid=uid, response_mask=masks, score=scores, **(extra or {}))


def lists(out: pa.Table, name: str) -> list[np.ndarray]:
    return [np.asarray(r, dtype=np.float64) for r in out[name].to_pylist()]


MODES = [(a.convention, m) for a in AGGREGATIONS.values() for m in a.modes]


@pytest.mark.parametrize("convention, mode", MODES, ids=[f"{c}-{m}" for c, m in MODES])
@pytest.mark.parametrize("batches", [(None, None), (8, None), (8, 2), (16, 4)], ids=["step", "mini", "micro", "ga"])
def test_every_mode_of_every_trainer_matches_the_oracle(convention, mode, batches):
    mini, micro = batches
    t = ragged(7)
    factor = 40.0 if AGGREGATIONS[convention].modes[mode].factor_required else None
    out, report = run(t, ESTIMATOR[convention], convention=convention, group_size=4 if convention in ("trl", "openrlhf")
                      else None, loss_agg_mode=mode, mini_batch_size=mini, micro_batch_size=micro,
                      loss_scale_factor=factor)
    masks = lists(out, "response_mask")
    expected = ref.token_weights(convention, mode, lists(out, "advantages"), masks, lists(out, "loss_mask"),
                                 steps=[0] * t.num_rows, prompts=t["uid"].to_pylist(), mini=mini, micro=micro,
                                 factor=factor)
    got = lists(out, "token_weight")
    for g, e, m in zip(got, expected, masks):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-12)
        assert np.all(g[m == 0] == 0)
    assert report.gradient.mode == mode and report.gradient.mass == pytest.approx(sum(np.abs(g).sum() for g in got))


def test_the_weight_is_the_advantage_times_the_rows_scale():
    out, report = run(ragged(3), "grpo", loss_agg_mode="seq-mean-token-mean", mini_batch_size=8)
    scale = report.row_table["weight_scale"].to_numpy()
    for a, w, m, c in zip(lists(out, "advantages"), lists(out, "token_weight"), lists(out, "response_mask"), scale):
        assert np.array_equal(w, (a.astype(np.float32) * np.float32(c)).astype(np.float64))
        assert np.all(w[m == 0] == 0)
    assert out.schema.field("token_weight").type == pa.list_(pa.float32())


def test_verl_token_mean_counts_rejected_tokens_in_its_denominator():
    """loss_mask marks 3 + 2 actor tokens; response_mask lost one of row 0's to rejection. verl 0.9.1 divides by
    batch_num_tokens = 5 (loss_mask), so each kept token weighs A/5 and the rejected one 0."""
    t = table(uid=["a", "a"], response_mask=[[1, 0, 1], [1, 1]], loss_mask=[[1, 1, 1], [1, 1]], score=[1.0, 0.0])
    out, report = run(t, "grpo", loss_agg_mode="token-mean")
    a = out["advantages"].to_pylist()  # ± 1/(sqrt(0.5) + 1e-6)
    w = out["token_weight"].to_pylist()
    assert w[0] == pytest.approx([a[0][0] / 5, 0.0, a[0][2] / 5]) and w[1] == pytest.approx([a[1][0] / 5] * 2)
    assert report.gradient.terms == {"T0 (loss_mask tokens of the mini-batch)": [5.0, 5.0]}
    # the same rows under seq-mean-token-mean: row 0 has 2 tokens left, G = 2 rows
    out, _ = run(t, "grpo", loss_agg_mode="seq-mean-token-mean")
    assert out["token_weight"].to_pylist()[0] == pytest.approx([a[0][0] / 4, 0.0, a[0][2] / 4])


def test_rollout_importance_weights_multiply_the_weight():
    rng = np.random.default_rng(1)
    t = ragged(5, extra=None)
    old = [rng.normal(-1, 0.3, len(m)).tolist() for m in t["response_mask"].to_pylist()]
    rollout = [[x + float(rng.normal(0, 0.2)) for x in row] for row in old]
    t = t.append_column("old_log_probs", pa.array(old, pa.list_(pa.float32())))
    t = t.append_column("rollout_log_probs", pa.array(rollout, pa.list_(pa.float32())))
    out, report = run(t, "grpo", loss_agg_mode="token-mean", rollout_is="token", rollout_is_threshold="1.5")
    t0 = report.gradient.terms["T0 (loss_mask tokens of the mini-batch)"][0]
    for a, w, rho in zip(lists(out, "advantages"), lists(out, "token_weight"), lists(out, "rollout_is_weights")):
        np.testing.assert_allclose(w, a * rho / t0, rtol=1e-6, atol=1e-12)
    assert any(np.any((r != 1) & (a != 0)) for r, a in zip(lists(out, "rollout_is_weights"), lists(out, "advantages")))


def test_chunks_do_not_change_the_weights():
    t = ragged(11)
    whole, _ = run(t, "grpo", one_chunk=True, loss_agg_mode="seq-mean-token-sum-norm", mini_batch_size=8,
                   micro_batch_size=2)
    pieces, _ = run(t, "grpo", chunk_rows=3, loss_agg_mode="seq-mean-token-sum-norm", mini_batch_size=8,
                    micro_batch_size=2)
    assert whole["token_weight"].equals(pieces["token_weight"])


def test_mini_batches_stay_inside_steps():
    """Two steps of 8 rows: mini-batches of 4 rows are cut within each step, whatever the rows' order."""
    t = ragged(2)
    t = t.append_column("step", pa.array([i % 2 for i in range(t.num_rows)], pa.int64()))
    out, report = run(t, "grpo", loss_agg_mode="token-mean", mini_batch_size=4, batch_key="step")
    assert report.row_table["mini_batch"].to_list() == [0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3, 2, 3]
    expected = ref.token_weights("verl", "token-mean", lists(out, "advantages"), lists(out, "response_mask"),
                                 lists(out, "loss_mask"), steps=t["step"].to_pylist(), mini=4)
    for g, e in zip(lists(out, "token_weight"), expected):
        np.testing.assert_allclose(g, e, rtol=1e-6)


# ------------------------------------------------------------------------------------ the report's section
def test_the_section_by_cause_turn_and_group_by_hand():
    """Group a: scores 1 and 0 (A = ±0.707...), group b ties (all-equal, weight 0), group c a singleton
    (grpo: A = R/(1+eps) = 0.5). Row 0 has two turns: tokens 0-1 and 3 (position 2 a tool observation).
    token-mean over the 8 actor tokens: each token weighs |A|/8."""
    t = table(uid=["a", "a", "b", "b", "c"], response_mask=[[1, 1, 0, 1], [1, 1], [1], [1], [1]],
              score=[1.0, 0.0, 1.0, 1.0, 0.5])
    out, report = run(t, "grpo", loss_agg_mode="token-mean")
    g = report.gradient
    a = abs(out["advantages"].to_pylist()[0][0])
    single = out["advantages"].to_pylist()[4][0]
    mass = (5 * a + single) / 8
    assert g.mass == pytest.approx(mass, rel=1e-6)
    by = {p.part: p for p in g.by_cause}
    assert (by["signal"].rows, by["signal"].tokens) == (2, 5)
    assert by["signal"].mass_share == pytest.approx(5 * a / 8 / mass, rel=1e-6)
    assert by["singleton"].mass_share == pytest.approx(single / 8 / mass, rel=1e-6)
    assert by["all_top"].mass_share == 0 and by["all_top"].token_share == pytest.approx(2 / 8)
    turns = {p.part: p for p in g.by_turn}
    assert (turns["turn 1"].tokens, turns["turn 2"].tokens, turns["turn 2"].rows) == (7, 1, 1)
    assert turns["turn 2"].mass_share == pytest.approx(a / 8 / mass, rel=1e-6)
    assert [x.group for x in g.top_groups] == ["a", "c"]
    v = report.verdict
    assert {c.code: c.mass_share for c in v.causes}["singleton_group"] == pytest.approx(single / 8 / mass, rel=1e-6)
    assert v.signal_mass_share == pytest.approx(5 * a / 8 / mass, rel=1e-6)
    assert "of the gradient mass (verl 0.9.1 token-mean)" in v.headline


def test_length_bias_warns_when_the_longest_rows_weigh_little_per_token():
    """20 rows in 10 pairs (scores 1, 0): one pair 200 tokens long, the others 10. Under seq-mean-token-mean every
    row weighs |A| whatever its length, so a token of a long row weighs 10/200 of a short row's; the longest 10%
    (2 rows) hold 400/580 of the tokens and 1/10 of the mass: factor 0.145, 7x under the average."""
    lengths = [200, 200] + [10] * 18
    t = table(uid=[f"p{i // 2}" for i in range(20)], response_mask=[[1] * L for L in lengths],
              score=[float(i % 2 == 0) for i in range(20)])
    _, report = run(t, "grpo", loss_agg_mode="seq-mean-token-mean")
    lb = report.gradient.length_bias
    assert (lb.rows, lb.min_tokens) == (2, 200)
    assert lb.token_share == pytest.approx(400 / 580) and lb.mass_share == pytest.approx(0.1, rel=1e-5)
    assert lb.factor == pytest.approx(0.1 / (400 / 580), rel=1e-5)
    assert lb.aggregation_factor == pytest.approx((1 / 200) / (20 / 580), rel=1e-5)
    hazard = {h.code: h for h in report.verdict.hazards}["length_bias"]
    assert hazard.level == "warn" and "learned from less per token" in hazard.message
    _, fair = run(t, "grpo", loss_agg_mode="token-mean")  # every token weighs |A|/T: no bias
    assert fair.gradient.length_bias.factor == pytest.approx(1.0, rel=1e-5) and not fair.verdict.hazards


def test_mass_concentration_and_truncated_negative_mass():
    """40 rows in pairs; pair 0's rows are 300 tokens long under token-sum, so its 2 rows (the heaviest 5%) carry
    600 of the 600 + 38·10 tokens' mass. The truncated rows are the losing halves of 5 pairs: all negative."""
    lengths = [300, 300] + [10] * 38
    truncated = [i % 2 == 1 and i < 10 for i in range(40)]
    t = table(uid=[f"p{i // 2}" for i in range(40)], response_mask=[[1] * L for L in lengths],
              score=[float(i % 2 == 0) for i in range(40)], truncated=truncated, types={"truncated": pa.bool_()})
    _, report = run(t, "grpo", loss_agg_mode="token-sum")
    c = report.gradient.concentration
    assert (c.rows, c.heaviest) == (40, 2) and c.mass_share == pytest.approx(600 / 980, rel=1e-5)
    tr = report.gradient.truncated
    assert (tr.rows, tr.source) == (5, "the truncated column")
    assert tr.negative_mass_share == pytest.approx((300 + 4 * 10) / 490, rel=1e-5)
    assert tr.token_share == pytest.approx((300 + 40) / 980, rel=1e-5)
    codes = {h.code: h.level for h in report.verdict.hazards}
    assert codes == {"mass_concentration": "warn", "truncated_negative_mass": "warn"}
    assert report.verdict.level == "warn"


def test_the_sample_has_a_section_and_no_hazard():
    out, report = run(pq.read_table(SAMPLES / "multiturn.parquet"), "grpo", loss_agg_mode="token-mean")
    g = report.gradient
    assert g.trainer == "verl 0.9.1" and g.default and g.mini_batches == 1
    assert sum(p.token_share for p in g.by_length) == pytest.approx(1.0)
    assert sum(p.mass_share for p in g.by_cause) == pytest.approx(1.0)
    assert not report.verdict.hazards
