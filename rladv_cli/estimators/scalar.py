"""The token rule of the estimators whose advantage is one scalar per row computed over the whole dataset
(``Estimator.row_advantage``: the trainers' conventions, docs/conventions.md)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..tensors.batch import Batch
from ..tensors.xp import Array
from .inputs import Inputs

if TYPE_CHECKING:
    from ..config.settings import Params


def from_rows(batch: Batch, inputs: Inputs, params: Params) -> tuple[Array, Array]:
    """The row's scalar advantage ``inputs.row_advantage (B,)`` at each of its actor tokens; ``(N,)``;
    returns = advantages."""
    advantages = batch.per_token(inputs.row_advantage) * batch.response_mask
    return advantages, advantages
