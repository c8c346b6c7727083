"""A chunk of rows as flat token tensors plus row offsets (Arrow's list offsets, rebased to 0)."""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Optional

import numpy as np
import pyarrow as pa
import torch
from torch import Tensor

from ..contract.columns import (array_of, assemble_scores, flat_values, list_offsets, mask_before_rejection,
                                scalar_values, score_positions)
from ..errors import ConfigError
from . import kernels


@dataclass(frozen=True)
class Batch:
    """``B`` rows held flat: token tensors are ``(N,)`` float32, row tensors ``(B,)``. Frozen: a stage that
    changes a field returns a new ``Batch`` (``dataclasses.replace``).

    response_mask: the mask the estimator uses (after rollout rejection); original_mask: the mask before it (m0):
    ``loss_mask`` when the input has one, else ``response_mask`` as read.
    token_level_scores: assembled scores; token_level_rewards: after KL shaping (the same tensor when off).
    row_index: dataset-wide row numbers; pad_width: the longest response of each row's batch (verl's padded
    ``T``), which fixes how row totals round; score_position, valid_length: flat index where a row's scalar
    score sits and its non-padding length; padding: 1.0 at ``attention_mask`` 0 positions. The other fields
    are the input's columns of the same names, when it has them (``rollout_is_weights`` once the IS stage ran).
    """

    row_offsets: Tensor
    original_mask: Tensor
    response_mask: Tensor
    token_level_scores: Tensor
    token_level_rewards: Tensor
    row_index: Tensor
    values: Optional[Tensor] = None
    old_log_probs: Optional[Tensor] = None
    ref_log_prob: Optional[Tensor] = None
    rollout_log_probs: Optional[Tensor] = None
    sum_pi_squared: Optional[Tensor] = None
    rollout_is_weights: Optional[Tensor] = None
    reward_baselines: Optional[Tensor] = None
    padding: Optional[Tensor] = None
    pad_width: Optional[Tensor] = None
    score_position: Optional[Tensor] = None
    valid_length: Optional[Tensor] = None

    @property
    def num_rows(self) -> int:
        return self.row_offsets.numel() - 1

    @property
    def num_tokens(self) -> int:
        return self.response_mask.numel()

    def row_total(self, x: Tensor) -> Tensor:
        """``R_i = Σ_t x[i,t]`` over every position, float32, rounded exactly as verl sums the row padded
        to its batch's longest response (``pad_width``); ``(B,)``."""
        width = self.pad_width if self.pad_width is not None else kernels.row_lengths(self.row_offsets)
        return kernels.padded_row_sum(x, self.row_offsets, width)

    def row_sum(self, x: Tensor) -> Tensor:
        """``Σ_t x[i,t]`` per row as float32 (accumulated in float64); ``(B,)``."""
        return kernels.segment_sum(x, self.row_offsets).float()

    def per_token(self, per_row: Tensor) -> Tensor:
        """Broadcast ``(B,)`` to the row's tokens ``(N,)``."""
        return kernels.broadcast_rows(per_row, self.row_offsets)


def resolve_device(name: str) -> torch.device:
    """``auto`` = cuda when available, else cpu; asking for cuda without one is an error."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--device cuda: torch sees no CUDA device here; use --device cpu or auto")
    return torch.device(name)


def as_tensor(a: np.ndarray, device: torch.device | str = "cpu") -> Tensor:
    """A tensor over ``a`` without a copy where possible, then moved to ``device``."""
    # Arrow buffers are read-only; the tensors made from them are never written in place.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        return torch.from_numpy(np.ascontiguousarray(a)).to(device)


def from_arrow(table: pa.Table, first_row: int, device: torch.device) -> Batch:
    """Build a ``Batch`` from a validated chunk; optional columns become tensors when present."""
    names = table.column_names
    offsets = list_offsets(array_of(table["response_mask"]))
    mask = flat_values(table, "response_mask", np.float32)
    attention = flat_values(table, "attention_mask", np.int8) if "attention_mask" in names else None
    position, valid_length = score_positions(offsets, attention)
    scores = assemble_scores(table, offsets, position)

    def t(a: np.ndarray) -> Tensor:
        return as_tensor(a, device)

    optional = {
        name: t(flat_values(table, name))
        for name in ("values", "old_log_probs", "ref_log_prob", "rollout_log_probs", "sum_pi_squared")
        if name in names
    }
    if "reward_baselines" in names:
        optional["reward_baselines"] = t(scalar_values(table, "reward_baselines"))
    # m0: the mask before rollout rejection, whose tokens ``response_mask`` may have dropped already
    m = t(mask)
    original = mask_before_rejection(names)
    m0 = m if original == "response_mask" else t(flat_values(table, original, np.float32))
    s = t(scores)
    return Batch(
        row_offsets=t(offsets),
        original_mask=m0,
        response_mask=m,
        token_level_scores=s,
        token_level_rewards=s,
        row_index=torch.arange(first_row, first_row + table.num_rows, device=device),
        padding=None if attention is None else t((attention == 0).astype(np.float32)),
        score_position=t(position),
        valid_length=t(valid_length),
        **optional,
    )
