"""Property tests of ``token_weight`` on random ragged batches (hypothesis; docs/weights.md):

1. every verl mode, with random mini- and micro-batches, equals the oracle (``reference.token_weights``);
2. the weights do not depend on ``chunk_rows`` (bit-equal) and are 0 wherever ``response_mask`` is 0;
3. the GPU's code path (the C loops taken away) and, with CUDA, the GPU itself agree with the CPU.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import reference as ref
import strategies as S
from conftest import run
from rladv_cli.loss.modes import AGGREGATIONS
from strategies import attempt, examples, failed

pytestmark = pytest.mark.slow

MODES = list(AGGREGATIONS["verl"].modes)
ESTIMATORS = ("grpo", "gae", "rloo")


@st.composite
def weighing(draw, rows: int) -> dict:
    """A verl mode and mini/micro sizes that divide the batch's ``rows``."""
    divisors = [d for d in range(1, rows + 1) if rows % d == 0]
    mini = draw(st.sampled_from([None, *divisors]))
    micro = draw(st.sampled_from([None, *[d for d in range(1, (mini or rows) + 1) if (mini or rows) % d == 0]]))
    mode = draw(st.sampled_from(MODES))
    factor = draw(st.sampled_from([None, 7.0])) if mode == "seq-mean-token-sum-norm" else None
    return dict(loss_agg_mode=mode, mini_batch_size=mini, micro_batch_size=micro, loss_scale_factor=factor)


def lists(out, name):
    return [np.asarray(r, dtype=np.float64) for r in out[name].to_pylist()]


def assert_same_weights(one, other) -> None:
    """Two outcomes of ``attempt(run, ...)``: both refused, or weights equal within float32 reduction order."""
    assert failed(one) == failed(other)
    if not failed(one):
        for a, b in zip(lists(one[0], "token_weight"), lists(other[0], "token_weight")):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-7)


@examples(30)
@given(data=st.data(), estimator=st.sampled_from(ESTIMATORS))
def test_every_verl_mode_matches_the_oracle(data, estimator):
    rollout = data.draw(S.rollouts(values=True), label="rollout")
    table = rollout.table()
    w = data.draw(weighing(table.num_rows), label="weighing")
    outcome = attempt(run, table, estimator, **w)
    if failed(outcome):
        return  # a batch verl refuses too (e.g. gae whitening with one valid token)
    out, _ = outcome
    masks = lists(out, "response_mask")
    expected = ref.token_weights("verl", w["loss_agg_mode"], lists(out, "advantages"), masks, lists(out, "loss_mask"),
                                 steps=[0] * table.num_rows, mini=w["mini_batch_size"], micro=w["micro_batch_size"],
                                 factor=w["loss_scale_factor"])
    for got, exp, m in zip(lists(out, "token_weight"), expected, masks):
        np.testing.assert_allclose(got, exp, rtol=2e-6, atol=1e-30)
        assert np.all(got[m == 0] == 0)


@examples(20)
@given(data=st.data(), estimator=st.sampled_from(ESTIMATORS))
def test_chunk_rows_do_not_change_the_weights(data, estimator):
    table = data.draw(S.rollouts(values=True), label="rollout").table()
    w = data.draw(weighing(table.num_rows), label="weighing")
    chunk = data.draw(st.integers(1, table.num_rows), label="chunk_rows")
    whole = attempt(run, table, estimator, one_chunk=True, **w)
    parts = attempt(run, table, estimator, chunk_rows=chunk, **w)
    assert failed(whole) == failed(parts)
    if not failed(whole):
        assert whole[0]["token_weight"].equals(parts[0]["token_weight"])
        assert whole[1].gradient == parts[1].gradient


@pytest.mark.skipif(not __import__("rladv_cli.tensors.kernels").tensors.kernels.NATIVE_SCAN,
                    reason="the C loops were not built")
@examples(10)
@given(data=st.data(), estimator=st.sampled_from(ESTIMATORS))
def test_the_gpu_code_path_gives_the_same_weights(data, estimator):
    from unittest import mock

    from rladv_cli.tensors import kernels

    table = data.draw(S.rollouts(values=True), label="rollout").table()
    w = data.draw(weighing(table.num_rows), label="weighing")
    native = attempt(run, table, estimator, **w)
    with mock.patch.object(kernels, "_scan", None), mock.patch.object(kernels, "_rows", None):
        torch_only = attempt(run, table, estimator, **w)
    assert_same_weights(native, torch_only)


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA device")
@examples(10)
@given(data=st.data(), estimator=st.sampled_from(ESTIMATORS))
def test_cuda_agrees_with_cpu(data, estimator):
    table = data.draw(S.rollouts(values=True), label="rollout").table()
    w = data.draw(weighing(table.num_rows), label="weighing")
    on_cpu = attempt(run, table, estimator, **w)
    on_gpu = attempt(run, table, estimator, device="cuda", **w)
    assert_same_weights(on_cpu, on_gpu)
