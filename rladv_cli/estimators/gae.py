"""Generalised Advantage Estimation (Schulman et al. 2016, arXiv:1506.02438), verl's ``gae``."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..tensors import xp as X
from ..tensors.batch import Batch
from ..tensors.kernels import native_gae, reverse_linear_scan, shift_left_in_row
from ..tensors.xp import Array
from .derivation import Derivation, Row
from .inputs import Inputs
from .registry import Estimator

if TYPE_CHECKING:
    from ..config.settings import Params


def gae(batch: Batch, inputs: Inputs, params: Params) -> tuple[Array, Array]:
    """Raw GAE advantages and returns on flat tokens, ``(N,)`` float32 each (docs/semantics.md §7.1).

    Per row, right to left, over positions with ``m_t = 1`` only::

        nv_t    = V at the next position u > t with m_u = 1 (0 if none)
        delta_t = (r_t + γ·nv_t) − V_t
        A_t     = delta_t + (γλ)·A_{t+1}      if m_t = 1
        A_t     = A_{t+1}                     if m_t = 0   (state carried across observations)
        returns = A + V

    ``γλ`` is formed in float64 and rounded once. The pipeline whitens ``A`` over the batch. On the CPU the
    C loop (``kernels.native_gae``) runs this recurrence in verl's order; elsewhere two segmented scans do.
    """
    m, r, values = batch.response_mask, batch.token_level_rewards, batch.values
    gamma_lam = float(np.float32(params.gamma * params.lam))
    native = native_gae(m, r, values, batch.row_offsets, params.gamma, gamma_lam)
    if native is not None:
        return native
    advantages = scanned_gae(batch, params.gamma, gamma_lam)
    return advantages, advantages + values


def scanned_gae(batch: Batch, gamma: float, gamma_lam: float | Array) -> Array:
    """The recurrence above as two segmented scans: raw advantages ``(N,)`` float32. ``gamma_lam`` is one
    float32 value or one per token ``(N,)`` (``vapo``'s per-row λ); it is read at mask-1 positions only."""
    m, r, values = batch.response_mask, batch.token_level_rewards, batch.values
    kept = m > 0
    skipped = X.float32(~kept)
    # V at the first kept position at or after t: pass through unkept positions.
    value_here_or_next = reverse_linear_scan(skipped, values * m, batch.row_offsets)
    nextvalues = shift_left_in_row(value_here_or_next, batch.row_offsets)
    delta = (r + gamma * nextvalues) - values
    a = X.float32(kept) * gamma_lam + skipped
    return reverse_linear_scan(a, delta * m, batch.row_offsets)


def explain(est: Estimator, row: Row, params: Params, whitening: dict) -> Derivation:
    """The recursion above for one row, in float64 for reading, beside the computed (whitened) advantages."""
    m, r, values, adv = row["response_mask"], row["token_level_rewards"], row["values"], row["advantages"]
    gl = params.gamma * params.lam
    nextvalue, running = 0.0, 0.0
    table = [None] * m.size
    for t in reversed(range(m.size)):
        delta = r[t] + params.gamma * nextvalue - values[t]
        if m[t]:
            running = delta + gl * running
            table[t] = [t, int(m[t]), r[t], values[t], nextvalue, delta, running, running + values[t], adv[t]]
            nextvalue = values[t]
        else:
            table[t] = [t, 0, r[t], values[t], nextvalue, None, running, None, adv[t]]
    return Derivation(
        formula=["delta_t = r_t + gamma * V(next actor token) - V_t",
                 "A_t = delta_t + gamma*lam * A_(t+1) on actor tokens; A carried unchanged across mask-0 positions",
                 "returns_t = A_t + V_t;  advantages = (A - batch mean) / sqrt(batch var + 1e-8), 0 off-mask"],
        constants={"gamma": params.gamma, "lam": params.lam, "gamma*lam": float(np.float32(gl)), **whitening},
        columns=["t", "mask", "reward", "value", "next value", "delta", "running A", "return", "advantage"],
        tokens=table)
