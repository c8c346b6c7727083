"""The write pass's output of one chunk: the input's columns plus rladv's, as one Arrow table, and the check
that nothing non-finite is written."""
from __future__ import annotations

from typing import Optional

import numpy as np
import pyarrow as pa
import torch
from torch import Tensor

from ..contract.columns import array_of, arrow_of, flat_values
from ..errors import ComputeError
from ..io.read import Chunk
from ..tensors.batch import Batch


def output_table(table: pa.Table, b: Batch, advantages: Tensor, returns: Tensor,
                 is_weights: Optional[Tensor], schema: pa.Schema, token_weight: Optional[Tensor] = None) -> pa.Table:
    """The chunk's input columns plus rladv's columns, all lists sharing the chunk's row offsets
    (docs/contract.md §3)."""
    offsets = b.row_offsets.cpu().numpy()
    if offsets[-1] >= 2**31:
        raise ComputeError("a chunk holds 2^31 tokens or more; lower --chunk-rows")
    off = arrow_of(offsets, pa.int32())

    def as_list(x: Tensor | np.ndarray, t: pa.DataType) -> pa.Array:
        values = x.cpu().numpy() if isinstance(x, Tensor) else x
        return pa.ListArray.from_arrays(off, arrow_of(values, t))

    loss_mask = (flat_values(table, "loss_mask", np.int8) if "loss_mask" in table.column_names
                 else b.original_mask.to(torch.int8))
    added = {
        "token_level_rewards": as_list(b.token_level_rewards, pa.float32()),
        "response_mask": as_list(b.response_mask.to(torch.int8), pa.int8()),
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


def check_finite(chunk: Chunk, b: Batch, estimator: str, advantages: Tensor, returns: Tensor, valid: Tensor,
                 adv_sum: Tensor, ret_sum: Tensor) -> None:
    """Nothing silently wrong: a NaN/inf advantage or return on a valid token stops the run (inputs that are
    finite can still overflow, e.g. log-probs above 0 in exp()). A row holds one exactly when its float64
    sum of valid values (``adv_sum``, ``ret_sum`` ``(B,)``) is not finite."""
    bad_rows = ~(torch.isfinite(adv_sum) & torch.isfinite(ret_sum))
    if bool(bad_rows.any()):
        row = int(torch.nonzero(bad_rows)[0])
        lo, hi = int(b.row_offsets[row]), int(b.row_offsets[row + 1])
        bad = valid[lo:hi] & ~(torch.isfinite(advantages[lo:hi]) & torch.isfinite(returns[lo:hi]))
        token = lo + int(torch.nonzero(bad)[0])
        raise ComputeError(
            f"{chunk.path}: row {chunk.start + row}: {estimator} produced a non-finite advantage or "
            f"return at position {token - int(b.row_offsets[row])}; check that row's inputs (values beyond "
            "float32's range, or log-probs above 0 that overflow exp())"
        )
