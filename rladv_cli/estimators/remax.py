"""ReMax (Li et al. 2023, arXiv:2310.10505): verl's ``remax``."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..tensors import xp as X
from ..tensors.batch import Batch
from ..tensors.kernels import reverse_linear_scan
from ..tensors.xp import Array
from .derivation import Derivation, Row, baseline_table
from .inputs import Inputs
from .registry import Estimator

if TYPE_CHECKING:
    from ..config.settings import Params


def remax(batch: Batch, inputs: Inputs, params: Params) -> tuple[Array, Array]:
    """``G[i,t] = Σ_{u ≥ t} r[i,u]·m[i,u]`` (undiscounted, masked rewards dropped); ``advantages = G − b_i·m``
    with ``b_i`` the row's ``reward_baselines`` (the greedy rollout's reward); returns = G
    (docs/semantics.md §7.9)."""
    m = batch.response_mask
    returns = reverse_linear_scan(X.namespace(m).ones_like(m), batch.token_level_rewards * m, batch.row_offsets)
    return returns - batch.per_token(batch.reward_baselines) * m, returns


def explain(est: Estimator, row: Row, params: Params, whitening: dict) -> Derivation:
    return baseline_table(row, ["G_t = sum of r_u * m_u for u >= t", "advantages = G - reward_baselines * m"])
