"""Group Policy Gradient (Chu et al. 2025, arXiv:2504.02546): verl's ``gpg``."""
from __future__ import annotations

from torch import Tensor

from ..config.settings import Config
from ..tensors.batch import Batch


def gpg(batch: Batch, cfg: Config) -> tuple[Tensor, Tensor]:
    """``a_i = α·(R_i − μ_g) / f_norm`` with ``α = B / max(M, 1)``, ``B`` the rows of the batch and ``M`` those
    with ``R ≠ 0`` (batch-wide, so a group's advantages depend on its batch), ``μ_g`` the group mean (0 for
    a singleton) and ``f_norm = 1`` (fixed in verl); advantages = a·m, returns = advantages (§7.11)."""
    g = batch.groups
    alpha = batch.batch_rows.float() / batch.batch_nonzero_rows.clamp_min(1).float()
    a = alpha * (batch.reward_total() - g.mean[batch.group_index]) / 1.0
    advantages = batch.per_token(a) * batch.response_mask
    return advantages, advantages
