"""TRL 1.16.0's GRPO advantage (``trl/trainer/grpo_trainer.py``, ``GRPOTrainer._generate_and_score_completions``,
``multi_objective_aggregation="sum_then_normalize"``; ``nanstd`` in ``trl/trainer/utils.py``). GRPO: Shao et al.
2024, arXiv:2402.03300; ``scale_rewards="batch"``: Liu et al. 2025 ("LitePPO"), arXiv:2508.08221.

TRL groups consecutive blocks of ``num_generations`` rows (rladv's ``--group-size``) and computes on the batch's
``[G, n]`` reward matrix; the function below does the same operations on the same matrices, in float32
(docs/conventions.md).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..tensors import xp as X
from ..tensors.groups import block_rows
from ..tensors.xp import Array
from . import matrix

if TYPE_CHECKING:
    from ..config.settings import Params

TRL_EPSILON = 1e-4  # hard-coded in TRL; not a setting


def nanstd(x: Array, dim: int | None = None) -> Array:
    """TRL's Bessel-corrected std ignoring NaNs: ``sqrt(nanmean((x − nanmean x)²) · c/(c − 1))`` over the last
    axis ``dim`` of a matrix (all of ``x`` when None), NaN where fewer than two values count (``c ≤ 1``); reduced
    on the host as torch reduces it (``matrix.nanmeans``) and given as the kind of ``x``: ``x.shape[:-1]``, or 0-d."""
    values = X.to_numpy(x)
    if dim is not None and dim not in (-1, values.ndim - 1):
        raise ValueError("nanstd: dim must be the last axis or None")
    std = _nanstd_rows(values.reshape(1, -1) if dim is None else values.reshape(-1, values.shape[-1]))
    return X.namespace(x).reshape(X.like(std, x), () if dim is None else values.shape[:-1])


def _nanstd_rows(r: np.ndarray) -> np.ndarray:
    """``nanstd`` along each row of ``r (G, n)``; ``(G,)``. The count's ratio ``c/(c − 1)`` is torch's integer
    division, in float32."""
    deviation = r - matrix.nanmeans(r)[:, None]
    variance = matrix.nanmeans(deviation * deviation)
    count = np.sum(~np.isnan(r), axis=1).astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        correction = np.where(count > 1, count / (count - 1), np.float32(np.nan))
        return np.sqrt(variance * correction)


def grpo_rows(total: Array, group: Array, batch: Array, params: Params) -> Array:
    """Per batch, with ``r [G, n]`` its row totals cut into blocks of ``n``: ``a = r − nanmean_g(r)``, divided by
    ``σ + 1e-4`` unless ``scale_rewards`` is ``none``, with ``σ`` the ``nanstd`` of the block (``group``; 0 when
    ``n = 1``) or of the whole batch (``batch``; 0 for a one-row batch); NaN becomes 0. ``(B,)`` float32,
    computed on the host as torch computes it (``matrix``) and given as the kind of ``total``."""
    values = X.to_numpy(total)
    out = np.zeros_like(values)
    n = params.group_size
    for rows in block_rows(X.to_numpy(group), X.to_numpy(batch), n):
        r = values[rows]
        if params.scale_rewards == "batch":
            std = np.broadcast_to(_nanstd_rows(r.reshape(1, -1)), r.shape) if r.size > 1 else np.zeros_like(r)
        else:
            std = _nanstd_rows(r)[:, None] if n > 1 else np.zeros_like(r)
        a = r - matrix.nanmeans(r)[:, None]
        if params.scale_rewards != "none":
            a = a / (std + TRL_EPSILON)
        out[rows] = np.nan_to_num(a, nan=0.0)
    return X.like(out, total)
