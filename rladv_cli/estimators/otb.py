"""Optimal token baselines: verl's ``optimal_token_baseline`` and ``tir_optimal_token_baseline`` (docs/semantics.md §7.12).

Per row: ``G_t = Σ_{u ≥ t} r_u·m_u`` (reward-to-go), ``w_t = 1 − 2·exp(old_log_prob_t) + sum_pi_squared_t``
(times ``rollout_is_weights_t²`` when the IS stage ran) and ``W_t = Σ_{u ≤ t} w_u·m_u``. Per group and position:
``b_t = Σ_i G[i,t]·W[i,t] / (Σ_i W[i,t] + 1e-8)``, over absolute positions (OTB, masked by m) or over each
row's actor tokens renumbered ``k = 0..n_i−1`` (TIR). ``advantages = (G − b)·m``, ``returns = G``. Zero tail:
when one row is strictly the longest of its group (in valid tokens), its baseline is 0 from the second-longest
row's count on.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..tensors import xp as X
from ..tensors.batch import Batch
from ..tensors.kernels import (
    broadcast_rows,
    cumsum_in_row,
    reverse_linear_scan,
    segment_sum,
)
from ..tensors.xp import Array
from .derivation import Derivation, Row, baseline_table
from .inputs import Inputs
from .registry import Estimator

if TYPE_CHECKING:
    from ..config.settings import Params

EPSILON = 1e-8


def _returns_and_weights(batch: Batch) -> tuple[Array, Array]:
    """``G (N,)`` and ``W (N,)`` of the module docstring."""
    m = batch.response_mask
    xp = X.namespace(m)
    returns = reverse_linear_scan(xp.ones_like(m), batch.token_level_rewards * m, batch.row_offsets)
    w = 1 - 2 * X.exp32(batch.old_log_probs) + batch.sum_pi_squared
    if batch.rollout_is_weights is not None:
        w = w * batch.rollout_is_weights**2
    return returns, cumsum_in_row(w * m, batch.row_offsets)


def negative_weight_rows(batch: Batch, inputs: Inputs, params: Params) -> Array:
    """Rows ``(B,) bool`` with an actor token whose ``w = 1 − 2·exp(old_log_prob) + sum_pi_squared`` is below 0:
    only possible where ``sum_pi_squared < π²`` (``w ≥ (1 − π)²`` when ``Σπ²`` holds ``π²``, as a policy's own
    does), and what lets a group's weights cancel (``baseline_ill_conditioned``)."""
    w = 1 - 2 * X.exp32(batch.old_log_probs) + batch.sum_pi_squared
    negative = X.float32((w < 0) & (batch.response_mask > 0))
    return segment_sum(negative, batch.row_offsets) > 0


def _position(batch: Batch) -> Array:
    """Absolute position of each token in its row, ``(N,)`` int64."""
    offsets = batch.row_offsets
    return X.namespace(offsets).arange(batch.num_tokens, device=X.dev(offsets)) - broadcast_rows(offsets[:-1], offsets)


def _actor_position(batch: Batch) -> Array:
    """Index of each token among its row's actor tokens (``k``; meaningful where m = 1), ``(N,)`` int64."""
    return X.int64(cumsum_in_row(batch.response_mask, batch.row_offsets)) - 1


def _accumulate(batch: Batch, inputs: Inputs, position: Array) -> dict[str, tuple[Array, Array]]:
    """The baseline's sums, and the sums of their terms' magnitudes (``*_abs``: how far float32 rounding of
    the sums can move the baseline, ``baseline_rounding``)."""
    m = batch.response_mask
    returns, weights = _returns_and_weights(batch)
    xp = X.namespace(m)
    where = (batch.per_token(inputs.group_index), xp.clip(position, min=0))
    numerator, denominator = returns * weights * m, weights * m
    return {"numerator": (where, numerator), "denominator": (where, denominator),
            "numerator_abs": (where, xp.abs(numerator)), "denominator_abs": (where, xp.abs(denominator))}


def baseline_rounding(sums: dict[str, Array]) -> Array:
    """Per (group, position) slot, how far one float32 rounding of each term of the baseline's sums can move
    ``b = N / (D + 1e-8)``: ``u·(Σ|G·W| + |b|·Σ|W|) / |D + 1e-8|`` with ``u = 2⁻²⁴``; ``(G·width,)`` float64
    from the float64 sums. Large where ``Σ_i W[i,t]`` cancels (``w = 1 − 2π + Σπ²`` takes both signs): there
    verl's float32 sums, in its own order, and rladv's float64 ones give baselines that far apart."""
    xp = X.namespace(sums["denominator"])
    d = sums["denominator"] + EPSILON
    b = sums["numerator"] / d
    return 2.0**-24 * (sums["numerator_abs"] + xp.abs(b) * sums["denominator_abs"]) / xp.abs(d)


def accumulate_absolute(batch: Batch, inputs: Inputs, params: Params) -> dict[str, tuple[tuple[Array, Array], Array]]:
    """Per token ``((group, absolute position), G·W·m)`` and ``(…, W·m)`` for the OTB sums."""
    return _accumulate(batch, inputs, _position(batch))


def accumulate_compact(batch: Batch, inputs: Inputs, params: Params) -> dict[str, tuple[tuple[Array, Array], Array]]:
    """Per token ``((group, actor index k), G·W·m)`` and ``(…, W·m)`` for the TIR sums (mask-0 tokens add 0)."""
    return _accumulate(batch, inputs, _actor_position(batch))


def _advantages(batch: Batch, inputs: Inputs, position: Array, members: Array) -> tuple[Array, Array]:
    g = inputs.groups
    sums = inputs.position_sums
    group = batch.per_token(inputs.group_index)
    xp = X.namespace(position)
    at = sums.index(group, xp.clip(position, min=0))
    baseline = sums.sums["numerator"][at] / (sums.sums["denominator"][at] + EPSILON)
    tail = (batch.per_token(batch.row_index) == g.longest_row[group]) & (position >= g.second_longest[group])
    baseline = xp.where(tail | (members[group] <= 1), 0.0, baseline)
    returns, _ = _returns_and_weights(batch)
    return (returns - baseline) * batch.response_mask, returns


def optimal_token_baseline(batch: Batch, inputs: Inputs, params: Params) -> tuple[Array, Array]:
    """OTB over absolute positions; a singleton group has baseline 0. ``(N,)`` each."""
    return _advantages(batch, inputs, _position(batch), inputs.groups.size)


def tir_optimal_token_baseline(batch: Batch, inputs: Inputs, params: Params) -> tuple[Array, Array]:
    """TIR-OTB over actor-token indices; groups count only rows with an actor token. ``(N,)`` each."""
    return _advantages(batch, inputs, _actor_position(batch), inputs.groups.nonempty_size)


def explain_absolute(est: Estimator, row: Row, params: Params, whitening: dict) -> Derivation:
    return baseline_table(row, ["G_t = reward-to-go over actor tokens",
                                "b_t = sum_i G[i,t] W[i,t] / (sum_i W[i,t] + 1e-8) over the group, per absolute position",
                                "advantages = (G - b) * m"])


def explain_compact(est: Estimator, row: Row, params: Params, whitening: dict) -> Derivation:
    return baseline_table(row, ["G_t = reward-to-go over actor tokens",
                                "b_k = group baseline at the k-th actor token of each row", "advantages = (G - b) * m"])
