"""Generalised Advantage Estimation (Schulman et al. 2016, arXiv:1506.02438), verl's ``gae``."""
from __future__ import annotations

import numpy as np
from torch import Tensor

from ..config.settings import Config
from ..tensors.batch import Batch
from ..tensors.kernels import native_gae, reverse_linear_scan, shift_left_in_row


def gae(batch: Batch, cfg: Config) -> tuple[Tensor, Tensor]:
    """Raw GAE advantages and returns on flat tokens, ``(N,)`` float32 each (SEMANTICS §7.1).

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
    gamma_lam = float(np.float32(cfg.gamma * cfg.lam))
    native = native_gae(m, r, values, batch.row_offsets, cfg.gamma, gamma_lam)
    if native is not None:
        return native
    kept = m > 0
    # V at the first kept position at or after t: pass through unkept positions.
    value_here_or_next = reverse_linear_scan((~kept).float(), values * m, batch.row_offsets)
    nextvalues = shift_left_in_row(value_here_or_next, batch.row_offsets)
    delta = (r + cfg.gamma * nextvalues) - values
    a = kept.float() * gamma_lam + (~kept).float()
    advantages = reverse_linear_scan(a, delta * m, batch.row_offsets)
    return advantages, advantages + values
