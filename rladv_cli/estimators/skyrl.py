"""SkyRL 0.3.0's outcome estimators that differ from verl's (``skyrl/backends/skyrl_train/utils/ppo_utils.py``:
``compute_rloo_outcome_advantage``, ``compute_maxrl_advantage``; its ``grpo`` is verl's loop, the registry's
``grpo``). With step-wise trajectories (``skyrl/train/trainer.py`` ``compute_advantages_and_returns``) each row
reads its trajectory's last step's total, which alone is in the group statistics. RLOO: Ahmadian et al. 2024,
arXiv:2402.14740; MaxRL: the mean-normalised group advantage of SkyRL and prime-rl (docs/conventions.md).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..tensors import xp as X
from ..tensors.batch import Batch
from ..tensors.xp import Array
from .inputs import Inputs

if TYPE_CHECKING:
    from ..config.settings import Params


def _totals(inputs: Inputs) -> Array:
    """Each row's ``R``: its own total, or its trajectory's last step's where rows are steps (``session_total``,
    SkyRL's step-wise trajectories)."""
    return inputs.reward_total if inputs.session_total is None else inputs.session_total


def rloo(batch: Batch, inputs: Inputs, params: Params) -> tuple[Array, Array]:
    """``a_i = (R_i − μ_g) · n/(n − 1)`` with the factor rounded to float32 once; a singleton gets 0. ``(N,)``."""
    g, at, total = inputs.groups, inputs.group_index, _totals(inputs)
    xp = X.namespace(total)
    n = X.float64(g.size[at])
    factor = xp.astype(n / xp.clip(n - 1, min=1), total.dtype)
    a = xp.where(n > 1, (total - g.mean[at]) * factor, xp.zeros_like(total))
    advantages = batch.per_token(a) * batch.response_mask
    return advantages, advantages


def maxrl(batch: Batch, inputs: Inputs, params: Params) -> tuple[Array, Array]:
    """``a_i = (R_i − μ_g) / (μ_g + ε)`` for groups of two or more rows, ``R_i`` for a singleton. ``(N,)``."""
    g, at, total = inputs.groups, inputs.group_index, _totals(inputs)
    mean = g.mean[at]
    a = X.namespace(total).where(g.size[at] > 1, (total - mean) / (mean + params.epsilon), total)
    advantages = batch.per_token(a) * batch.response_mask
    return advantages, advantages
