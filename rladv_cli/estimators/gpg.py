"""Group Policy Gradient (Chu et al. 2025, arXiv:2504.02546): verl's ``gpg``."""
from __future__ import annotations

from typing import TYPE_CHECKING

from torch import Tensor

from ..tensors.batch import Batch
from .inputs import Inputs

if TYPE_CHECKING:
    from ..config.settings import Params


def gpg(batch: Batch, inputs: Inputs, params: Params) -> tuple[Tensor, Tensor]:
    """``a_i = α·(R_i − μ_g) / f_norm`` with ``α = B / max(M, 1)``, ``B`` the rows of the batch and ``M`` those
    with ``R ≠ 0`` (batch-wide, so a group's advantages depend on its batch), ``μ_g`` the group mean (0 for
    a singleton) and ``f_norm = 1`` (fixed in verl); advantages = a·m, returns = advantages
    (docs/semantics.md §7.11)."""
    alpha = inputs.batch_rows.float() / inputs.batch_nonzero_rows.clamp_min(1).float()
    a = alpha * (inputs.reward_total - inputs.groups.mean[inputs.group_index]) / 1.0
    advantages = batch.per_token(a) * batch.response_mask
    return advantages, advantages
