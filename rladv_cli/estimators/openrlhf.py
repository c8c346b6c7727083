"""OpenRLHF 0.11.2's outcome estimators (``openrlhf/trainer/ppo_utils/experience_maker.py``,
``compute_advantages_and_returns``; the per-token reward in ``openrlhf/models/utils.py`` ``compute_reward`` and
``compute_approx_kl``). RLOO: Ahmadian et al. 2024, arXiv:2402.14740; Dr. GRPO: Liu et al. 2025,
arXiv:2503.20783; group_norm is GRPO (Shao et al. 2024, arXiv:2402.03300) with epsilon 1e-9.

OpenRLHF cuts the step's rewards (float32 at least) into ``[G, n]`` with ``n = n_samples_per_prompt``
(rladv's ``--group-size``), takes the baseline along each row of that matrix, then builds a per-token reward:
the row's scalar at its last action token plus ``−kl_coef · kl`` at every token, and returns the cumulative sum
from each token to the end (gamma 1) as the advantage (docs/conventions.md).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..tensors import kernels
from ..tensors import xp as X
from ..tensors.batch import Batch
from ..tensors.groups import block_rows
from ..tensors.xp import Array
from . import matrix
from .derivation import Derivation, Row
from .inputs import Inputs
from .registry import Estimator

if TYPE_CHECKING:
    from ..config.settings import Params

GROUP_NORM_EPSILON = 1e-9  # hard-coded in OpenRLHF


def _per_block(total: Array, group: Array, batch: Array, params: Params, rule) -> Array:
    """``rule(r [G, n]) -> [G, n]`` applied to each batch's block matrix of row totals, on the host in numpy
    (``matrix``: torch's rounding); ``(B,)`` as the kind of ``total``."""
    values = X.to_numpy(total)
    out = np.zeros_like(values)
    with np.errstate(divide="ignore", invalid="ignore"):  # a one-row block: NaN or inf, refused when written
        for rows in block_rows(X.to_numpy(group), X.to_numpy(batch), params.group_size):
            out[rows] = rule(values[rows])
    return X.like(out, total)


def group_norm_rows(total: Array, group: Array, batch: Array, params: Params) -> Array:
    """``(r − mean_g) / (std_g + 1e-9)``, torch's unbiased std along each block (a one-row block gives NaN, which
    the write pass refuses as non-finite)."""
    return _per_block(total, group, batch, params,
                      lambda r: (r - matrix.row_means(r)[:, None]) / (matrix.row_stds(r)[:, None] + GROUP_NORM_EPSILON))


def rloo_rows(total: Array, group: Array, batch: Array, params: Params) -> Array:
    """``r − (Σ_g r − r) / (n − 1)`` (a one-row block divides by 0)."""
    n = params.group_size
    return _per_block(total, group, batch, params, lambda r: r - (kernels.torch_row_sums(r)[:, None] - r) / (n - 1))


def dr_grpo_rows(total: Array, group: Array, batch: Array, params: Params) -> Array:
    """``r − mean_g`` (also OpenRLHF's ``reinforce_baseline`` before its whitening)."""
    return _per_block(total, group, batch, params, lambda r: r - matrix.row_means(r)[:, None])


def reinforce_rows(total: Array, group: Array, batch: Array, params: Params) -> Array:
    """``R`` itself: no baseline (``reinforce``, whitened afterwards)."""
    return X.namespace(total).asarray(total, copy=True)


def flash_reinforce_rows(total: Array, group: Array, batch: Array, params: Params) -> Array:
    """``r − mean`` over the whole batch's matrix (no groups, no whitening)."""
    return _per_block(total, group, batch, params, lambda r: r - kernels.torch_mean(r))


def approx_kl(log_probs: Array, ref_log_probs: Array, mode: str) -> Array:
    """OpenRLHF's ``compute_approx_kl`` forward value, ``d = log π − log π_ref`` in float32: k1 ``d``, k2
    ``d²/2``, k3 ``exp(−d') − 1 + d'`` with ``d' = max(d, −10)``; clamped to ``[−10, 10]``. ``(N,)``."""
    xp = X.namespace(log_probs, ref_log_probs)
    d = X.float32(log_probs) - X.float32(ref_log_probs)
    if mode == "k1":
        value = d
    elif mode == "k2":
        value = d ** 2 / 2.0
    else:
        d = xp.clip(d, min=-10)
        value = X.exp32(-d) - 1 + d
    return xp.clip(value, min=-10, max=10)


def _action_ends(mask: Array, row_offsets: Array) -> tuple[Array, Array]:
    """Each row's first and last action token (``mask`` 1) as positions within the row, ``(B,)`` int64; −1 for
    both in a row without one."""
    xp = X.namespace(mask)
    local = xp.arange(X.numel(mask), device=X.dev(mask)) - kernels.broadcast_rows(row_offsets[:-1], row_offsets)
    act, local = mask > 0.5, X.float64(local)
    last = kernels.segment_max(xp.where(act, local, -1.0), row_offsets, -1.0)
    first = kernels.segment_min(xp.where(act, local, float("inf")), row_offsets, -1.0)
    return X.int64(xp.where(last >= 0, first, -1.0)), X.int64(last)


def overlong_penalty(mask: Array, row_offsets: Array, buffer_len: int, penalty_factor: float,
                     max_new_tokens: int) -> Array:
    """OpenRLHF's DAPO overlong penalty per row (``apply_overlong_penalty``), ``(B,)`` float64, in its Python
    arithmetic (docs/conventions.md)::

        L       = last − first + 1 action token of the row (``mask`` 1; 0 without one: its ``response_length``)
        exceed  = min(L − (max_new_tokens − buffer_len), buffer_len)
        penalty = −exceed / buffer_len · penalty_factor where exceed > 0, else 0

    Unlike verl's, the exceedance is capped at the buffer and ``L`` spans the action tokens only."""
    xp = X.namespace(mask)
    first, last = _action_ends(mask, row_offsets)
    length = xp.where(last >= 0, last - first + 1, 0)
    exceed = xp.clip(length - (max_new_tokens - buffer_len), max=buffer_len)
    return xp.where(exceed > 0, -X.float64(exceed) / buffer_len * penalty_factor, 0.0)


def cumulative_returns(batch: Batch, inputs: Inputs, params: Params, gamma: float = 1.0) -> tuple[Array, Array]:
    """Per token ``G_t = Σ_{u ≥ t} γ^(u−t) m_u · (a_i·[u = e_i] − β·kl_u)`` with ``a_i`` the row's advantage,
    ``e_i`` its last action token (``m = 1``), ``β = kl_coef`` (0 without KL) and ``γ`` 1 (OpenRLHF forces it
    for every estimator but ``reinforce``); advantages = returns, times ``m``. ``a_i`` may be float64 (rewards
    read as float64): it is rounded to the tokens' float32 there, as OpenRLHF casts it to its KL's dtype. ``(N,)``."""
    m = batch.response_mask
    xp = X.namespace(m)
    reward = xp.zeros_like(m)
    offsets = batch.row_offsets
    _, end = _action_ends(m, offsets)
    has_action = end >= 0
    last = offsets[:-1] + end
    reward[last[has_action]] = xp.astype(inputs.row_advantage[has_action], m.dtype)
    if params.kl_coef > 0:
        reward = reward + -params.kl_coef * approx_kl(batch.old_log_probs, batch.ref_log_prob, params.kl_penalty)
    returns = kernels.reverse_linear_scan(xp.full_like(m, gamma), m * reward, batch.row_offsets) * m
    return returns, returns


def discounted_returns(batch: Batch, inputs: Inputs, params: Params) -> tuple[Array, Array]:
    """``reinforce``: ``cumulative_returns`` discounted by ``--gamma`` (OpenRLHF's ``gamma``). ``(N,)``."""
    return cumulative_returns(batch, inputs, params, params.gamma)


def explain(est: Estimator, row: Row, params: Params, whitening: dict) -> Derivation:
    """``rladv explain``: the row's cumulative returns per token, from the row's scalar at its last action token
    and the per-token KL reward, and the advantages (the returns, whitened for the estimators that whiten)."""
    m, adv, ret = row["response_mask"], row["advantages"], row["returns"]
    gamma = "γ^(u-t) " if "gamma" in est.settings else ""
    formula = [est.summary, f"baseline: {est.baseline}",
               f"G_t = sum over u >= t of {gamma}m_u * (a_i at the last action token - kl_coef * kl_u)",
               ("advantage = (G_t - mean) * rsqrt(max(var, 1e-8)), the batch's biased moments" if params.norm_adv_by_std
                else "advantage = G_t - mean, the batch's mean (--no-norm-adv-by-std: OpenRLHF's no_std_norm)")
               if est.whiten else "advantage = G_t"]
    constants = {"kl_coef": params.kl_coef, **({"kl estimate": params.kl_penalty} if params.kl_coef else {}),
                 **({"gamma": params.gamma} if gamma else {}), **whitening}
    tokens = [[t, int(m[t]), float(ret[t]) if m[t] else None, float(adv[t]) if m[t] else None] for t in range(m.size)]
    return Derivation(formula=formula, constants=constants, columns=["t", "mask", "return G_t", "advantage"],
                      tokens=tokens)
