"""Group reward-Decoupled normalization Policy Optimization (arXiv:2601.05242): verl 0.9.1's ``gdpo``."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..tensors import xp as X
from ..tensors.batch import Batch
from ..tensors.xp import Array
from .inputs import Inputs

if TYPE_CHECKING:
    from ..config.settings import Params


def gdpo(batch: Batch, inputs: Inputs, params: Params) -> tuple[Array, Array]:
    """``A_sum = Σ_k w_k · (c_k − μ_{k,g}) / (σ_{k,g} + ε) · m`` over the reward components ``c_k`` (columns
    named by ``--reward-components``, weights ``--reward-weights`` or 1); without components the single
    component is the row total ``R``. The pipeline whitens ``A_sum`` over the batch; returns = advantages
    (docs/semantics.md §7.13). verl's dispatcher does not pass the std flag here, so it always divides. ``(N,)``."""
    if inputs.components is None:
        components, stats = inputs.reward_total[None], [inputs.groups]
    else:
        components, stats = inputs.components, inputs.component_groups
    xp = X.namespace(components)
    weights = xp.asarray(params.reward_weights or [1.0] * len(stats), dtype=xp.float32, device=X.dev(components))
    advantages = None
    at = inputs.group_index
    for k, g in enumerate(stats):
        a = (components[k] - g.mean[at]) / (g.std[at] + params.epsilon)
        term = weights[k] * (batch.per_token(a) * batch.response_mask)
        advantages = term if advantages is None else advantages + term
    return advantages, advantages
