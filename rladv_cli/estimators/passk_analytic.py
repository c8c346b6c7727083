"""Pass@k Training with the analytical advantage (Chen et al. 2025, "Pass@k Training for Adaptively Balancing
Exploration and Exploitation of Large Reasoning Models", arXiv:2508.10751): ``passk_analytic``. The authors'
function: ``compute_advantage`` in ``code/passk_adv.py`` of github.com/RUCAIBox/Passk_Training.
"""
from __future__ import annotations

from functools import cache
from math import comb, sqrt
from typing import TYPE_CHECKING

import numpy as np

from ..tensors import xp as X
from ..tensors.batch import Batch
from ..tensors.xp import Array
from .inputs import Inputs

if TYPE_CHECKING:
    from ..config.settings import Params


def passk_analytic(batch: Batch, inputs: Inputs, params: Params) -> tuple[Array, Array]:
    """The advantage of a binary-reward row under the group's pass@k reward; ``(N,)`` advantages = returns.

    A group of ``n ≥ k`` rows (``--k``) with ``c`` correct ones (``R = 1``; every other row has ``R = 0``: the
    pipeline refuses any other total) has, in float64 as the authors' code evaluates it,

        ρ     = 1 − C(n−c, k) / C(n, k)                          (the group's pass@k)
        σ     = sqrt(ρ (1 − ρ))
        a_pos = (1 − ρ) / (σ + ε)                                (a correct row)
        a_neg = (1 − ρ − C(n−c−1, k−1) / C(n−1, k−1)) / (σ + ε)  (an incorrect row)

    with ``C(a, b) = 0`` for ``a < 0`` or ``b > a`` and ``ε = --epsilon`` (1e-6 in the authors' code), rounded to
    float32 once. A group that cannot fail (``n − c < k``) or cannot pass (``c = 0``) gets 0 everywhere.
    docs/semantics.md §7.18.
    """
    g, at, total = inputs.groups, inputs.group_index, inputs.reward_total
    size = X.to_numpy(g.size[at])
    correct = np.round(X.to_numpy(g.seq_sum[at])).astype(np.int64)
    sizes, inverse = np.unique(size, return_inverse=True)
    width = int(sizes.max()) + 1 if sizes.size else 1
    table = np.zeros((sizes.size, 2, width), dtype=np.float64)  # [size, correct?, c]
    for u, n in enumerate(sizes.tolist()):
        table[u, :, :n + 1] = _advantages(n, params.k, params.epsilon)
    # looked up on the host, (B,) moved to the rows' device
    passed = (X.to_numpy(total) == 1).astype(np.int64)
    a = X.like(table[inverse, passed, correct].astype(np.float32), total)
    advantages = batch.per_token(a) * batch.response_mask
    return advantages, advantages


@cache
def _advantages(n: int, k: int, epsilon: float) -> tuple[list[float], list[float]]:
    """``([a_neg for c = 0..n], [a_pos for c = 0..n])`` of a group of ``n`` rows, the formulas above in float64
    (the binomial ratios exact, correctly rounded)."""
    negative, positive = [], []
    for c in range(n + 1):
        rho = 1 - _choose(n - c, k) / _choose(n, k)
        sigma = sqrt(rho * (1 - rho))
        positive.append((1 - rho) / (sigma + epsilon))
        negative.append((1 - rho - _choose(n - c - 1, k - 1) / _choose(n - 1, k - 1)) / (sigma + epsilon))
    return negative, positive


def _choose(a: int, b: int) -> int:
    """``C(a, b)``, 0 for ``a < 0`` (scipy's ``comb``, which the authors' code calls, gives 0 there too)."""
    return comb(a, b) if a >= 0 else 0
