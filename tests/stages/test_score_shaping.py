"""The row-score shaping of other trainers (docs/semantics.md §3.1): OpenRLHF's stop-properly penalty, AReaL's reward
bias, scale and clip, where they sit in the stage order (after DAPO's overlong shaping, before KL), and ROLL's
advantage clip after whitening; worked examples computed by hand, a property against the oracle
(``reference.shape_scores``), and the one-line errors of the options and the ``truncated`` column."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import reference as ref
import strategies as S
from conftest import assert_one_line_error, rladv, run, table, write
from hypothesis import given
from hypothesis import strategies as st
from strategies import examples

from rladv_cli.errors import ConfigError, InputError


def rewards(t: pa.Table, estimator: str = "grpo", **settings) -> list[list[float]]:
    return run(t, estimator, **settings)[0]["token_level_rewards"].to_pylist()


SCALAR = table(uid=["a", "a", "b"], response_mask=[[1, 1], [1], [1, 0]], score=[1.0, 0.0, -10.0])
# token-level scores: row 0 has two non-zero positions (total 1.5), row 1 one (at its last position)
TOKENS = table(uid=["a", "a"], response_mask=[[1, 1, 1], [1, 1]], rm_scores=[[0.5, 0, 1.0], [0, 10.0]])


def test_bias_then_scale_on_the_score_position():
    # AReaL: (score + bias) * scale, the score at the last position
    assert rewards(SCALAR, reward_bias=0.5, reward_scale=2.0) == [[0, 3.0], [1.0], [0, -19.0]]
    # token-level: the bias at the score position, every position scaled: total (1.5 + 1)·2 = 5
    assert rewards(TOKENS, reward_bias=1.0, reward_scale=2.0) == [[1.0, 0, 4.0], [0, 22.0]]


def test_clip_bounds_the_row_total():
    assert rewards(SCALAR, reward_clip=2.0) == [[0, 1.0], [0.0], [0, -2.0]]
    # row 0: total 5 > 3, its score position 4 becomes 3 − (5 − 4) = 2, so the total is 3; row 1: exactly 3
    assert rewards(TOKENS, reward_bias=1.0, reward_scale=2.0, reward_clip=3.0) == [[1.0, 0, 2.0], [0, 3.0]]
    np.testing.assert_array_equal(
        [r[-1] for r in rewards(SCALAR, reward_bias=0.3, reward_scale=1.7, reward_clip=5.0)],
        np.clip((np.float32([1.0, 0.0, -10.0]) + np.float32(0.3)) * np.float32(1.7), -5, 5))  # AReaL's float32 ops


def test_stop_properly_penalty_scales_or_replaces_truncated_rows():
    t = TOKENS.append_column("truncated", pa.array([True, False]))
    assert rewards(t, stop_properly_penalty_coef=0.5) == [[0.25, 0, 0.5], [0, 10.0]]
    assert rewards(t, stop_properly_penalty_coef=-0.5) == [[0, 0, -0.5], [0, 10.0]]  # the row's score replaced
    ints = TOKENS.append_column("truncated", pa.array([0, 1], pa.int8()))  # 0/1 integers are flags too
    assert rewards(ints, stop_properly_penalty_coef=0.0) == [[0.5, 0, 1.0], [0, 0.0]]


def test_the_order_overlong_then_stop_properly_then_bias_scale_clip_then_kl():
    t = table(uid=["a", "a"], response_mask=[[1] * 4, [1] * 2], rm_scores=[[0, 0, 0, 1.0], [0, 1.0]],
              truncated=[True, False], old_log_probs=[[-1.0] * 4, [-1.0] * 2], ref_log_prob=[[-1.5] * 4, [-1.5] * 2],
              types={"truncated": pa.bool_()})
    # row 0: overlong penalty −(4 − (4 − 2))/2 = −1 → 0; truncated → 0·0.5 = 0; (0 + 1)·2 = 2, clip 1.5; then KL
    # −0.1·0.5 at every position; row 1: no penalty, (1 + 1)·2 = 4 → 1.5, then KL
    got = rewards(t, overlong_buffer_len=2, max_resp_len=4, stop_properly_penalty_coef=0.5, reward_bias=1.0,
                  reward_scale=2.0, reward_clip=1.5, kl_coef=0.1)
    np.testing.assert_allclose(got[0], [-0.05, -0.05, -0.05, 1.45], rtol=0, atol=1e-6)
    np.testing.assert_allclose(got[1], [-0.05, 1.45], rtol=0, atol=1e-6)


def test_adv_clip_clamps_the_advantages_not_the_returns():
    t = table(uid=["a", "a", "a"], response_mask=[[1], [1], [1]], rm_scores=[[1.0], [0.0], [0.5]])
    out, _ = run(t, "grpo", adv_clip=0.5)
    assert out["advantages"].to_pylist() == [[0.5], [-0.5], [0.0]]
    np.testing.assert_allclose(np.concatenate(out["returns"].to_pylist()), [0.999998, -0.999998, 0], atol=1e-6)
    t = t.append_column("values", pa.array([[0.0]] * 3, pa.list_(pa.float32())))
    whitened, _ = run(t, "gae", adv_clip=0.1)  # after whitening: ±1 and 0 become ±0.1 and 0
    np.testing.assert_allclose(np.concatenate(whitened["advantages"].to_pylist()), [0.1, -0.1, 0], atol=1e-6)


def test_options_and_the_truncated_column_are_checked(tmp_path):
    plain = write(tmp_path / "plain.parquet", uid=["a", "a"], response_mask=[[1], [1]], rm_scores=[[1.0], [0.0]])
    line = assert_one_line_error(rladv("compute", plain, "--estimator", "grpo", "--stop-properly-penalty-coef", "0.5"),
                                 "plain.parquet", "--stop-properly-penalty-coef", column="truncated")
    assert "missing" in line
    assert_one_line_error(rladv("compute", plain, "--estimator", "grpo", "--stop-properly-penalty-coef", "1.5"),
                          "--stop-properly-penalty-coef must be in [0, 1]")
    for flag in ("--reward-clip", "--adv-clip"):
        assert_one_line_error(rladv("compute", plain, "--estimator", "grpo", flag, "0"), flag)
    bad = write(tmp_path / "bad.parquet", uid=["a", "a"], response_mask=[[1], [1]], rm_scores=[[1.0], [0.0]],
                truncated=[0, 2], types={"truncated": pa.int64()})
    assert_one_line_error(rladv("compute", bad, "--estimator", "grpo", "--stop-properly-penalty-coef", "0.5"),
                          "bad.parquet", "a flag is true or false", row=1, column="truncated")
    floats = write(tmp_path / "floats.parquet", uid=["a"], response_mask=[[1]], rm_scores=[[1.0]], truncated=[0.5],
                   types={"truncated": pa.float32()})
    with pytest.raises(InputError, match="column truncated: has type float; expected a bool"):
        run(pq.read_table(floats), "grpo", stop_properly_penalty_coef=0.5)
    with pytest.raises(ConfigError, match="^reward_scale: "):
        run(pq.read_table(plain), "grpo", reward_scale=float("inf"))


@pytest.mark.slow
@examples(25)
@given(data=st.data(), coef=st.one_of(st.none(), st.sampled_from([0.0, 0.25, 1.0, -0.5, -2.0])),
       scale=st.sampled_from([1.0, 0.5, 2.0, -1.0, 0.3]), bias=st.sampled_from([0.0, 0.5, -1.25, 0.1]),
       clip=st.one_of(st.none(), st.sampled_from([0.25, 1.0, 3.0])))
def test_shaped_scores_equal_the_oracle_and_do_not_depend_on_chunks(data, coef, scale, bias, clip):
    rollout = data.draw(S.rollouts(values=False, log_probs=False), label="rollout")
    truncated = data.draw(st.lists(st.booleans(), min_size=rollout.num_rows, max_size=rollout.num_rows), label="truncated")
    t = rollout.table().append_column("truncated", pa.array(truncated))
    settings = {"stop_properly_penalty_coef": coef, "reward_scale": scale, "reward_bias": bias, "reward_clip": clip}
    out = run(t, "grpo", one_chunk=True, **settings)[0]
    scores = ref.assemble_scores(rollout.lengths, score=rollout.score, rm_scores=rollout.rm_scores)
    positions = [n - 1 for n in rollout.lengths]  # no attention_mask: the last position
    want = ref.shape_scores(scores, positions, truncated, coef, scale, bias, clip)
    for i, (got, w) in enumerate(zip(out["token_level_rewards"].to_pylist(), want)):
        np.testing.assert_allclose(got, w, rtol=1e-6, atol=1e-6, err_msg=f"row {i}")
    chunk = data.draw(st.integers(1, rollout.num_rows), label="chunk_rows")
    chunked = run(t, "grpo", chunk_rows=chunk, **settings)[0]
    for column in ("token_level_rewards", "advantages"):  # the same bits
        bits = [x[column].combine_chunks().flatten().to_numpy().view(np.uint32) for x in (chunked, out)]
        np.testing.assert_array_equal(*bits, err_msg=column)
