"""Arrow list columns as flat numpy arrays, and score assembly on them. No torch: ``inspect`` uses it too."""
from __future__ import annotations

import hashlib

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_NUMPY_TYPES = {pa.int8(): np.int8, pa.int16(): np.int16, pa.int32(): np.int32, pa.int64(): np.int64,
                pa.uint8(): np.uint8, pa.uint16(): np.uint16, pa.uint32(): np.uint32, pa.uint64(): np.uint64,
                pa.float32(): np.float32, pa.float64(): np.float64}


def numpy_of(arr: pa.Array) -> np.ndarray:
    """``arr`` as a numpy array: a read-only view of its data buffer when it is numeric without nulls, else
    a converted copy. (pyarrow's own ``to_numpy`` imports pandas on first use where pandas is installed,
    a third of a second at start-up.)"""
    dtype = _NUMPY_TYPES.get(arr.type)
    if dtype is None or arr.null_count:
        return arr.to_numpy(zero_copy_only=False)
    return np.frombuffer(arr.buffers()[1], dtype=dtype, count=len(arr), offset=arr.offset * np.dtype(dtype).itemsize)


def array_of(column: pa.ChunkedArray) -> pa.Array:
    """A table column as one Arrow array: its only chunk as it is, else the chunks concatenated
    (``ChunkedArray.combine_chunks`` copies even a single chunk)."""
    return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()


def arrow_of(values: np.ndarray, kind: pa.DataType) -> pa.Array:
    """A numeric numpy array as an Arrow array of type ``kind`` without nulls, over the same memory when the
    dtype already matches (``pa.array`` would import pandas, see ``numpy_of``)."""
    values = np.ascontiguousarray(values, dtype=_NUMPY_TYPES[kind])
    return pa.Array.from_buffers(kind, len(values), [None, pa.py_buffer(values)])


def mask_before_rejection(names) -> str:
    """The column holding the mask before rollout rejection (m0): ``loss_mask`` when among ``names`` (an rladv
    output, verl 0.9.1's batch), else ``response_mask``."""
    return "loss_mask" if "loss_mask" in names else "response_mask"


def list_offsets(arr: pa.Array) -> np.ndarray:
    """Row offsets ``(B+1,) int64`` of a (possibly sliced) Arrow list array, rebased to 0."""
    off = numpy_of(arr.offsets).astype(np.int64)
    return off - off[0]


def flat_values(table: pa.Table, name: str, dtype=np.float32) -> np.ndarray:
    """The values of list column ``name`` as one flat array (slicing respected)."""
    return numpy_of(array_of(table[name]).flatten()).astype(dtype, copy=False)


def scalar_values(table: pa.Table, name: str, dtype=np.float32) -> np.ndarray:
    return numpy_of(array_of(table[name])).astype(dtype, copy=False)


def score_positions(row_offsets: np.ndarray, attention: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """``(p, L)``: flat index of each row's score position and its non-padding length, ``(B,)`` each.

    ``L_i`` counts non-padding tokens (``attention_mask`` ones; the row length without it), tool observations
    included; ``p_i = L_i − 1`` (docs/semantics.md §1), and an all-padding row (``p_i = −1``) wraps to the row's last
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
    """``token_level_scores (N,) float32``: ``rm_scores`` verbatim (over the Arrow buffer, read-only, when it
    is float32), else the scalar ``score`` at each row's score position (0 for a row without one: a null or
    NaN ``score``, which only a convention with unscorable rows lets through), else zeros (``gdpo`` reads its
    rewards from component columns)."""
    if "rm_scores" in table.column_names:
        return flat_values(table, "rm_scores")
    out = np.zeros(int(row_offsets[-1]), dtype=np.float32)
    if "score" in table.column_names:
        out[position] = np.nan_to_num(scalar_values(table, "score"), nan=0.0, posinf=np.inf, neginf=-np.inf)
    return out


def unscored(table: pa.Table) -> np.ndarray:
    """``(B,) bool``: rows whose ``score`` is null or NaN (TRL's unscorable completions; ``rm_scores``, when
    present, is the score and has none)."""
    if "rm_scores" in table.column_names or "score" not in table.column_names:
        return np.zeros(table.num_rows, dtype=bool)
    return np.isnan(scalar_values(table, "score", np.float64))


def list_sums(table: pa.Table, name: str) -> tuple[np.ndarray, np.ndarray]:
    """``(sums (B,) float64, counts (B,) int64)`` of each row's list in column ``name`` (e.g. ``tool_rewards``,
    one value per tool call); a null list sums to 0 with count 0. The values are added in float64, in order."""
    arr = array_of(table[name])
    parents = numpy_of(pc.list_parent_indices(arr))
    values = numpy_of(arr.flatten()).astype(np.float64)
    sums = np.bincount(parents, weights=values, minlength=len(arr)).astype(np.float64)  # int64 when no values
    return sums, np.bincount(parents, minlength=len(arr)).astype(np.int64)


def prompt_keys(prompts: pa.Array | pa.ChunkedArray) -> pa.Array:
    """A stable key of each row's prompt token ids (a list column): the BLAKE2b-128 hex digest of them as
    little-endian int64, so rows with equal token ids, and only those, share a key."""
    prompts = prompts.combine_chunks() if isinstance(prompts, pa.ChunkedArray) else prompts
    offsets = prompts.offsets.to_numpy()  # they index ``values`` as a whole, also for a slice
    values = prompts.values.to_numpy(zero_copy_only=False).astype("<i8")
    return pa.array([hashlib.blake2b(values[a:b].tobytes(), digest_size=16).hexdigest()
                     for a, b in zip(offsets[:-1], offsets[1:])], pa.string())
