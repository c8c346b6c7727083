"""Pass@k training (Chen et al. 2025, arXiv:2503.19595): verl's ``grpo_passk``."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..tensors.batch import Batch
from ..tensors.xp import Array
from .inputs import Inputs

if TYPE_CHECKING:
    from ..config.settings import Params


def grpo_passk(batch: Batch, inputs: Inputs, params: Params) -> tuple[Array, Array]:
    """Only the best row of a group learns: it gets ``r1 − r2`` (the gap between the two largest totals),
    divided by ``σ_g + ε`` (Bessel std) unless ``--no-norm-adv-by-std``; every other row gets 0. Ties for
    the maximum give 0. Groups need 2+ rows (the pipeline stops otherwise, as verl raises).
    docs/semantics.md §7.4. ``(N,)``."""
    g, at = inputs.groups, inputs.group_index
    gap = g.top_gap[at]
    if params.norm_adv_by_std:
        gap = gap / (g.std[at] + params.epsilon)
    a = gap * (batch.row_index == g.top_row[at])
    advantages = batch.per_token(a) * batch.response_mask
    return advantages, advantages
