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

import torch
from torch import Tensor

from ..tensors.groups import group_rows

if TYPE_CHECKING:
    from ..config.settings import Params

NEMO_RL_EPSILON = 1e-6  # hard-coded in NeMo-RL


def baseline_and_std(r: Tensor, leave_one_out: bool) -> tuple[Tensor, Tensor]:
    """Per member of each group ``r [G, s]`` (s ≥ 2): ``b = (M r) / k`` and ``σ = sqrt((M r² / k − b²) · k/(k − 1))``
    (NaN -> 0), with ``M = 1 − I`` and ``k = s − 1`` leaving the member out, else ``M = 1`` and ``k = s``.

    The products are summed member by member in row order, the same for every group whatever the batch holds
    (a BLAS product's order depends on the matrix's shape); a group whose ``M r² / k − b²`` cancels to near
    float32 noise (near-equal totals that are not small dyadic numbers) is then recomputed with NeMo-RL's own
    per-group matrix-vector product, whose summation order decides whether its σ is 0 or a few ulps (and so
    whether its advantages are 0 or ``±ulp / (ulps + 1e-6)``)."""
    s = r.shape[1]
    M = 1 - torch.eye(s, dtype=r.dtype) if leave_one_out else torch.ones((s, s), dtype=r.dtype)
    k = torch.tensor(float(s - int(leave_one_out)), dtype=r.dtype)

    def stats(v: Tensor, product) -> tuple[Tensor, Tensor, Tensor]:
        b = product(v) / k
        square = product(torch.pow(v, 2)) / k
        spread = square - b.square()
        return b, spread, (spread * (k / (k - 1))).sqrt().nan_to_num(0)

    def in_row_order(v: Tensor) -> Tensor:  # (v M)[g, i] = Σ_j v[g, j] M[j, i], j ascending
        out = torch.zeros_like(v)
        for j in range(s):
            out += v[:, j:j + 1] * M[j]
        return out

    b, spread, std = stats(r, in_row_order)
    dyadic = ((r * 16).round() == r * 16).all(dim=1) & (r.abs() <= 16).all(dim=1)  # every sum exact, any order
    sensitive = torch.nonzero((spread.abs() <= 2.0 ** -12 * b.square()).any(dim=1) & ~dyadic).flatten()
    for g in sensitive.tolist():
        b[g], _, std[g] = stats(r[g], lambda v: torch.matmul(M, v))
    return b, std


def grpo_rows(total: Tensor, group: Tensor, batch: Tensor, params: Params) -> Tensor:
    """``a = R − b``, divided by ``σ + 1e-6`` where ``σ > 0`` and ``norm_adv_by_std`` (NeMo-RL's
    ``normalize_rewards``); a group of one row has ``b = R``, so ``a = 0``. ``(B,)`` float32."""
    out = torch.zeros_like(total)
    for _, rows in group_rows(group, torch.bincount(group)):
        if rows.shape[1] < 2:
            continue
        r = total[rows]
        b, std = baseline_and_std(r, params.leave_one_out)
        a = r - b
        if params.norm_adv_by_std:
            scaled = std > 0
            a[scaled] = a[scaled] / (std[scaled] + NEMO_RL_EPSILON)
        out[rows] = a
    return out
