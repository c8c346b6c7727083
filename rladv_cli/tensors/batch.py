"""A chunk of rows as flat token tensors plus row offsets (Arrow's list offsets, rebased to 0)."""
from __future__ import annotations

import importlib.util
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np
import pyarrow as pa

from ..contract.columns import (array_of, assemble_scores, flat_values, list_offsets, mask_before_rejection,
                                scalar_values, score_positions)
from ..errors import ConfigError
from . import kernels
from . import xp as X
from .xp import Array


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

    row_offsets: Array
    original_mask: Array
    response_mask: Array
    token_level_scores: Array
    token_level_rewards: Array
    row_index: Array
    values: Optional[Array] = None
    old_log_probs: Optional[Array] = None
    ref_log_prob: Optional[Array] = None
    rollout_log_probs: Optional[Array] = None
    sum_pi_squared: Optional[Array] = None
    rollout_is_weights: Optional[Array] = None
    reward_baselines: Optional[Array] = None
    padding: Optional[Array] = None
    pad_width: Optional[Array] = None
    score_position: Optional[Array] = None
    valid_length: Optional[Array] = None

    @property
    def num_rows(self) -> int:
        return X.numel(self.row_offsets) - 1

    @property
    def num_tokens(self) -> int:
        return X.numel(self.response_mask)

    def row_total(self, x: Array) -> Array:
        """``R_i = Σ_t x[i,t]`` over every position, float32, rounded exactly as verl sums the row padded
        to its batch's longest response (``pad_width``); ``(B,)``."""
        width = self.pad_width if self.pad_width is not None else kernels.row_lengths(self.row_offsets)
        return kernels.padded_row_sum(x, self.row_offsets, width)

    def row_sum(self, x: Array) -> Array:
        """``Σ_t x[i,t]`` per row as float32 (accumulated in float64); ``(B,)``."""
        return X.float32(kernels.segment_sum(x, self.row_offsets))

    def per_token(self, per_row: Array) -> Array:
        """Broadcast ``(B,)`` to the row's tokens ``(N,)``."""
        return kernels.broadcast_rows(per_row, self.row_offsets)


def resolve_device(name: str) -> str:
    """``auto`` = cuda when there is one, else cpu; asking for cuda without one is an error. On the CPU the arrays
    are numpy's and torch is not imported: ``auto`` asks torch only where a CUDA build of it is installed and
    the machine shows an NVIDIA device (docs/arrays.md)."""
    if name == "cpu" or (name == "auto" and not may_have_cuda()):
        return X.CPU
    import torch

    if torch.cuda.is_available():
        return "cuda" if name == "auto" else name
    if name == "auto":
        return X.CPU
    raise ConfigError("--device cuda: torch sees no CUDA device here; use --device cpu or auto")


def may_have_cuda() -> bool:
    """Whether an installed torch is a CUDA build and a device node is there, read without importing torch."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return False
    version = Path(next(iter(spec.submodule_search_locations))) / "version.py"
    try:
        text = version.read_text()
    except OSError:
        return True  # an unusual install: let torch answer
    if re.search(r"^cuda\s*(?::[^=]*)?=\s*None", text, re.M):
        return False
    return any(Path("/dev").glob("nvidia[0-9]*")) or not Path("/dev").exists()


def as_array(a: np.ndarray, device: str = X.CPU) -> Array:
    """``a`` as the arrays of ``device`` hold it: a contiguous numpy array on the CPU (no copy where possible),
    a tensor elsewhere."""
    a = np.ascontiguousarray(a)
    if device == X.CPU:
        return a
    # Arrow buffers are read-only; the tensors made from them are never written in place.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        return X.on_device(a, device)


def from_arrow(table: pa.Table, first_row: int, device: str) -> Batch:
    """Build a ``Batch`` from a validated chunk; optional columns become tensors when present."""
    names = table.column_names
    offsets = list_offsets(array_of(table["response_mask"]))
    mask = flat_values(table, "response_mask", np.float32)
    attention = flat_values(table, "attention_mask", np.int8) if "attention_mask" in names else None
    position, valid_length = score_positions(offsets, attention)
    scores = assemble_scores(table, offsets, position)

    def t(a: np.ndarray) -> Array:
        return as_array(a, device)

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
        row_index=t(np.arange(first_row, first_row + table.num_rows, dtype=np.int64)),
        padding=None if attention is None else t((attention == 0).astype(np.float32)),
        score_position=t(position),
        valid_length=t(valid_length),
        **optional,
    )
