"""VAPO's decoupled, length-adaptive GAE (Yue et al. 2025, "VAPO: Efficient and Reliable Reinforcement Learning
for Advanced Reasoning Tasks", arXiv:2504.05118: Decoupled-GAE and Length-Adaptive GAE): ``vapo``. The paper
comes with no trainer to call; the recurrence is ``gae``'s (verl's ``compute_gae_advantage_return``) with two λ.
"""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from ..tensors import kernels
from ..tensors import xp as X
from ..tensors.batch import Batch
from ..tensors.xp import Array
from .derivation import Derivation, Row
from .gae import explain as gae_explain
from .gae import gae, scanned_gae
from .inputs import Inputs
from .registry import Estimator

if TYPE_CHECKING:
    from ..config.settings import Params


def vapo(batch: Batch, inputs: Inputs, params: Params) -> tuple[Array, Array]:
    """Raw advantages with a per-row policy λ and returns with the critic's λ, ``(N,)`` float32 each.

    ``λ_i = clamp(1 − 1/(α·l_i), 0, 1)`` with ``l_i`` the row's tokens with ``response_mask`` 1 and
    ``α = --vapo-alpha`` (VAPO's 0.05): rows shorter than ``1/α`` tokens get ``λ = 0`` (the formula would give
    a negative λ), long rows approach 1. ``γλ_i`` is formed in float64 and rounded once, as ``gae``'s.

        advantages = GAE(γ, λ_i)           (the pipeline whitens them over the batch)
        returns    = GAE(γ, --value-lam) + V   (the value target; VAPO's critic λ is 1.0)

    both by ``gae``'s recurrence, over mask-1 positions only (docs/semantics.md §7.19).
    """
    gamma_lam = X.float32(params.gamma * row_lambda(batch, params.vapo_alpha))
    advantages = scanned_gae(batch, params.gamma, batch.per_token(gamma_lam))
    _, returns = gae(batch, inputs, replace(params, lam=params.value_lam))
    return advantages, returns


def row_lambda(batch: Batch, alpha: float) -> Array:
    """``clamp(1 − 1/(α·l_i), 0, 1)`` per row, float64 ``(B,)`` (0 for a row without a mask-1 token)."""
    length = kernels.segment_sum(batch.response_mask, batch.row_offsets)
    with np.errstate(divide="ignore"):  # l = 0: 1 − ∞, clipped to 0
        return X.namespace(length).clip(1 - 1 / (alpha * length), min=0.0, max=1.0)


def explain(est: Estimator, row: Row, params: Params, whitening: dict) -> Derivation:
    """``gae``'s table for the row's policy λ, with the returns of the critic's λ, in float64 for reading."""
    length = float(np.sum(row["response_mask"] > 0))
    lam = min(max(1 - 1 / (params.vapo_alpha * length), 0.0), 1.0) if length else 0.0
    policy = gae_explain(est, row, replace(params, lam=lam), whitening)
    value = gae_explain(est, row, replace(params, lam=params.value_lam), whitening)
    at = policy.columns.index("return")
    tokens = [p[:at] + v[at:at + 1] + p[at + 1:] for p, v in zip(policy.tokens, value.tokens)]
    return Derivation(
        formula=[f"lambda = clamp(1 - 1/(alpha * {length:g} valid tokens), 0, 1); delta_t as in gae",
                 "A_t = delta_t + gamma*lambda * A_(t+1) on actor tokens; carried across mask-0 positions",
                 "returns_t = GAE(gamma, value_lam)_t + V_t;  advantages = (A - batch mean) / sqrt(batch var + 1e-8)"],
        constants={"gamma": params.gamma, "vapo_alpha": params.vapo_alpha, "lambda": lam,
                   "gamma*lambda": float(np.float32(params.gamma * lam)), "value_lam": params.value_lam, **whitening},
        columns=policy.columns, tokens=tokens)
