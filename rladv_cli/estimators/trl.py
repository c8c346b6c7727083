"""TRL 1.16.0's GRPO advantage (``trl/trainer/grpo_trainer.py``, ``GRPOTrainer._generate_and_score_completions``,
``multi_objective_aggregation="sum_then_normalize"``; ``nanstd`` in ``trl/trainer/utils.py``). GRPO: Shao et al.
2024, arXiv:2402.03300; ``scale_rewards="batch"``: Liu et al. 2025 ("LitePPO"), arXiv:2508.08221.

TRL groups consecutive blocks of ``num_generations`` rows (rladv's ``--group-size``) and computes on the batch's
``[G, n]`` reward matrix; the function below does the same operations on the same matrices, in float32
(docs/conventions.md).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from ..tensors.groups import block_rows

if TYPE_CHECKING:
    from ..config.settings import Params

TRL_EPSILON = 1e-4  # hard-coded in TRL; not a setting


def nanstd(x: Tensor, dim: int | None = None) -> Tensor:
    """TRL's Bessel-corrected std ignoring NaNs: ``sqrt(nanmean((x − nanmean x)²) · c/(c − 1))`` over ``dim`` (all
    of ``x`` when None), NaN where fewer than two values count (``c ≤ 1``)."""
    mean = torch.nanmean(x, dim=dim, keepdim=True)
    variance = torch.nanmean((x - mean) ** 2, dim=dim, keepdim=True)
    count = torch.sum(~torch.isnan(x), dim=dim, keepdim=True)
    correction = count / (count - 1)
    correction = torch.where(count > 1, correction, torch.full_like(correction, float("nan")))
    std = torch.sqrt(variance * correction)
    return std.squeeze() if dim is None else std.squeeze(dim)


def grpo_rows(total: Tensor, group: Tensor, batch: Tensor, params: Params) -> Tensor:
    """Per batch, with ``r [G, n]`` its row totals cut into blocks of ``n``: ``a = r − nanmean_g(r)``, divided by
    ``σ + 1e-4`` unless ``scale_rewards`` is ``none``, with ``σ`` the ``nanstd`` of the block (``group``; 0 when
    ``n = 1``) or of the whole batch (``batch``; 0 for a one-row batch); NaN becomes 0. ``(B,)`` float32."""
    out = torch.zeros_like(total)
    n = params.group_size
    for rows in block_rows(group, batch, n):
        r = total[rows]
        mean = torch.nanmean(r, dim=1, keepdim=True)
        if params.scale_rewards == "batch":
            std = nanstd(r.flatten()).expand_as(r) if r.numel() > 1 else torch.zeros_like(r)
        else:
            std = nanstd(r, dim=1)[:, None] if n > 1 else torch.zeros_like(r)
        a = r - mean
        if params.scale_rewards != "none":
            a = a / (std + TRL_EPSILON)
        out[rows] = torch.nan_to_num(a, nan=0.0)
    return out
