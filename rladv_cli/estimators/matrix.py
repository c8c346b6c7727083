"""A trainer's ``[G, n]`` matrix of row rewards reduced along its rows as torch reduces it on the CPU: the sums,
means and stds that TRL, OpenRLHF and NeMo-RL take with torch, in numpy on the host, rounded as torch rounds them
(docs/arrays.md, "Sums that round as torch's"). Every function takes and returns numpy arrays.
"""
from __future__ import annotations

import numpy as np

from ..tensors import kernels
from ..tensors.groups import two_pass_std


def row_means(m: np.ndarray) -> np.ndarray:
    """``m.mean(dim=1)``: the row sums divided by ``n`` in ``m``'s dtype, as torch divides them; ``(G,)``."""
    return kernels.torch_row_sums(m) / m.dtype.type(m.shape[1])


def nanmeans(m: np.ndarray) -> np.ndarray:
    """``torch.nanmean(m, dim=1)``: the sums with NaN taken as 0, divided by the count of the others in ``m``'s
    dtype (NaN where none counts); ``(G,)``."""
    counted = ~np.isnan(m)
    with np.errstate(divide="ignore", invalid="ignore"):
        return kernels.torch_row_sums(np.where(counted, m, m.dtype.type(0))) / np.sum(counted, axis=1).astype(m.dtype)


def row_stds(m: np.ndarray) -> np.ndarray:
    """``m.std(dim=1)`` (Bessel; NaN for ``n = 1``) as torch computes it on the CPU, in ``m``'s dtype; ``(G,)``.

    torch takes two paths: for one row (``G = 1``) the two-pass std of a 1-D tensor (``groups.two_pass_std``); for
    several rows Welford's update in float64, value after value (``μ += δ / k``, ``M2 += δ · (x − μ)``),
    ``sqrt(M2 / (n − 1))``, rounded to ``m``'s dtype once. The two round differently, so each is reproduced.
    """
    rows, n = m.shape
    if rows == 1:
        return two_pass_std(m, row_means(m))
    x = m.astype(np.float64)
    mu, m2 = np.zeros(rows, dtype=np.float64), np.zeros(rows, dtype=np.float64)
    for j in range(n):
        delta = x[:, j] - mu
        mu = mu + delta / float(j + 1)
        m2 = m2 + delta * (x[:, j] - mu)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.sqrt(m2 / float(max(n - 1, 0))).astype(m.dtype)
