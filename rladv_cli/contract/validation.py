"""Checks of the data contract (docs/contract.md §1) on Arrow data: schema-level once, row-level per chunk. No torch.

Every failure is an ``InputError`` naming file, row (0-based within the file) and column.
"""
from __future__ import annotations

import difflib
from typing import Callable, Iterable, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..config.flags import named
from ..errors import InputError
from .columns import array_of, numpy_of
from .schema import COLUMNS, Column


def _is_list(t: pa.DataType) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t)


def _is_number(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t)


def is_number_list(t: pa.DataType) -> bool:
    """Whether Arrow type ``t`` is a list (or large list) of integers or floats."""
    return _is_list(t) and _is_number(t.value_type)


def _type_problem(col: Column, t: pa.DataType) -> str | None:
    """Why Arrow type ``t`` cannot hold contract column ``col`` (None when it can)."""
    if col.kind == "label":
        ok = pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_integer(t) or (
            pa.types.is_dictionary(t) and (pa.types.is_string(t.value_type) or pa.types.is_large_string(t.value_type))
        )
        return None if ok else f"has type {t}; expected string or integer group ids"
    if col.kind == "float":
        return None if _is_number(t) else f"has type {t}; expected a number per row"
    if col.kind == "flag":
        ok = pa.types.is_boolean(t) or pa.types.is_integer(t)
        return None if ok else f"has type {t}; expected a bool (or 0/1) per row"
    if not _is_list(t):
        return f"has type {t}; expected a list per row"
    v = t.value_type
    if col.kind == "mask":  # a float mask (a saved torch.ones) holds 0.0 and 1.0, checked row by row
        ok = pa.types.is_integer(v) or pa.types.is_boolean(v) or pa.types.is_floating(v)
        return None if ok else f"has type {t}; expected a list of 0/1 (integers, bool or 0.0/1.0 floats)"
    if col.kind == "int_list":
        return None if pa.types.is_integer(v) else f"has type {t}; expected a list of integer token ids"
    if col.kind == "call_list":
        return None if _is_number(v) else f"has type {t}; expected a list of numbers, one per tool call"
    return None if _is_number(v) else f"has type {t}; expected a list of numbers"


_SCORE_NEEDED = "a dataset needs rm_scores (token-level) or score (one per row)"


def required_columns(columns: Iterable[str], reads: Mapping[str, str] = {}, *, kl: bool = False,
                     rollout_correction: bool = False, batch_key: str | None = None,
                     reward_components: Iterable[str] = (), tool_rewards: bool = False,
                     truncated: bool = False) -> dict[str, str]:
    """The columns the chosen stages read, each with why (the first reason when several stages read it): the
    mask, a score column (optional when an estimator reads reward components), what the estimator reads
    (``reads``: ``Estimator.reads``) and what the stages declare (``tool_rewards``: added to the score;
    ``truncated``: the stop-properly penalty's flag)."""
    names = set(columns)
    need = {"response_mask": "every row needs one (1 = a token the actor sampled)"}
    if "rm_scores" in names or "score" in names or not reward_components:
        need["rm_scores" if "rm_scores" in names or "score" not in names else "score"] = _SCORE_NEEDED
    for name in reward_components:
        need.setdefault(name, f"{named('reward_components')} names it")
    for name, why in reads.items():
        need.setdefault(name, why)
    if kl:
        for name in ("old_log_probs", "ref_log_prob"):
            need.setdefault(name, f"KL shaping ({named('kl_coef')}) needs the old and the reference policy's log-probs")
    if rollout_correction:
        for name in ("old_log_probs", "rollout_log_probs"):
            need.setdefault(name, "rollout correction needs the old and the rollout policy's log-probs")
    if tool_rewards:
        need.setdefault("tool_rewards", f"{named('tool_reward_coef')} adds each row's tool_rewards to its score")
    if truncated:
        need.setdefault("truncated", f"{named('stop_properly_penalty_coef')} penalises the rows it marks true (cut "
                        "at the length limit)")
    if batch_key:
        need.setdefault(batch_key, f"{named('batch_key')} names it")
    return need


def check_schema(path: str, schema: pa.Schema, required: Mapping[str, str]) -> None:
    """Every required column (name -> why it is needed, ``required_columns``) is present, or an error that says
    why and names the closest column the file has; and every contract column present has an accepted type."""
    missing = [name for name in required if name not in schema.names]
    if missing:
        why = "; ".join(dict.fromkeys(required[name] for name in missing))
        others = [n for n in schema.names if n not in required and n not in COLUMNS]  # not another role's column
        close = [c for name in missing for c in difflib.get_close_matches(name, others, n=1, cutoff=0.6)]
        hint = f" (did you mean {' or '.join(dict.fromkeys(close))}?)" if close else ""
        raise InputError(path, f"missing; {why}{hint}", column=", ".join(missing))
    for field in schema:
        col = COLUMNS.get(field.name)
        if col is not None:
            problem = _type_problem(col, field.type)
            if problem:
                raise InputError(path, problem, column=field.name)


def _first(mask: np.ndarray) -> int | None:
    hits = np.flatnonzero(mask)
    return int(hits[0]) if hits.size else None


def _first_null(arr: pa.Array) -> int | None:
    """Index of the first null of ``arr``, or None (Arrow compute only, see ``columns.numpy_of``)."""
    if not arr.null_count:
        return None
    return pc.indices_nonzero(arr.is_null())[0].as_py()


SCORE_COLUMNS = ("rm_scores", "score")


def check_chunk(table: pa.Table, path: str, start: int, validated: frozenset[str] = frozenset(),
                unscorable: bool = False) -> None:
    """``check_rows``; a bad score names the row's uid group too, whose every advantage it would poison."""
    try:
        check_rows(table, path, start, validated, unscorable)
    except InputError as err:
        if err.column not in SCORE_COLUMNS or err.row is None or "uid" not in table.column_names:
            raise
        uid = array_of(table["uid"])[err.row - start].as_py()
        raise InputError(path, f"{err.message} (uid {uid!r}: a NaN or missing reward makes every advantage of its "
                         "group NaN)", row=err.row, column=err.column, kind=err.kind) from None


def check_rows(table: pa.Table, path: str, start: int, validated: frozenset[str] = frozenset(),
               unscorable: bool = False) -> None:
    """Row-level checks of every contract column present in ``table`` (rows ``start..`` of ``path``).

    Nulls (a null ``tool_rewards`` list is a row without tool calls), list lengths (all token-aligned lists
    share ``L_i >= 1``), 0/1 masks, finite numbers, and
    padding (``attention_mask == 0``) only as a suffix and never under ``response_mask == 1``. Columns in
    ``validated`` passed these checks in an earlier pass over the same rows: only their lengths are compared
    with the other lists'. ``unscorable``: a null or NaN ``score`` is a row without a score (TRL's unscorable
    completion, ``Convention.unscorable``), not an error.
    """
    lengths, first_list = None, None
    flat: dict[str, np.ndarray] = {}
    # response_mask first: other lists' lengths are measured against it, whichever columns a pass reads
    for name in sorted(table.column_names, key=lambda n: n != "response_mask"):
        col = COLUMNS.get(name)
        if col is None or (name in validated and not col.token_aligned):
            continue
        arr = array_of(table[name])
        if name in validated:
            row_len = numpy_of(pc.list_value_length(arr))
            if lengths is None:
                lengths, first_list = row_len, name
            else:
                _check_lengths(row_len, lengths, name, first_list, path, start)
            continue
        if col.kind == "call_list":  # a null list is a row without tool calls
            _check_list_values(arr, name, path, start)
            continue
        if unscorable and name == "score":
            _check_finite(arr, name, path, start, allow_nan=True)
            continue
        bad = _first_null(arr)
        if bad is not None:
            raise InputError(path, "is null; every row needs a value", row=start + bad, column=name, kind="null value")
        if not col.token_aligned:
            if col.kind == "float":
                _check_finite(arr, name, path, start)
            elif col.kind == "flag":
                values = numpy_of(arr)
                bad = _first_not_0_or_1(values)
                if bad is not None:
                    raise InputError(path, f"has value {values[bad]}; a flag is true or false (1 or 0)",
                                     row=start + bad, column=name, kind="flag value other than 0 or 1")
            continue
        row_len = numpy_of(pc.list_value_length(arr))
        if lengths is None:
            lengths = row_len
            bad = _first(row_len == 0)
            if bad is not None:
                raise InputError(path, "is an empty list; every row needs at least one token", row=start + bad, column=name,
                                 kind="empty list")
        else:
            _check_lengths(row_len, lengths, name, first_list, path, start)
        if lengths is row_len:
            first_list = name
        if col.kind == "mask":
            v = _list_values(arr, name, path, start)
            bad = _first_not_0_or_1(v)
            if bad is not None:
                parents = numpy_of(pc.list_parent_indices(arr))
                raise InputError(path, f"has value {v[bad]}; masks must be 0 or 1", row=start + int(parents[bad]),
                                 column=name, kind="mask value other than 0 or 1")
            flat[name] = v
        elif col.kind == "float_list":
            _check_list_values(arr, name, path, start)
        else:
            _list_values(arr, name, path, start)
    for pair, check in (({"attention_mask", "response_mask"}, _check_padding),
                        ({"loss_mask", "response_mask"}, _check_within_loss_mask)):
        present = pair & set(table.column_names)
        if ("attention_mask" in present or "loss_mask" in present) and not present <= validated:
            for name in present - flat.keys():  # validated earlier, still needed here
                flat[name] = numpy_of(array_of(table[name]).flatten()).astype(np.int64)
            check(table, path, start, flat)


def _list_values(arr: pa.Array, name: str, path: str, start: int) -> np.ndarray:
    """The values of list array ``arr`` (rows ``start..``) as one flat array; a null inside a list is an error."""
    values = arr.flatten()
    if values.null_count:
        parents = numpy_of(pc.list_parent_indices(arr))
        bad = _first_null(values)
        raise InputError(path, f"has a null at position {_pos(arr, parents, bad)}", row=start + int(parents[bad]),
                         column=name, kind="null inside a list")
    return numpy_of(values)


def _check_list_values(arr: pa.Array, name: str, path: str, start: int) -> None:
    """Every value of list array ``arr`` is a finite float32 number."""
    v = _list_values(arr, name, path, start)
    bad = _first_not_float32(v)
    if bad is not None:
        parents = numpy_of(pc.list_parent_indices(arr))
        raise InputError(
            path, f"has {v[bad]} at position {_pos(arr, parents, bad)}; values must be finite float32 "
            "numbers (no NaN, infinity, or beyond ±3.4e38)", row=start + int(parents[bad]), column=name,
            kind="NaN, infinity or beyond float32 in a list",
        )


def _check_lengths(row_len: np.ndarray, lengths: np.ndarray, name: str, first_list: str, path: str, start: int) -> None:
    bad = _first(row_len != lengths)
    if bad is not None:
        raise InputError(
            path,
            f"has length {row_len[bad]} but {first_list} has {lengths[bad]}; token lists of a row must have one length",
            row=start + bad, column=name, kind="length differs from the row's other token lists",
        )


def invalid_rows(table: pa.Table, path: str, start: int,
                 check: Callable[[pa.Table, str, int], None] = None) -> list[tuple[int, InputError]]:
    """``(row within table, error)`` for every row that fails ``check`` (default ``check_chunk``), one error
    per row (its first problem). A chunk that passes is checked once; a failing one is bisected, so ``k`` bad
    rows cost ``O(k log n)`` checks, and the answer does not depend on how rows were chunked."""
    check = check or check_chunk
    try:
        check(table, path, start)
        return []
    except InputError as err:
        if table.num_rows <= 1:
            return [(0, err)]
    half = table.num_rows // 2
    left = invalid_rows(table.slice(0, half), path, start, check)
    right = invalid_rows(table.slice(half), path, start + half, check)
    return left + [(half + i, err) for i, err in right]


def _first_not_float32(v: np.ndarray, allow_nan: bool = False) -> int | None:
    """Index of the first value that is not finite once read as float32 (NaN unless ``allow_nan``, infinity, or
    beyond float32's range), or None. Integers always are; float32 is tested in place (one pass, one boolean
    temporary)."""
    if v.dtype.kind in "biu":
        return None
    if v.dtype != np.float32:
        with np.errstate(over="ignore", invalid="ignore"):
            v = v.astype(np.float32)
    finite = np.isfinite(v)
    if allow_nan:
        finite |= np.isnan(v)
    return None if finite.all() else int(np.argmin(finite))


def _first_not_0_or_1(v: np.ndarray) -> int | None:
    """Index of the first mask value other than 0 and 1, or None: integers read unsigned (a bad value is one
    above 1); floats must be exactly 0.0 or 1.0 (NaN is not)."""
    if v.dtype.kind == "b":
        return None
    if v.dtype.kind == "f":
        bad = (v != 0) & (v != 1)
    else:
        bad = (v.view(f"u{v.itemsize}") if v.dtype.kind == "i" else v) > 1
    return int(np.argmax(bad)) if bad.any() else None


def _check_finite(arr: pa.Array, name: str, path: str, start: int, allow_nan: bool = False) -> None:
    # unsafe: Arrow's safe cast refuses integers beyond ±2**53 (ArrowInvalid); rounded, each is a finite float32
    # as verl's float32 tensors hold it, which is what is checked here (a null reads as NaN)
    bad = _first_not_float32(numpy_of(pc.cast(arr, pa.float64(), safe=False)), allow_nan)
    if bad is not None:
        raise InputError(path, f"is {arr[bad].as_py()}; values must be finite float32 numbers",
                         row=start + bad, column=name, kind="NaN, infinity or beyond float32")


def check_numbers(table: pa.Table, columns: Iterable[str], path: str, start: int) -> None:
    """Columns of one finite number per row (e.g. ``gdpo``'s reward components): type, nulls, NaN/inf."""
    for name in columns:
        arr = array_of(table[name])
        if not _is_number(arr.type):
            raise InputError(path, f"has type {arr.type}; expected a number per row", column=name)
        bad = _first_null(arr)
        if bad is not None:
            raise InputError(path, "is null; every row needs a value", row=start + bad, column=name, kind="null value")
        _check_finite(arr, name, path, start)


def _pos(arr: pa.Array, parents: np.ndarray, flat_index: int) -> int:
    """Position inside its row of flat value ``flat_index``."""
    row = int(parents[flat_index])
    return flat_index - int(np.searchsorted(parents, row, side="left"))


def _check_within_loss_mask(table: pa.Table, path: str, start: int, flat: dict[str, np.ndarray]) -> None:
    """``loss_mask`` is the mask before rollout rejection (rladv's m0), which ``response_mask`` may only drop
    tokens from: a ``response_mask`` 1 under a ``loss_mask`` 0 is an error."""
    if "response_mask" not in flat:
        return
    bad = _first((flat["loss_mask"] == 0) & (flat["response_mask"] == 1))
    if bad is not None:
        arr = array_of(table["response_mask"])
        parents = numpy_of(pc.list_parent_indices(arr))
        raise InputError(
            path, f"is 1 at position {_pos(arr, parents, bad)} where loss_mask is 0; loss_mask is the mask before "
            "rollout rejection, and response_mask may only drop tokens from it", row=start + int(parents[bad]),
            column="response_mask", kind="1 outside loss_mask",
        )


def _check_padding(table: pa.Table, path: str, start: int, flat: dict[str, np.ndarray]) -> None:
    att = flat["attention_mask"]
    parents = numpy_of(pc.list_parent_indices(array_of(table["attention_mask"])))
    same_row = parents[1:] == parents[:-1]
    bad = _first(same_row & (att[:-1] == 0) & (att[1:] == 1))
    if bad is not None:
        raise InputError(
            path, "has a 1 after a 0; padding (attention_mask 0) may only be a suffix of the row",
            row=start + int(parents[bad]), column="attention_mask", kind="padding that is not a suffix",
        )
    if "response_mask" in flat:
        bad = _first((att == 0) & (flat["response_mask"] == 1))
        if bad is not None:
            raise InputError(
                path, "is 1 on a padding position (attention_mask 0)", row=start + int(parents[bad]), column="response_mask",
                kind="1 on a padding position",
            )
