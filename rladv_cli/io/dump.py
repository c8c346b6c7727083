"""A trainer's batch as a rollout dataset in the contract's layout, so that ``rladv compute`` can replay the step.

Call ``dump_batch`` inside the training loop (after the advantage step, so the batch also holds the trainer's
``token_level_rewards``, ``advantages`` and ``returns`` for the replay to compare), or ``rladv convert`` on a
batch the trainer saved. A batch is verl's ``DataProto`` (``.batch`` tensors, ``.non_tensor_batch`` arrays), a
``TensorDict`` (verl 0.9.1's TransferQueue gives jagged ones), or a plain mapping of names to tensors, numpy
arrays or lists. Per-response-token fields become list columns: jagged tensors row by row as they are; padded
``[B, T]`` tensors at their full width ``T``, with the response part of ``attention_mask`` marking the padding, so
that row totals round as the trainer's padded sums did. ``[B]`` fields become scalar columns. What cannot be
stored (prompt-side tensors, other shapes) is left out and said. No torch import of its own.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..contract.columns import arrow_of
from ..errors import InputError, OutputError
from .write import AtomicParquetWriter, check_output_path, signals_deferred

# verl's batch names -> the contract's (docs/semantics.md §1: token_level_scores is rm_scores copied verbatim)
RENAMES = {"token_level_scores": "rm_scores"}
PROMPT_SIDE = frozenset({"prompts", "input_ids", "position_ids", "raw_prompt_ids"})
MASKS = frozenset({"response_mask", "attention_mask", "loss_mask"})
BATCH = "<batch>"  # how messages name a batch given in memory


@dataclass
class Dumped:
    """What ``dump_batch`` wrote: the file, its rows and tokens, its columns, and each field left out with why."""

    path: str
    rows: int
    tokens: int  # non-padding positions
    columns: list[str]
    skipped: dict[str, str] = field(default_factory=dict)


@dataclass
class _Tokens:
    """A per-token field as flat values and the row offsets they follow (``(B+1,)``), or a padded ``[B, T]``."""

    values: np.ndarray
    offsets: Optional[np.ndarray]  # None: padded rows of width values.shape[1]


def dump_batch(batch: Any, path: str | os.PathLike, *, step: Optional[int] = None, source: str = BATCH) -> Dumped:
    """Write ``batch`` to ``path`` (Parquet, written to a temporary file and renamed) in the contract's layout;
    ``step`` adds a ``step`` column (for ``--batch-key step`` over a folder of dumps). ``path`` is refused where
    ``rladv compute`` refuses an output (empty, a missing folder, a folder, a FIFO or device); errors in the
    batch name it as ``source``."""
    out = os.fspath(path)
    if not out:
        raise OutputError("path is empty; give a file name")
    table, skipped = batch_table(batch, step=step, source=source)
    check_output_path(out, (), "path")
    with AtomicParquetWriter(out, table.schema) as sink:
        sink.write(table)
        sink.finish()
        with signals_deferred():
            sink.commit()
    if "attention_mask" in table.column_names:  # padding left out of the count
        tokens = pc.sum(pc.list_flatten(table["attention_mask"]))
    else:
        tokens = pc.sum(pc.list_value_length(table["response_mask"]))
    return Dumped(out, table.num_rows, int(tokens.as_py() or 0), table.column_names, skipped)


TRUST_FLAG = "--trust-pickle"
# what a dump may name beyond what pickle writes without a global: containers, and numpy's arrays, dtypes and
# scalars (verl keeps its non-tensor fields in numpy arrays); their contents go through the same rule
_DATA_GLOBALS = frozenset({("builtins", n) for n in (
    "dict", "list", "tuple", "set", "frozenset", "str", "bytes", "bytearray", "int", "float", "bool", "complex",
    "slice", "range")} | {("collections", "OrderedDict"), ("numpy", "ndarray"), ("numpy", "dtype")}
    | {(m, n) for m in ("numpy.core.multiarray", "numpy._core.multiarray") for n in ("_reconstruct", "scalar")})


def _numpy_global(module: str, name: str) -> bool:
    return (module, name) in _DATA_GLOBALS or (module == "numpy.dtypes" and name.endswith("DType"))


def _numpy_globals() -> list:
    """numpy's array, dtype and scalar constructors, for ``torch.load(weights_only=True)``'s allowlist."""
    import numpy as np

    core = getattr(np, "_core", None) or np.core
    return [core.multiarray._reconstruct, core.multiarray.scalar, np.ndarray, np.dtype,
            *(getattr(np.dtypes, n) for n in dir(np.dtypes) if n.endswith("DType"))]


class _NeedsCode(Exception):
    """A pickle names ``what``, a global beyond plain data: loading it would run code from the file."""

    def __init__(self, what: str):
        super().__init__(what)
        self.what = what


def _data_only_load(f) -> Any:
    """``pickle.load`` that refuses every global but containers, numbers and numpy arrays (``_DATA_GLOBALS``)."""
    import pickle

    class DataOnly(pickle.Unpickler):
        def find_class(self, module: str, name: str):
            if _numpy_global(module, name):
                return super().find_class(module, name)
            raise _NeedsCode(f"{module}.{name}")

    return DataOnly(f).load()


def load_saved(path: str | os.PathLike, *, trust_pickle: bool = False) -> Any:
    """A batch a trainer saved: ``torch.save`` output (``.pt``/``.pth``) or a pickle (verl's
    ``DataProto.save_to_disk``). A dump is data, not code: by default ``torch.save`` files are read with
    ``torch.load(weights_only=True)`` (tensors, lists, dicts, numbers, strings, numpy arrays) and pickles with an
    unpickler that allows containers, numbers and numpy arrays only; a file that needs more (a ``DataProto``, any class) is refused, naming
    ``--trust-pickle``. ``trust_pickle``: unpickle it fully, which runs code from the file (only files you trust).
    """
    import pickle
    import re

    where = os.fspath(path)
    with open(where, "rb") as f:
        if f.read(4) == b"PAR1":
            raise InputError(where, "is a Parquet file, not a saved batch: rladv compute, inspect and validate read it "
                             "as it is (convert turns a torch.save or pickle of a trainer's batch, or with --from "
                             "FORMAT a trainer's logs, into Parquet)")
    refused = (f"loading it runs code from the file; {TRUST_FLAG} loads it (only for a file you trust, e.g. "
               "verl's DataProto.save_to_disk output)")
    try:
        if where.endswith((".pt", ".pth")):
            import torch

            try:
                if trust_pickle:
                    return torch.load(where, map_location="cpu", weights_only=False)
                with torch.serialization.safe_globals(_numpy_globals()):
                    return torch.load(where, map_location="cpu", weights_only=True)
            except pickle.UnpicklingError as err:
                found = re.search(r"Unsupported global: GLOBAL ([\w.]+)", str(err))
                if trust_pickle or not str(err).startswith("Weights only load failed"):
                    raise
                raise InputError(where, f"holds {found.group(1) if found else 'an object'}, beyond tensors, lists, "
                                 f"dicts and numbers: {refused}") from None
        with open(where, "rb") as f:
            return pickle.load(f) if trust_pickle else _data_only_load(f)
    except _NeedsCode as err:
        raise InputError(where, f"is a pickle that needs {err.what}, beyond containers, numbers and numpy arrays: "
                         f"{refused}") from None
    except ModuleNotFoundError as err:
        raise InputError(where, f"holds objects of the {err.name} package, which is not installed here (a verl "
                         "DataProto needs verl and tensordict: pip install verl==0.9.1)") from None
    except (pickle.UnpicklingError, EOFError, AttributeError, ImportError, ValueError, RuntimeError) as err:
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise InputError(where, f"cannot be read as a saved batch (a torch.save or pickle file): {first}") from None


def batch_table(batch: Any, *, step: Optional[int] = None, source: str = BATCH) -> tuple[pa.Table, dict[str, str]]:
    """``batch`` as an Arrow table in the contract's layout, and the fields left out with the reason for each;
    errors name it as ``source``."""
    fields = _fields(batch, source)
    skipped: dict[str, str] = {}
    for old, new in RENAMES.items():
        if old in fields:
            if new in fields:
                skipped[old] = f"the same values as {new} in verl"
                del fields[old]
            else:
                fields = {new if k == old else k: v for k, v in fields.items()}
    if "response_mask" not in fields:
        raise InputError(source, "missing; the batch needs it to tell the responses' tokens", column="response_mask")
    mask = _tokens(fields["response_mask"])
    if mask is None:
        raise InputError(source, f"is {_shape(fields['response_mask'])}; expected a [B, T] tensor or array, or a "
                         "jagged tensor", column="response_mask")
    if mask.offsets is not None and (np.diff(mask.offsets) == 0).any():
        raise InputError(source, "is an empty response; the data contract needs at least one token per row (pad "
                         "the batch to [B, T], whose attention_mask marks the padding)",
                         row=int(np.argmax(np.diff(mask.offsets) == 0)), column="response_mask")
    rows = len(mask.offsets) - 1 if mask.offsets is not None else mask.values.shape[0]
    width = None if mask.offsets is not None else mask.values.shape[1]
    columns: dict[str, pa.Array] = {}
    for name, value in fields.items():
        if name in PROMPT_SIDE:
            skipped[name] = "prompt side, not one value per response token"
            continue
        if name == "attention_mask":
            why = _attention(value, rows, width, columns, source)
            if why:
                skipped[name] = why
            continue
        column, why = _column(name, value, mask, rows, source)
        if column is None:
            skipped[name] = why
        else:
            columns[name] = column
    if step is not None:
        if "step" in columns:
            raise InputError(source, "the batch has a step field already; add no other", column="step")
        columns["step"] = pa.array(np.full(rows, int(step), dtype=np.int64))
    return pa.table(columns), skipped


def _fields(batch: Any, source: str) -> dict[str, Any]:
    """Name -> value of a DataProto, a TensorDict or a mapping, in the batch's order."""
    if hasattr(batch, "non_tensor_batch") and hasattr(batch, "batch"):  # verl's DataProto
        out = dict(batch.batch.items()) if batch.batch is not None else {}
        out.update(batch.non_tensor_batch)
        return out
    if isinstance(batch, Mapping) or hasattr(batch, "items"):
        return dict(batch.items())
    raise InputError(source, f"holds a {type(batch).__name__}, not a batch (a verl DataProto, a TensorDict or a mapping "
                     "of names to tensors and arrays)")


def _is_tensor(value: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)


def _numpy(tensor) -> np.ndarray:
    """A (non-nested) tensor as numpy on the CPU; half precisions as float32."""
    t = tensor.detach().cpu()
    if str(t.dtype) in ("torch.bfloat16", "torch.float16"):
        t = t.float()
    return t.numpy()


def _widened(values: np.ndarray) -> np.ndarray:
    """float16 as float32 (exactly), as a trainer's half-precision tensors are."""
    return values.astype(np.float32) if values.dtype == np.float16 else values


def _tokens(value: Any) -> Optional[_Tokens]:
    """A per-token field's values and layout: a jagged tensor's values and offsets, or a 2-D array; else None."""
    if _is_tensor(value) and value.is_nested:
        if value.layout == sys.modules["torch"].jagged:
            return _Tokens(_numpy(value.values()), _numpy(value.offsets()).astype(np.int64))
        parts = [_numpy(x) for x in value.unbind()]  # a strided nested tensor: row by row
        offsets = np.concatenate([[0], np.cumsum([len(p) for p in parts])]).astype(np.int64)
        return _Tokens(np.concatenate(parts) if parts else np.zeros(0), offsets)
    array = _numpy(value) if _is_tensor(value) else value
    if isinstance(array, np.ndarray) and array.ndim == 2 and array.dtype != object:
        return _Tokens(array, None)
    return None


def _shape(value: Any) -> str:
    if _is_tensor(value) and value.is_nested:
        return f"jagged [{value.size(0)}, j]"
    shape = getattr(value, "shape", None)
    return f"shape {list(shape)}" if shape is not None else type(value).__name__


def _list_array(values: np.ndarray, offsets: np.ndarray, name: str, source: str) -> pa.Array:
    """Flat ``values`` split at ``offsets`` as a list column; a mask as int8, once checked to hold only 0 and 1."""
    values = _widened(values)
    if name in MASKS:
        bad = np.flatnonzero((values != 0) & (values != 1))
        if bad.size:
            row = int(np.searchsorted(offsets, bad[0], side="right")) - 1
            raise InputError(source, f"has value {values[bad[0]]} at position {int(bad[0] - offsets[row])}; masks must "
                             "be 0 or 1", row=row, column=name)
        values = values.astype(np.int8)
    kind = pa.from_numpy_dtype(values.dtype)
    return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), arrow_of(values, kind))


def _column(name: str, value: Any, mask: _Tokens, rows: int, source: str) -> tuple[Optional[pa.Array], str]:
    """One field as a column (list per row, or scalar per row), or None and why it cannot be one."""
    tokens = _tokens(value)
    if tokens is not None:
        if mask.offsets is not None:
            if tokens.offsets is None or not np.array_equal(tokens.offsets, mask.offsets):
                return None, f"{_shape(value)} does not follow response_mask's jagged rows"
            return _list_array(tokens.values, tokens.offsets, name, source), ""
        if tokens.offsets is not None or tokens.values.shape != mask.values.shape:
            return None, f"{_shape(value)}, not the responses' {list(mask.values.shape)}"
        width = tokens.values.shape[1]
        return _list_array(tokens.values.reshape(-1), np.arange(rows + 1, dtype=np.int64) * width, name, source), ""
    array = _numpy(value) if _is_tensor(value) else value
    if hasattr(array, "tolist") and not isinstance(array, np.ndarray):  # tensordict's NonTensorStack
        array = array.tolist()
    if isinstance(array, np.ndarray) and array.dtype != object:
        if array.ndim != 1 or len(array) != rows:
            return None, f"{_shape(array)}, neither [B] nor the responses' layout"
        return pa.array(array.astype(np.int8) if array.dtype == bool else _widened(array)), ""
    items = list(array) if isinstance(array, (list, tuple, np.ndarray)) else None
    if items is None or len(items) != rows:
        return None, f"{_shape(value)}, not one value per row"
    if name == "uid" and not all(x is None or isinstance(x, int) for x in items):  # group ids as text, unless all ints
        items = [None if x is None else str(x) for x in items]
    try:
        column = pa.array(items)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError) as err:
        return None, f"cannot be stored as a column ({str(err).splitlines()[0]})"
    if not _storable(column.type):
        return None, f"has type {column.type}, which Parquet cannot store (a struct without fields: empty dicts)"
    return column, ""


def _storable(kind: pa.DataType) -> bool:
    """Whether Parquet can hold ``kind``: no struct without fields anywhere inside it."""
    if pa.types.is_struct(kind):
        return kind.num_fields > 0 and all(_storable(kind.field(i).type) for i in range(kind.num_fields))
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        return _storable(kind.value_type)
    if pa.types.is_map(kind):
        return _storable(kind.key_type) and _storable(kind.item_type)
    return True


def _attention(value: Any, rows: int, width: Optional[int], columns: dict[str, pa.Array], source: str) -> str:
    """The response part of a padded ``attention_mask`` (its last ``T`` columns) as the padding marker, unless
    it is all ones; the reason it is left out otherwise."""
    tokens = _tokens(value)
    if width is None:
        return "the rows are jagged: they hold no padding to mark"
    if tokens is None or tokens.offsets is not None or tokens.values.shape[1] < width:
        return f"{_shape(value)}; expected [B, prompt + T]"
    response = tokens.values[:, -width:]
    if (response == 1).all():
        return "all ones over the responses: no padding to mark"
    columns["attention_mask"] = _list_array(response.reshape(-1), np.arange(rows + 1, dtype=np.int64) * width,
                                            "attention_mask", source)
    return ""
