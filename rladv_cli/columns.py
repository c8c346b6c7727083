"""Arrow list columns as flat numpy arrays, and score assembly on them. No torch: ``inspect`` uses it too."""
from __future__ import annotations

import numpy as np
import pyarrow as pa


def list_offsets(arr: pa.Array) -> np.ndarray:
    """Row offsets ``(B+1,) int64`` of a (possibly sliced) Arrow list array, rebased to 0."""
    off = np.asarray(arr.offsets, dtype=np.int64)
    return off - off[0]


def flat_values(table: pa.Table, name: str, dtype=np.float32) -> np.ndarray:
    """The values of list column ``name`` as one flat array (slicing respected)."""
    values = table[name].combine_chunks().flatten()
    return values.to_numpy(zero_copy_only=False).astype(dtype, copy=False)


def scalar_values(table: pa.Table, name: str, dtype=np.float32) -> np.ndarray:
    return table[name].combine_chunks().to_numpy(zero_copy_only=False).astype(dtype, copy=False)


def score_positions(row_offsets: np.ndarray, attention: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """``(p, L)``: flat index of each row's score position and its non-padding length, ``(B,)`` each.

    ``L_i`` counts non-padding tokens (``attention_mask`` ones; the row length without it), tool observations
    included; ``p_i = L_i − 1`` (SEMANTICS §1), and an all-padding row (``p_i = −1``) wraps to the row's last
    position, as verl's indexing does.
    """
    lengths = np.diff(row_offsets)
    if attention is None:
        valid = lengths
    else:
        valid = np.add.reduceat(attention.astype(np.int64), row_offsets[:-1]) if len(lengths) else lengths
    last = np.where(valid > 0, valid - 1, lengths - 1)
    return row_offsets[:-1] + last, valid


def assemble_scores(table: pa.Table, row_offsets: np.ndarray, position: np.ndarray) -> np.ndarray:
    """``token_level_scores (N,) float32``: ``rm_scores`` verbatim, else the scalar ``score`` at each row's
    score position, else zeros (``gdpo`` reads its rewards from component columns)."""
    if "rm_scores" in table.column_names:
        return flat_values(table, "rm_scores").copy()
    out = np.zeros(int(row_offsets[-1]), dtype=np.float32)
    if "score" in table.column_names:
        out[position] = scalar_values(table, "score")
    return out
