"""The mean/std level matrix of outcome normalisation: ``grpo_norm``.

Sources: AReaL's ``NormConfig`` (``mean_level``, ``std_level``: ``areal/api/cli_args.py``, applied by
``Normalization`` in ``areal/utils/data.py``), ROLL's ``reward_norm`` (``norm_mean_type``, ``norm_std_type``:
``roll/utils/functionals.py``) and TRL's ``GRPOTrainer(scale_rewards="batch")``, the group-mean / batch-std
"LitePPO" of Liu et al. 2025, "Tricks or Traps? A Deep Dive into RL for LLM Reasoning" (arXiv:2508.08221).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..tensors.batch import Batch
from ..tensors.xp import Array
from .inputs import Inputs

if TYPE_CHECKING:
    from ..config.settings import Params


def grpo_norm(batch: Batch, inputs: Inputs, params: Params) -> tuple[Array, Array]:
    """``a_i = (R_i − μ_i) / (σ_i + ε)``, times ``m``; ``(N,)`` advantages, returns = advantages.

    ``μ_i``: the float32 mean of the row totals of the row's uid group (``--mean-level group``), of its batch
    (``batch``: every row of its ``--batch-key`` batch, the whole dataset without one) or 0 (``none``).
    ``σ_i``: the Bessel std of the row totals at ``--std-level`` (group or batch), each taken about the mean
    of that same level (as ROLL's ``reward_norm`` and TRL take it), ``torch.std``'s rounding; with
    ``--std-level none`` nothing is divided and ε is not added. A level that holds one row has ``μ = 0,
    σ = 1`` (verl's ``grpo`` singleton rule), so ``group``/``group`` is ``grpo`` to the bit
    (docs/semantics.md §7.16).
    """
    g, at, a = inputs.groups, inputs.group_index, inputs.reward_total
    if params.mean_level == "group":
        a = a - g.mean[at]
    elif params.mean_level == "batch":
        a = a - inputs.batch_mean
    if params.std_level == "group":
        a = a / (g.std[at] + params.epsilon)
    elif params.std_level == "batch":
        a = a / (inputs.batch_std + params.epsilon)
    advantages = batch.per_token(a) * batch.response_mask
    return advantages, advantages
