"""The write pass's output of one chunk: the input's columns plus rladv's, as one Arrow table, and the check
that nothing non-finite is written."""
from __future__ import annotations

from typing import Optional

import numpy as np
import pyarrow as pa

from ..contract.columns import array_of, arrow_of, flat_values
from ..errors import ComputeError
from ..io.read import Chunk
from ..tensors import xp as X
from ..tensors.batch import Batch
from ..tensors.xp import Array


def output_table(table: pa.Table, b: Batch, advantages: Array, returns: Array,
                 is_weights: Optional[Array], schema: pa.Schema, token_weight: Optional[Array] = None) -> pa.Table:
    """The chunk's input columns plus rladv's columns, all lists sharing the chunk's row offsets
    (docs/contract.md §3). Flat ``(N,)`` arrays become the lists' values over their own memory where they are
    numpy of the column's type (a tensor is copied to the host)."""
    offsets = X.to_numpy(b.row_offsets)
    if offsets[-1] >= 2**31:
        raise ComputeError("a chunk holds 2^31 tokens or more; lower --chunk-rows")
    off = arrow_of(offsets, pa.int32())

    def as_list(x: Array, t: pa.DataType) -> pa.Array:
        return pa.ListArray.from_arrays(off, arrow_of(X.to_numpy(x), t))

    def int8(x: Array) -> Array:
        return X.namespace(x).astype(x, X.namespace(x).int8)

    loss_mask = (flat_values(table, "loss_mask", np.int8) if "loss_mask" in table.column_names
                 else int8(b.original_mask))
    added = {
        "token_level_rewards": as_list(b.token_level_rewards, pa.float32()),
        "response_mask": as_list(int8(b.response_mask), pa.int8()),
        "loss_mask": as_list(loss_mask, pa.int8()),
        "advantages": as_list(advantages, pa.float32()),
        "returns": as_list(returns, pa.float32()),
    }
    if is_weights is not None:
        added["rollout_is_weights"] = as_list(is_weights, pa.float32())
    if token_weight is not None:
        added["token_weight"] = as_list(token_weight, pa.float32())
    arrays = [added[name] if name in added else array_of(table[name]) for name in schema.names]
    return pa.Table.from_arrays(arrays, schema=schema)


def check_finite(chunk: Chunk, b: Batch, estimator: str, advantages: Array, returns: Array, valid: Array,
                 adv_sum: Array, ret_sum: Array) -> None:
    """Nothing silently wrong: a NaN/inf advantage or return on a valid token stops the run (inputs that are
    finite can still overflow, e.g. log-probs above 0 in exp()). A row holds one exactly when its float64
    sum of valid values (``adv_sum``, ``ret_sum`` ``(B,)``) is not finite."""
    bad_rows = ~(np.isfinite(X.to_numpy(adv_sum)) & np.isfinite(X.to_numpy(ret_sum)))
    if bool(bad_rows.any()):
        row = int(np.flatnonzero(bad_rows)[0])
        offsets = X.to_numpy(b.row_offsets)
        lo, hi = int(offsets[row]), int(offsets[row + 1])
        adv, ret = X.to_numpy(advantages[lo:hi]), X.to_numpy(returns[lo:hi])
        bad = X.to_numpy(valid[lo:hi]) & ~(np.isfinite(adv) & np.isfinite(ret))
        token = int(np.flatnonzero(bad)[0])
        raise ComputeError(
            f"{chunk.path}: row {chunk.start + row}: {estimator} produced a non-finite advantage or "
            f"return at position {token}; check that row's inputs (values beyond "
            "float32's range, or log-probs above 0 that overflow exp())"
        )
