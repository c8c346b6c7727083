"""Replay: the input's own ``token_level_rewards``, ``rollout_is_weights``, ``advantages`` and ``returns`` (a
trainer's batch dump, or an earlier rladv output) against what this run computes, and the first stage where
the two runs part. Pure functions over one chunk's columns and over the per-row results; no I/O.

Compared as the golden cases are (verl 0.9.1's outputs, docs/contract.md §3): ``|input − rladv| <= ATOL + RTOL·|rladv|``;
``token_level_rewards`` and ``rollout_is_weights`` at every position, ``advantages`` and ``returns`` where this
run's ``response_mask`` is 1 (verl leaves values at mask-0 positions for gae, remax and the optimal-token
baselines; rladv writes 0 there). A row whose list length differs from the response's is not compared.
"""
from __future__ import annotations

import math
from typing import Callable, Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..contract.columns import array_of, numpy_of
from ..contract.validation import is_number_list
from ..tensors import kernels
from ..tensors import xp as X
from ..tensors.xp import Array
from .diagnostics import group_min_max

ATOL, RTOL = 1e-5, 1e-4
# in the order the stages make them (docs/semantics.md §10): the first that differs says where the runs part
STAGES = ("token_level_rewards", "rollout_is_weights", "advantages", "returns")
ON_VALID_TOKENS = frozenset({"advantages", "returns"})
FIRST_ROWS = 5
# per-row fields of a row that is not compared (its list's length is not the response's); the others are 0
NOT_COMPARED = {"at": -1, "nonfinite_at": -1, "input": math.nan, "rladv": math.nan, "factor": math.nan, "scaled": False,
                "varies": False}
# half precisions a trainer may compute or store in, finest first: (name, relative step allowed)
HALF_PRECISIONS = (("float16", 2.0**-10), ("bfloat16", 2.0**-7))

HINTS = {
    "token_level_rewards": "the rewards differ before any estimator runs: the scores (rm_scores or score, "
                           "--tool-reward-coef), DAPO overlong shaping or KL shaping (--kl-coef, --kl-penalty, "
                           "--kl-ctrl, --batch-key) differ from the run that wrote them",
    "rollout_is_weights": "the importance weights differ: --rollout-is, --rollout-is-threshold, "
                          "--rollout-is-batch-normalize or --batch-key differ from the run that wrote them",
    "advantages": "the estimator or its settings differ from the run that wrote them: --estimator, --gamma/--lam, "
                  "--norm-adv-by-std/--epsilon, --rpp-mask-mode, --rollout-rs (the mask the estimator uses) or "
                  "--batch-key (groups and whitening per batch)",
    "returns": "only the returns differ: the values, or --gamma/--lam",
}
PROPORTIONAL_HINT = ("within each differing {unit} the input's values are rladv's times one factor ({lo:.4g} to {hi:.4g}): "
                     "a different scale, e.g. std normalisation (--norm-adv-by-std, --epsilon) or whitening")
NO_REWARDS_HINT = "; the input has no token_level_rewards to tell whether the rewards already differ"


def comparable(schema: pa.Schema, computed: set[str]) -> tuple[list[str], dict[str, str]]:
    """The input columns this run can replay (in ``STAGES`` order), and why each other one present is not."""
    names, skipped = [], {}
    for name in STAGES:
        if name not in schema.names:
            continue
        t = schema.field(name).type
        if name not in computed:
            skipped[name] = "carried through: this run does not compute it"
        elif not is_number_list(t):
            skipped[name] = f"has type {t}, not a list of numbers"
        else:
            names.append(name)
    return names, skipped


def compare_chunk(table: pa.Table, names: list[str], computed: dict[str, Array], valid: Array,
                  row_offsets: Array) -> dict[str, Array]:
    """Per-row comparison (``compare_rows``) of each input column ``names`` with this run's ``computed[name]
    (N,)``, as ``rp_{name}_{field}`` columns ``(B,)``; ``valid (N,) bool`` is the estimator's mask."""
    out = {}
    for name in names:
        fields = compare_rows(array_of(table[name]), computed[name], row_offsets, valid, name in ON_VALID_TOKENS)
        out.update({f"rp_{name}_{k}": v for k, v in fields.items()})
    return out


def compare_rows(given: pa.Array, got: Array, row_offsets: Array, valid: Array, on_valid: bool) -> dict[str, Array]:
    """One list column of the input, ``given`` (B rows), against ``got (N,)`` over ``row_offsets (B+1,)``: at the
    positions where the estimator's mask ``valid (N,) bool`` is set (``on_valid``), else at every position.
    Per row, ``(B,)`` each:

    ``length_ok`` the row's list has the response's length (a null list has none; other rows are not compared);
    ``n`` positions compared; ``bad`` those with ``|Δ| > ATOL + RTOL·|got|`` (a NaN counts), ``bad_masked``
    those of them where ``valid`` is 0; ``nonfinite`` those where ``Δ`` is not finite and ``nonfinite_at`` the
    first one's position (-1: none); ``sum`` ``Σ |Δ|`` and ``max`` the largest ``|Δ|`` over the finite ones;
    ``at`` its position in the row (-1: none); ``input``/``rladv`` the values there; for the rows that differ,
    ``factor``, ``scaled`` and ``varies`` (``_scale``; NaN, False, False for the others), and
    ``unrounded_{float16,bfloat16}`` (``_unrounded``). In one C pass per row (``kernels.compare_native``) on
    the CPU, in the array namespace elsewhere; ``(B,)`` arrays of ``got``'s kind.
    """
    xp = X.namespace(got)
    lengths = numpy_of(pc.list_value_length(given).fill_null(-1)).astype(np.int64)
    length_ok = X.like(lengths, got) == kernels.row_lengths(row_offsets)
    every_row = bool(xp.all(length_ok))
    flat = given.flatten()
    values = numpy_of(flat)  # nulls inside a list become NaN
    if every_row and flat.type == pa.float32() and not flat.null_count:  # the same bits everywhere: nothing to find
        same = X.like(values, got) == got
        if bool(xp.all(same | ~valid) if on_valid else xp.all(same)):
            return _identical(length_ok, valid if on_valid else None, row_offsets)
    if values.dtype not in (np.float32, np.float64):
        values = values.astype(np.float64)
    given_off = np.zeros(len(lengths) + 1, dtype=np.int64)
    given_off[1:] = np.cumsum(np.maximum(lengths, 0))
    native = kernels.compare_native(values, given_off, got, valid, row_offsets, on_valid, ATOL, RTOL)
    if native is not None:
        # (a null list of an empty row has the C loop's length; nothing is compared there either way)
        per_row = {**native, "length_ok": length_ok, "at": X.int64(native["at"]),
                   "nonfinite_at": X.int64(native["nonfinite_at"]), "scaled": native["scaled"] > 0,
                   "varies": native["varies"] > 0}
        if not (bool(xp.any(per_row["max"] > 0)) or bool(xp.any(per_row["nonfinite"] > 0))):
            per_row.update(at=xp.full_like(per_row["at"], -1), input=xp.full_like(per_row["input"], math.nan),
                           rladv=xp.full_like(per_row["rladv"], math.nan))  # as _differences: no worst place
    else:
        exp, g, w, mask, off = _positions(values, given_off, length_ok, got, valid, row_offsets, on_valid)
        per_row = _in_all_rows(_differences(exp, g, w, mask, off), length_ok)
        if bool(xp.any(per_row["bad"] > 0)):
            bad = w & ~(xp.abs(exp - g) <= ATOL + RTOL * xp.abs(g))
            differs = kernels.segment_sum(X.float64(bad), off) > 0
            factor, scaled, varies = _scale(exp, g, w, off)
            per_row.update(_in_all_rows({"factor": xp.where(differs, factor, math.nan), "scaled": scaled & differs,
                                         "varies": varies & differs, **_unrounded(exp, g, bad, off)}, length_ok))
    if not bool(xp.any(per_row["bad"] > 0)):  # a scale or a precision is looked for only where some row differs
        zero = xp.zeros_like(per_row["sum"])
        per_row.update(factor=xp.full_like(zero, math.nan), scaled=xp.astype(zero, xp.bool),
                       varies=xp.astype(zero, xp.bool), **{f"unrounded_{name}": zero for name, _ in HALF_PRECISIONS})
    return per_row


def _positions(values: np.ndarray, given_off: np.ndarray, length_ok: Array, got: Array, valid: Array,
               row_offsets: Array, on_valid: bool) -> tuple[Array, Array, Array, Array, Array]:
    """The compared rows' positions (rows whose lengths agree): the input's values and this run's as float64,
    where they are compared (``on_valid``: the estimator's mask, else everywhere), the mask and the rows'
    offsets; ``(exp, g, w, valid, off)``."""
    xp = X.namespace(got)
    exp = values.astype(np.float64)
    off = row_offsets
    if not bool(xp.all(length_ok)):
        keep_given, _ = kernels.select_rows(X.to_numpy(length_ok), given_off)
        keep_got, off = kernels.select_rows(length_ok, row_offsets)
        exp, got, valid = exp[keep_given], got[keep_got], valid[keep_got]
    g = X.float64(got)
    return X.like(exp, got), g, valid if on_valid else xp.ones_like(g, dtype=xp.bool), valid, off


def _differences(exp: Array, g: Array, w: Array, valid: Array, off: Array) -> dict[str, Array]:
    """``compare_rows``'s counts, sums, largest difference and its place for the compared rows, in the array
    namespace (where the C loop does not run: on a GPU, or without the C build); the same numbers as
    ``kernels.compare_native``."""
    xp = X.namespace(g)
    d = xp.where(w, xp.abs(exp - g), 0.0)
    finite = xp.isfinite(d)
    bad = w & ~(d <= ATOL + RTOL * xp.abs(g))
    d = xp.where(finite, d, 0.0)
    dmax = kernels.segment_max(d, off)
    nan = xp.full_like(dmax, math.nan)
    none = xp.full_like(dmax, -1, dtype=xp.int64)
    per_row = {
        "n": kernels.segment_sum(X.float64(w), off), "bad": kernels.segment_sum(X.float64(bad), off),
        "bad_masked": kernels.segment_sum(X.float64(bad & ~valid), off),
        "nonfinite": kernels.segment_sum(X.float64(w & ~finite), off), "nonfinite_at": none,
        "sum": kernels.segment_sum(d, off), "max": dmax, "at": none, "input": nan, "rladv": nan,
    }
    if bool(xp.any(dmax > 0)) or not bool(xp.all(finite)):
        position = xp.arange(X.numel(g), dtype=xp.int64, device=X.dev(g)) - kernels.broadcast_rows(off[:-1], off)
        at = _first(w & finite & (d == kernels.broadcast_rows(dmax, off)), position, off)  # each row's largest
        pick = xp.where(at >= 0, off[:-1] + at, 0)
        per_row.update(at=at, input=xp.where(at >= 0, exp[pick], math.nan),
                       rladv=xp.where(at >= 0, g[pick], math.nan), nonfinite_at=_first(w & ~finite, position, off))
    return per_row


def _in_all_rows(fields: dict[str, Array], length_ok: Array) -> dict[str, Array]:
    """Per-row ``fields`` of the compared rows spread over every row (``length_ok``); the others get
    ``NOT_COMPARED``'s values (nothing compared, no position)."""
    xp = X.namespace(length_ok)
    if bool(xp.all(length_ok)):
        return {"length_ok": length_ok, **fields}
    full = {"length_ok": length_ok}
    for k, v in fields.items():
        full[k] = xp.full(X.numel(length_ok), NOT_COMPARED.get(k, 0), dtype=v.dtype, device=X.dev(v))
        full[k][length_ok] = v
    return full


def _identical(length_ok: Array, where: Optional[Array], off: Array) -> dict[str, Array]:
    """``compare_rows``'s fields for rows whose compared values are bit for bit this run's."""
    xp = X.namespace(length_ok)
    zero = xp.zeros(X.numel(length_ok), dtype=xp.float64, device=X.dev(length_ok))
    n = X.float64(kernels.row_lengths(off)) if where is None else kernels.segment_sum(X.float64(where), off)
    per_row = {"length_ok": length_ok, "n": n, "bad": zero, "bad_masked": zero, "nonfinite": zero, "sum": zero,
               "max": zero, **{f"unrounded_{name}": zero for name, _ in HALF_PRECISIONS}}
    for k, fill in NOT_COMPARED.items():
        per_row[k] = xp.full_like(zero, fill, dtype=xp.int64 if k in ("at", "nonfinite_at") else
                                  xp.bool if k in ("scaled", "varies") else xp.float64)
    return per_row


def _first(flags: Array, position: Array, off: Array) -> Array:
    """Per row, the position of its first set ``flags (N,)``, -1 for none; ``(B,)`` int64."""
    xp = X.namespace(flags)
    first = kernels.segment_min(xp.where(flags, X.float64(position), math.inf), off, empty=math.inf)
    return X.int64(xp.where(xp.isfinite(first), first, -1.0))


def _scale(given: Array, got: Array, where: Array, off: Array) -> tuple[Array, Array, Array]:
    """Per row, the least-squares factor ``c = Σ given·got / Σ got²`` over ``where``, whether ``given ≈ c·got``
    there within the tolerance (False for a row whose ``got`` is all 0), and whether ``got`` takes more than one
    value there (else the row alone is proportional to anything); ``(B,)`` each."""
    xp = X.namespace(given, got)
    gw, ew = xp.where(where, got, 0.0), xp.where(where & xp.isfinite(given), given, 0.0)
    cross, square = kernels.segment_sum(ew * gw, off), kernels.segment_sum(gw * gw, off)
    factor = xp.where(square > 0, cross / xp.clip(square, min=1e-300), math.nan)
    resid = xp.where(where, xp.abs(given - kernels.broadcast_rows(factor, off) * got), 0.0)
    off_scale = kernels.segment_sum(X.float64(where & ~(resid <= ATOL + RTOL * xp.abs(given))), off)
    varies = (kernels.segment_max(xp.where(where, got, -math.inf), off, empty=0.0)
              > kernels.segment_min(xp.where(where, got, math.inf), off, empty=0.0))
    return factor, (off_scale == 0) & (square > 0), varies


def _unrounded(given: Array, got: Array, bad: Array, off: Array) -> dict[str, Array]:
    """Per row and half precision, the differing positions (``bad``) that rounding to it does not explain:
    the input's value is not a number of that precision, or lies further from rladv's than one step of it
    (``HALF_PRECISIONS``; ``ATOL`` beside) allows; ``(B,)`` float64 each."""
    xp = X.namespace(given, got)
    out = {}
    for name, step in HALF_PRECISIONS:
        rounded = _is_half(given, name) & (xp.abs(given - got) <= step * xp.abs(got) + ATOL)
        out[f"unrounded_{name}"] = kernels.segment_sum(X.float64(bad & ~rounded), off)
    return out


def _is_half(x: Array, name: str) -> Array:
    """Whether each float64 ``x`` is a number of the half precision ``name`` (``"float16"``, ``"bfloat16"``):
    rounding to it gives ``x`` back, whichever way it rounds. On the host, in numpy, which has no bfloat16: a
    float32 whose low 16 bits are 0 is one (the same exponent range, 7 bits of mantissa)."""
    v = X.to_numpy(x)
    with np.errstate(over="ignore"):
        if name == "float16":
            return X.like(v.astype(np.float16).astype(np.float64) == v, x)
        single = v.astype(np.float32)
    return X.like((single.astype(np.float64) == v) & (single.view(np.uint32) & 0xFFFF == 0), x)


def report(rows, names: list[str], skipped: dict[str, str], locate: Callable[[int], tuple[str, int]],
           group_id: Optional[Array] = None, has_loss_mask: bool = False) -> Optional[dict]:
    """The report's ``replay`` section from the per-row ``rp_*`` columns of ``rows`` (a ``RowTable``):
    per column the rows and positions compared and differing, the largest difference and where, and the
    first rows that differ; whether the runs agree, the first column that differs and what it points to.
    A proportional difference is claimed only where it says something: an outcome estimator's row holds one
    value, so such a row alone is proportional to anything; with ``group_id (B,)`` each group's rows must share
    one factor, without it the rows must vary along their length or all share one factor. The hint names what
    the first differing column points to: non-finite values, lists that do not line up, rewards that differ only
    where the mask is 0 (a mask rewritten by rejection, without the mask before it as ``loss_mask``), or the
    stage's settings."""
    if not names and not skipped:
        return None
    columns, first = {}, None
    for name in names:
        col = {k: rows[f"rp_{name}_{k}"] for k in ("length_ok", "n", "bad", "bad_masked", "nonfinite", "nonfinite_at",
                                                   "sum", "max", "at", "input", "rladv", "factor", "scaled", "varies",
                                                   *(f"unrounded_{p}" for p, _ in HALF_PRECISIONS))}
        columns[name] = _column(col, locate, None if group_id is None else X.to_numpy(group_id))
        if first is None and not columns[name]["agree"]:
            first = name
    out = {"tolerance": {"atol": ATOL, "rtol": RTOL}, "compared": names, "not_compared": skipped,
           "columns": columns, "agree": first is None and bool(names), "first_difference": first, "hint": None}
    if first is not None:
        out["hint"] = _hint(first, columns[first], names, has_loss_mask)
    return out


def _hint(name: str, c: dict, names: list[str], has_loss_mask: bool) -> str:
    """What the first differing column ``name`` (its summary ``c``) points to."""
    finite_differences = c["differing_positions"] - c["non_finite_positions"]
    if c["non_finite_positions"]:
        nf = c["first_non_finite"]
        hint = (f"the input's {name} holds {c['non_finite_positions']} NaN or infinite value(s) where rladv's are finite "
                f"(first at {nf['where']} position {nf['position']}): the run that wrote them produced them")
        return hint if not finite_differences else f"{hint}; the other differences: {HINTS[name]}"
    if not finite_differences:
        return (f"{c['length_mismatch_rows']} row(s) of the input's {name} are null or not the response's length: the "
                "file's lists do not line up with response_mask (rows cut, padded or shifted?)")
    if c["half_precision"] is not None and not c["length_mismatch_rows"]:
        return (f"every differing value of the input's {name} is a {c['half_precision']} number within one "
                f"{c['half_precision']} step of rladv's: the run that wrote them computed or stored them in "
                f"{c['half_precision']}, and they agree to that precision")
    if name != "token_level_rewards" or has_loss_mask or c["differing_masked_positions"] < finite_differences:
        hint = HINTS[name]
    else:
        return ("the rewards differ only where this run's response_mask is 0: the input's response_mask looks rewritten "
                "by rollout rejection after KL shaping, and the input has no loss_mask (the mask before rejection, "
                "which rladv would read as such); dump it beside the rewritten one")
    if c["proportional"] is not None:
        hint += "; " + PROPORTIONAL_HINT.format(**c["proportional"])
    if name in ON_VALID_TOKENS and "token_level_rewards" not in names:
        hint += NO_REWARDS_HINT
    return hint


def _column(col: dict[str, np.ndarray], locate, group_id: Optional[np.ndarray]) -> dict:
    """One column's summary over all rows (``RowTable`` columns, numpy)."""
    differ = (col["bad"] > 0) | ~col["length_ok"]
    where = lambda rows: [f"{p}:{r}" for p, r in map(locate, rows)]  # noqa: E731
    first = np.flatnonzero(differ)[:FIRST_ROWS].tolist()
    mismatch = np.flatnonzero(~col["length_ok"])
    finite = col["n"] - col["nonfinite"]
    out = {
        "agree": not bool(differ.any()), "rows_compared": int(col["length_ok"].sum()), "length_mismatch_rows": int(mismatch.size),
        "positions": int(col["n"].sum()), "differing_positions": int(col["bad"].sum()),
        "non_finite_positions": int(col["nonfinite"].sum()), "first_non_finite": None,
        "differing_masked_positions": int(col["bad_masked"].sum()), "differing_rows": int(differ.sum()),
        "max_abs_diff": None, "mean_abs_diff": float(col["sum"].sum() / finite.sum()) if float(finite.sum()) else None,
        "worst": None, "first_rows": where(first), "proportional": None,
        "half_precision": next((p for p, _ in HALF_PRECISIONS if bool((col["bad"] > 0).any())
                                and float(col[f"unrounded_{p}"].sum()) == 0), None),
    }
    compared = col["length_ok"] & (col["n"] > 0)
    if bool(compared.any()):
        dmax = np.where(compared, col["max"], -1.0)
        row = int(np.argmax(dmax))
        worst = float(dmax[row])
        out["max_abs_diff"] = worst
        if worst > 0:
            out["worst"] = {"where": where([row])[0], "dataset_row": row, "position": int(col["at"][row]),
                            "input": _number(col["input"][row]), "rladv": _number(col["rladv"][row])}
    if mismatch.size:
        out["length_mismatch_first_rows"] = where(mismatch[:FIRST_ROWS].tolist())
    nonfinite = np.flatnonzero(col["nonfinite"] > 0)
    if nonfinite.size:
        row = int(nonfinite[0])
        out["first_non_finite"] = {"where": where([row])[0], "dataset_row": row, "position": int(col["nonfinite_at"][row])}
    rows_bad = col["bad"] > 0
    if bool(rows_bad.any()) and bool(col["scaled"][rows_bad].all()):
        f = col["factor"][rows_bad]
        if group_id is not None:
            unit, key = "group", group_id[rows_bad]
        elif bool(col["varies"][rows_bad].all()):
            unit, key = "row", np.arange(f.size)
        else:
            unit, key = "batch", np.zeros(f.size, dtype=np.int64)
        lo, hi = group_min_max(f, key, int(key.max()) + 1)
        seen = np.isfinite(hi)
        if bool((hi[seen] - lo[seen] <= RTOL * np.abs(hi[seen])).all()):
            out["proportional"] = {"unit": unit, "lo": float(f.min()), "hi": float(f.max())}
    return out


def _number(x: Array) -> Optional[float]:
    v = float(x)
    return v if math.isfinite(v) else None
