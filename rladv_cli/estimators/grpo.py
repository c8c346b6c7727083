"""Group Relative Policy Optimization (Shao et al. 2024, arXiv:2402.03300): verl's ``grpo`` and ``grpo_vectorized``."""
from __future__ import annotations

from torch import Tensor

from ..config.settings import Config
from ..tensors.batch import Batch


def grpo(batch: Batch, cfg: Config) -> tuple[Tensor, Tensor]:
    """``a_i = (R_i − μ_g) / (σ_g + ε)`` (or ``R_i − μ_g`` without std normalisation), times ``m``; ``(N,)``.

    ``R_i = Σ_t r[i,t]`` over every position; ``μ_g``, ``σ_g``: float32 mean and Bessel std of the group's
    row totals, ``μ = 0, σ = 1`` for a singleton (so it keeps ``R/(1+ε)``). returns = advantages (§7.2).
    With multi-output sessions (§8) every row takes the advantage of its session's final output, whose
    total ``batch.session_total`` is the one in the group statistics.
    """
    g = batch.groups
    total = batch.reward_total() if batch.session_total is None else batch.session_total
    mean, std = g.mean[batch.group_index], g.std[batch.group_index]
    a = (total - mean) / (std + cfg.epsilon) if cfg.norm_adv_by_std else total - mean
    if batch.session_active is not None:  # the final output's advantage at its first actor token (0 if none)
        a = a * batch.session_active
    advantages = batch.per_token(a) * batch.response_mask
    return advantages, advantages


def grpo_vectorized(batch: Batch, cfg: Config) -> tuple[Tensor, Tensor]:
    """``a_i = (R_i − μ_g) / (σ_g + ε)`` with verl 0.9.1's ``group_mean_std`` (§7.3): ``μ_g`` = row-order sum /
    size, ``σ_g`` = two-pass Bessel std without floor, ``μ = 0, σ = 1`` for a singleton. Always divides
    by the std: verl's dispatcher never passes ``norm_adv_by_std_in_grpo`` to it. ``(N,)``."""
    g = batch.groups
    total = batch.reward_total()
    single = g.size[batch.group_index] <= 1
    mean = g.seq_mean[batch.group_index].masked_fill(single, 0.0)
    std = g.seq_std[batch.group_index].masked_fill(single, 1.0)
    advantages = batch.per_token((total - mean) / (std + cfg.epsilon)) * batch.response_mask
    return advantages, advantages
