"""Group Relative Policy Optimization (Shao et al. 2024, arXiv:2402.03300): verl's ``grpo`` and ``grpo_vectorized``."""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from ..tensors import xp as X
from ..tensors.batch import Batch
from ..tensors.xp import Array
from .inputs import Inputs

if TYPE_CHECKING:
    from ..config.settings import Params


def grpo(batch: Batch, inputs: Inputs, params: Params) -> tuple[Array, Array]:
    """``a_i = (R_i − μ_g) / (σ_g + ε)`` (or ``R_i − μ_g`` without std normalisation), times ``m``; ``(N,)``.

    ``R_i = Σ_t r[i,t]`` over every position; ``μ_g``, ``σ_g``: float32 mean and Bessel std of the group's
    row totals, ``μ = 0, σ = 1`` for a singleton (so it keeps ``R/(1+ε)``). returns = advantages
    (docs/semantics.md §7.2). With multi-output sessions (§8) every row takes the advantage of its session's
    final output, whose total ``inputs.session_total`` is the one in the group statistics.
    """
    g, at = inputs.groups, inputs.group_index
    total = inputs.reward_total if inputs.session_total is None else inputs.session_total
    mean, std = g.mean[at], g.std[at]
    a = (total - mean) / (std + params.epsilon) if params.norm_adv_by_std else total - mean
    if inputs.session_active is not None:  # the final output's advantage at its first actor token (0 if none)
        a = a * inputs.session_active
    advantages = batch.per_token(a) * batch.response_mask
    return advantages, advantages


def grpo_vectorized(batch: Batch, inputs: Inputs, params: Params) -> tuple[Array, Array]:
    """``a_i = (R_i − μ_g) / (σ_g + ε)`` with verl 0.9.1's ``group_mean_std`` (docs/semantics.md §7.3): ``μ_g`` =
    row-order sum / size, ``σ_g`` = two-pass Bessel std without floor, ``μ = 0, σ = 1`` for a singleton. Always
    divides by the std: verl's dispatcher never passes ``norm_adv_by_std_in_grpo`` to it. ``(N,)``."""
    g, at = inputs.groups, inputs.group_index
    xp = X.namespace(at)
    single = g.size[at] <= 1
    mean = xp.where(single, 0.0, g.seq_mean[at])
    std = xp.where(single, 1.0, g.seq_std[at])
    advantages = batch.per_token((inputs.reward_total - mean) / (std + params.epsilon)) * batch.response_mask
    return advantages, advantages


def arithmetic(r: float, totals: np.ndarray, params: Params) -> str:
    """The row's ``(R − μ) / (σ + ε)`` (or ``R − μ``) with its group's numbers; a singleton's ``μ = 0, σ = 1``."""
    n = totals.size
    mean, std = (float(totals.mean()), float(totals.std(ddof=1))) if n > 1 else (0.0, 1.0)
    if not params.norm_adv_by_std:
        return f"R - mean = {r:.7g} - {mean:.7g} = {r - mean:.7g}"
    return f"(R - mean) / (std + eps) = ({r:.7g} - {mean:.7g}) / ({std:.7g} + {params.epsilon:g}) = " \
           f"{(r - mean) / (std + params.epsilon):.7g}"


def arithmetic_vectorized(r: float, totals: np.ndarray, params: Params) -> str:
    """``grpo_vectorized`` divides by the std whatever ``--norm-adv-by-std`` says."""
    return arithmetic(r, totals, replace(params, norm_adv_by_std=True))
