"""NeMo-RL 0.6.0's GRPO advantage (NVIDIA-NeMo/RL at 7ea279a: ``nemo_rl/algorithms/advantage_estimator.py``
``GRPOAdvantageEstimator``, ``nemo_rl/algorithms/utils.py`` ``calculate_baseline_and_std_per_prompt``). GRPO: Shao
et al. 2024, arXiv:2402.03300; the leave-one-out baseline: Kool et al. 2019 and Ahmadian et al. 2024,
arXiv:2402.14740.

NeMo-RL groups the rows whose prompt token ids are equal, and takes each row's baseline and std from the *other*
rows of its group (``use_leave_one_out_baseline``, on by default) as matrix products ``M r / k`` with
``M = 1 − I``; the std divides only where it is positive (docs/conventions.md).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..tensors import xp as X
from ..tensors.groups import group_rows
from ..tensors.xp import Array

if TYPE_CHECKING:
    from ..config.settings import Params

NEMO_RL_EPSILON = 1e-6  # hard-coded in NeMo-RL


def baseline_and_std(r: np.ndarray, leave_one_out: bool) -> tuple[np.ndarray, np.ndarray]:
    """Per member of each group ``r [G, s]`` (s ≥ 2): ``b = (M r) / k`` and ``σ = sqrt((M r² / k − b²) · k/(k − 1))``
    (NaN -> 0), with ``M = 1 − I`` and ``k = s − 1`` leaving the member out, else ``M = 1`` and ``k = s``.

    The products are summed member by member in row order, the same for every group whatever the batch holds
    (a BLAS product's order depends on the matrix's shape); a group whose ``M r² / k − b²`` cancels to near
    float32 noise (near-equal totals that are not small dyadic numbers) is then recomputed with NeMo-RL's own
    per-group matrix-vector product, whose summation order decides whether its σ is 0 or a few ulps (and so
    whether its advantages are 0 or ``±ulp / (ulps + 1e-6)``). On the host, in numpy, ``r``'s dtype."""
    s = r.shape[1]
    M = 1 - np.eye(s, dtype=r.dtype) if leave_one_out else np.ones((s, s), dtype=r.dtype)
    k = r.dtype.type(s - int(leave_one_out))

    def stats(v: np.ndarray, product) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        b = product(v) / k
        square = product(v * v) / k
        spread = square - b * b
        with np.errstate(divide="ignore", invalid="ignore"):  # k = 1, or a negative spread: NaN, taken as 0
            return b, spread, np.nan_to_num(np.sqrt(spread * (k / (k - 1))), nan=0.0)

    def in_row_order(v: np.ndarray) -> np.ndarray:  # (v M)[g, i] = Σ_j v[g, j] M[j, i], j ascending
        out = np.zeros_like(v)
        for j in range(s):
            out += v[:, j:j + 1] * M[j]
        return out

    b, spread, std = stats(r, in_row_order)
    dyadic = np.all(np.round(r * 16) == r * 16, axis=1) & np.all(np.abs(r) <= 16, axis=1)  # every sum exact, any order
    sensitive = np.flatnonzero(np.any(np.abs(spread) <= 2.0 ** -12 * (b * b), axis=1) & ~dyadic)
    for g in sensitive.tolist():
        b[g], _, std[g] = stats(r[g], lambda v: _torch_mv(M, v))
    return b, std


def _torch_mv(M: np.ndarray, v: np.ndarray) -> np.ndarray:
    """``M v`` by torch's own matrix-vector product, NeMo-RL's: its BLAS adds in an order neither numpy's BLAS nor
    a loop reproduces, and that order decides a sensitive group's σ. torch is imported for such a group only."""
    import torch

    return torch.mv(torch.from_numpy(M), torch.from_numpy(np.ascontiguousarray(v))).numpy()


def grpo_rows(total: Array, group: Array, batch: Array, params: Params) -> Array:
    """``a = R − b``, divided by ``σ + 1e-6`` where ``σ > 0`` and ``norm_adv_by_std`` (NeMo-RL's
    ``normalize_rewards``); a group of one row has ``b = R``, so ``a = 0``. ``(B,)`` float32, computed on the host
    and given as the kind of ``total``."""
    values, group = X.to_numpy(total), X.to_numpy(group)
    out = np.zeros_like(values)
    for _, rows in group_rows(group, np.bincount(group)):
        if rows.shape[1] < 2:
            continue
        r = values[rows]
        b, std = baseline_and_std(r, params.leave_one_out)
        a = r - b
        if params.norm_adv_by_std:
            scaled = std > 0
            a[scaled] = a[scaled] / (std[scaled] + NEMO_RL_EPSILON)
        out[rows] = a
    return X.like(out, total)
