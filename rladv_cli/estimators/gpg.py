"""Group Policy Gradient (Chu et al. 2025, arXiv:2504.02546): verl's ``gpg``."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..tensors import xp as X
from ..tensors.batch import Batch
from ..tensors.xp import Array
from .inputs import Inputs

if TYPE_CHECKING:
    from ..config.settings import Params


def gpg(batch: Batch, inputs: Inputs, params: Params) -> tuple[Array, Array]:
    """``a_i = α·(R_i − μ_g) / f_norm`` with ``α = B / max(M, 1)``, ``B`` the rows of the batch and ``M`` those
    with ``R ≠ 0`` (batch-wide, so a group's advantages depend on its batch), ``μ_g`` the group mean (0 for
    a singleton) and ``f_norm = 1`` (fixed in verl); advantages = a·m, returns = advantages
    (docs/semantics.md §7.11)."""
    nonzero = X.namespace(inputs.batch_nonzero_rows).clip(inputs.batch_nonzero_rows, min=1)
    alpha = X.float32(inputs.batch_rows) / X.float32(nonzero)
    a = alpha * (inputs.reward_total - inputs.groups.mean[inputs.group_index]) / 1.0
    advantages = batch.per_token(a) * batch.response_mask
    return advantages, advantages
