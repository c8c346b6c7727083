"""Segmented tensor kernels on flat ragged data.

A chunk of ``B`` rows is held flat: every per-token tensor has shape ``(N,)`` with ``N = Σ L_i``, and
``row_offsets (B+1,) int64`` marks where each row starts (Arrow list offsets, rebased to 0). No kernel pads
to ``[B, T]`` and no kernel loops over tokens in Python. Every result for a row depends only on that row's
own values, never on which chunk it sits in or where, so chunked and whole-batch runs agree bit for bit.
"""
from __future__ import annotations

import numpy as np

from . import xp as X
from .xp import Array

try:  # the C loops (setup.py builds them when a compiler is there)
    from . import _scan
except ImportError:  # pragma: no cover - depends on the install
    _scan = None
try:
    from . import _rows
except ImportError:  # pragma: no cover - depends on the install
    _rows = None

NATIVE_SCAN = _scan is not None


def row_lengths(row_offsets: Array) -> Array:
    """``L_i = row_offsets[i+1] - row_offsets[i]``; ``(B,) int64``."""
    return row_offsets[1:] - row_offsets[:-1]


def row_ids(row_offsets: Array) -> Array:
    """Row index of every token: ``(N,) int64`` with ``row_ids[t] = i`` for ``row_offsets[i] <= t < row_offsets[i+1]``."""
    lengths = row_lengths(row_offsets)
    xp = X.namespace(row_offsets)
    return X.repeat(xp.arange(X.numel(lengths), device=X.dev(row_offsets)), lengths)


def segment_sum(x: Array, row_offsets: Array) -> Array:
    """``out_i = Σ_{t in row i} x_t``, accumulated in float64 and returned as float64; ``(B,)``.

    Float64 accumulation keeps a row sum within one float32 rounding of the exact value, whatever the row
    length, and the result does not depend on the row's neighbours.
    """
    return _sums(x, row_offsets)[0]


def _sums(x: Array, row_offsets: Array, nonzero: bool = False) -> tuple[Array, Array | None]:
    """``segment_sum`` of ``x`` and, with ``nonzero``, each row's count of ``x != 0`` (float64 ``(B,)``).
    float32 on the CPU: one pass in C (``_rows.row_sums``) that adds in token order, without a float64 copy of
    ``x``; elsewhere a segmented float64 reduction, also in token order."""
    xp = X.namespace(x, row_offsets)
    rows = X.numel(row_offsets) - 1
    if _native_runs(_rows, x):
        offsets = _native_offsets(row_offsets, x)
        sums = np.empty(rows, dtype=np.float64)
        counts = np.empty(rows, dtype=np.float64) if nonzero else None
        _rows.row_sums(np.ascontiguousarray(X.to_numpy(x)).ctypes.data, offsets.ctypes.data, rows, sums.ctypes.data,
                       0 if counts is None else counts.ctypes.data)
        return X.like(sums, x), None if counts is None else X.like(counts, x)
    sums = _segment(X.float64(x), row_offsets, "sum")
    return sums, _segment(xp.astype(x != 0, xp.float64), row_offsets, "sum") if nonzero else None


def _segment(x: Array, row_offsets: Array, op: str) -> Array:
    """``op`` (``"sum"`` or ``"max"``) of ``x`` over each row in token order; ``(B,)`` in ``x``'s dtype, 0 (sum)
    or -inf (max) for an empty row."""
    if X.is_numpy(x):
        ufunc, empty = (np.add, 0.0) if op == "sum" else (np.maximum, -np.inf)
        out = np.full(row_offsets.size - 1, empty, dtype=x.dtype)
        nonempty = row_offsets[1:] > row_offsets[:-1]
        if nonempty.any():
            out[nonempty] = ufunc.reduceat(x, row_offsets[:-1][nonempty])
        return out
    import torch  # a tensor reached here: torch is loaded

    if x.numel() == 0:
        return torch.zeros(row_offsets.numel() - 1, dtype=x.dtype, device=x.device)
    return torch.segment_reduce(x, op, offsets=row_offsets, unsafe=True, initial=0.0 if op == "sum" else float("-inf"))


def padded_row_sum(x: Array, row_offsets: Array, width: Array) -> Array:
    """``Σ_t x[i,t]`` in float32 exactly as verl sums a row of a ``[B, T]`` tensor right-padded with zeros to
    ``T = width[i]`` (the longest response of the row's batch); ``(B,)``.

    torch's float32 sum is a cascade whose rounding depends on the padded width, and in a low-variance group a
    1-ulp change of ``R_i`` moves a std-normalised advantage by up to ~1e-3. ``torch_row_sums`` adds the same
    zero-padded rows in torch's order (docs/arrays.md), so the totals agree with verl's bit for bit, on numpy
    or torch arrays alike (tensors on another device are summed on the CPU and the totals moved back).

    A row with at most one non-zero value sums to that value (or +0.0) in any order, so only rows with two or
    more are padded and summed, at most ``PADDED_SUM_BUDGET`` values at a time.
    """
    with np.errstate(over="ignore"):  # a sum past float32's range is inf, as torch's; the run then stops on it
        return X.like(_padded_row_sum(X.to_numpy(x), X.to_numpy(row_offsets), X.to_numpy(width)), x)


def _padded_row_sum(values: np.ndarray, offsets: np.ndarray, widths: np.ndarray) -> np.ndarray:
    total, nonzero = _sums(values, offsets, nonzero=True)
    out = total.astype(values.dtype)
    out[nonzero == 0] = 0.0
    several = nonzero > 1
    lengths = row_lengths(offsets)
    for w in np.unique(widths[several]).tolist():
        rows = np.flatnonzero(several & (widths == w))
        step = max(1, PADDED_SUM_BUDGET // int(w))
        for start in range(0, rows.size, step):
            part = rows[start:start + step]
            padded = np.zeros((part.size, int(w)), dtype=values.dtype)
            keep = np.arange(int(w)) < lengths[part][:, None]
            padded[keep] = values[X.repeat(offsets[part], lengths[part]) + _positions(lengths[part])]
            out[part] = torch_row_sums(padded)
    return out


PADDED_SUM_BUDGET = 1 << 24


def _positions(lengths: np.ndarray) -> np.ndarray:
    """``0 .. L_i - 1`` for every row, concatenated: ``(Σ L_i,)``."""
    starts = np.cumsum(lengths) - lengths
    return np.arange(int(lengths.sum())) - np.repeat(starts, lengths)


TORCH_VECTOR_BYTES = 32  # the vector torch's CPU sum kernel accumulates in: 8 float32 or 4 float64 lanes


def torch_row_sums(m: np.ndarray) -> np.ndarray:
    """``m.sum(dim=1)`` of a contiguous float32 or float64 ``(G, w)`` matrix exactly as torch's CPU kernel adds it
    on one thread; ``(G,)`` in ``m``'s dtype (docs/arrays.md, "Sums that round as torch's").

    torch views a row of ``w ≥ lanes`` values (8 float32, 4 float64) as ``w // lanes`` vectors plus a scalar
    tail; the vectors are added four at a time (``ilp``) in a cascade of 4 levels of ``2^max(4, ⌈log2 n⌉ / 4)``
    steps, the partial vectors folded, then the tail and the lanes added to a scalar in order. A shorter row
    takes the same cascade over its scalars. Every operation here is that addition on whole columns of rows.
    """
    m = np.ascontiguousarray(m)
    rows, width = m.shape
    lanes = TORCH_VECTOR_BYTES // m.dtype.itemsize
    if width < lanes:
        return _ilp_sum(m[:, :, None], width)[:, 0]
    vectors = width // lanes
    partial = _ilp_sum(m[:, :vectors * lanes].reshape(rows, vectors, lanes), vectors)
    total = np.zeros(rows, dtype=m.dtype)
    for k in range(vectors * lanes, width):
        total += m[:, k]
    for k in range(lanes):
        total += partial[:, k]
    return total


def torch_mean(x: np.ndarray) -> np.ndarray:
    """``torch.mean`` of every value of ``x`` as torch's CPU kernel rounds it: the sum in torch's order over the
    count, in ``x``'s dtype; 0-d."""
    return torch_row_sums(np.ascontiguousarray(x).reshape(1, -1))[0] / x.dtype.type(x.size)


def _ilp_sum(x: np.ndarray, size: int) -> np.ndarray:
    """torch's ``row_sum``: ``size`` items (axis 1 of ``x (G, size, lanes)``) in 4 interleaved cascades; ``(G, lanes)``."""
    ilp = 4
    quads = size // ilp
    partial = _cascade(x[:, :quads * ilp].reshape(x.shape[0], quads, ilp, x.shape[2]), quads)
    total = partial[:, 0].copy()
    for i in range(quads * ilp, size):
        total += x[:, i]
    for k in range(1, ilp):
        total += partial[:, k]
    return total


def _cascade(x: np.ndarray, size: int) -> np.ndarray:
    """torch's ``multi_row_sum`` over axis 1 of ``x (G, size, ...)``: 4 accumulator levels, each level's step
    ``2^p`` with ``p = max(4, ⌈log2 size⌉ // 4)``; a level spills into the next when its step is done."""
    levels = 4
    power = max(4, (1 if size <= 2 else int(size - 1).bit_length()) // levels)
    step = 1 << power
    acc = np.zeros((levels, x.shape[0], *x.shape[2:]), dtype=x.dtype)
    i = 0
    while i + step <= size:
        for j in range(i, i + step):
            acc[0] += x[:, j]
        i += step
        for level in range(1, levels):
            acc[level] += acc[level - 1]
            acc[level - 1] = 0.0
            if i & ((step - 1) << (level * power)):
                break
    for j in range(i, size):
        acc[0] += x[:, j]
    for level in range(1, levels):
        acc[0] += acc[level]
    return acc[0]


def segment_max(x: Array, row_offsets: Array, empty: float = 0.0) -> Array:
    """``out_i = max_{t in row i} x_t`` (``empty`` for a row of length 0); ``(B,)`` in ``x.dtype``."""
    xp = X.namespace(x)
    out = _segment(x, row_offsets, "max")
    return xp.where(row_lengths(row_offsets) > 0, out, xp.asarray(empty, dtype=x.dtype, device=X.dev(x)))


def segment_min(x: Array, row_offsets: Array, empty: float = 0.0) -> Array:
    """``out_i = min_{t in row i} x_t`` (``empty`` for a row of length 0); ``(B,)`` in ``x.dtype``."""
    return -segment_max(-x, row_offsets, empty=-empty)


def broadcast_rows(per_row: Array, row_offsets: Array) -> Array:
    """Repeat a per-row value over the row's tokens: ``(B,) -> (N,)``."""
    return X.repeat(per_row, row_lengths(row_offsets))


def row_last_index(row_offsets: Array) -> Array:
    """Flat index of each row's last token, ``(B,) int64`` (rows have ``L_i >= 1``)."""
    return row_offsets[1:] - 1


def shift_left_in_row(x: Array, row_offsets: Array) -> Array:
    """``out_t = x_{t+1}`` inside a row and ``0`` at each row's last token; ``(N,)``."""
    xp = X.namespace(x)
    out = xp.zeros_like(x)
    out[:-1] = x[1:]
    out[row_last_index(row_offsets)] = 0
    return out


def cumsum_in_row(x: Array, row_offsets: Array) -> Array:
    """Inclusive prefix sum inside every row, ``out_t = Σ_{row start ≤ u ≤ t} x_u``; ``(N,)``.

    The reverse scan run on the flipped tokens (rows reversed and in reverse order), so a row's result depends
    only on the row.
    """
    xp = X.namespace(x)
    flipped_offsets = xp.flip(row_offsets[-1] - row_offsets)
    flipped = xp.flip(x)
    return xp.flip(reverse_linear_scan(xp.ones_like(flipped), flipped, flipped_offsets))


def reverse_linear_scan(a: Array, b: Array, row_offsets: Array) -> Array:
    """Solve ``h_t = b_t + a_t · h_{t+1}`` right to left inside every row, with ``h = 0`` after a row's end.

    a, b: ``(N,)`` float32; returns ``h (N,)``. Masks are encoded by the caller: a skipped token that passes
    the state through has ``a = 1, b = 0``; a reset has ``a = 0``; a kept token has ``a = γ`` (or ``γλ``).
    Where ``a_t = 0`` the result is ``b_t``: nothing from the right enters, not even an inf or a signed zero.

    On the CPU with the native extension built (``NATIVE_SCAN``), the rows are scanned sequentially in C,
    in verl's order and rounding (one float32 multiply, then one add). Elsewhere (a GPU, or no compiler at
    install time) the log-depth scan below runs in float64 and rounds once: in float32 its tree of products
    and sums strayed up to 1.1e-5 from verl's loop on gae returns near 1 (5M-token bench data); in float64
    what is left is the loop's own rounding, a few float32 ulps.
    """
    if _native_runs(_scan, a, b):
        return _native_scan(a, b, row_offsets)
    xp = X.namespace(b)
    if b.dtype == xp.float32:
        return X.float32(log_depth_scan(X.float64(a), X.float64(b), row_offsets))
    return log_depth_scan(a, b, row_offsets)


def _native_scan(a: Array, b: Array, row_offsets: Array) -> Array:
    a_, b_ = (np.ascontiguousarray(X.to_numpy(v)) for v in (a, b))
    offsets = _native_offsets(row_offsets, a_, b_)
    out = np.empty_like(b_)
    _scan.reverse_linear_scan(a_.ctypes.data, b_.ctypes.data, offsets.ctypes.data, offsets.size - 1, out.ctypes.data)
    return X.like(out, b)


def native_gae(mask: Array, rewards: Array, values: Array, row_offsets: Array, gamma: float,
               gamma_lam: float) -> tuple[Array, Array] | None:
    """verl's GAE loop per row in C (see ``estimators.gae`` for the formula): ``(advantages, returns)``,
    ``(N,)`` float32 each, rounded as verl's loop rounds; ``None`` where the C kernel cannot run (no build,
    not a CPU float32 batch)."""
    arrays = (mask, rewards, values)
    if not _native_runs(_scan, *arrays):
        return None
    mask_, rewards_, values_ = (np.ascontiguousarray(X.to_numpy(v)) for v in arrays)
    offsets = _native_offsets(row_offsets, mask_, rewards_, values_)
    advantages, returns = np.empty_like(values_), np.empty_like(values_)
    _scan.gae(mask_.ctypes.data, rewards_.ctypes.data, values_.ctypes.data, offsets.ctypes.data, offsets.size - 1,
              gamma, gamma_lam, advantages.ctypes.data, returns.ctypes.data)
    return X.like(advantages, values), X.like(returns, values)


def _native_runs(module, *arrays: Array) -> bool:
    """The C loops of ``module`` (``_scan``, ``_rows``) take float32 CPU arrays, and only where it was built."""
    return module is not None and all(X.on_cpu(x) and str(x.dtype).endswith("float32") for x in arrays)


def _native_offsets(row_offsets: Array, *arrays: Array) -> np.ndarray:
    """int64 offsets the C loops may trust: from 0 to the token count every array has."""
    offsets = np.ascontiguousarray(X.to_numpy(row_offsets), dtype=np.int64)
    n = int(offsets[-1])
    if int(offsets[0]) != 0 or any(X.numel(x) != n for x in arrays):
        raise ValueError("native scan: offsets must run from 0 to the number of tokens")
    return offsets


def log_depth_scan(a: Array, b: Array, row_offsets: Array) -> Array:
    """``reverse_linear_scan`` without a loop in any language: the path for GPUs.

    Log-depth Hillis-Steele scan over the flat tokens: after step k, ``(A_t, B_t)`` summarises the window
    ``[t, t + 2^k)`` as ``h_t = B_t + A_t · h_{t+2^k}``; windows merge by
    ``(A1, B1) ∘ (A2, B2) = (A1·A2, B1 + A1·B2)``, skipped when ``A1 = 0``. ``A`` is forced to 0 at each
    row's last token, so a window that reaches its row's end takes nothing more and rows never mix. Only products and sums of the
    inputs appear (no division by ``γ^t``), so nothing underflows into inf/NaN. ``ceil(log2 max L_i)`` steps
    of elementwise work; each window's merge tree depends only on offsets relative to ``t``, so a row's
    result is the same wherever it sits.
    """
    xp = X.namespace(a, b)
    n = X.numel(a)
    if n == 0:
        return xp.asarray(b, copy=True)
    A = xp.asarray(a, copy=True)
    A[row_last_index(row_offsets)] = 0.0
    B = xp.asarray(b, copy=True)
    longest = int(xp.max(row_lengths(row_offsets)))
    step = 1
    while step < longest:
        head = n - step  # positions whose window can still grow; the last `step` ones already end their row
        A_new, B_new = xp.empty_like(A), xp.empty_like(B)
        A_new[head:], B_new[head:] = A[head:], B[head:]
        A_new[:head] = A[:head] * A[step:]
        # Where A is 0 (the window already ends its row, or a reset) nothing from the right may enter,
        # not even the sign of a zero from the next row.
        B_new[:head] = xp.where(A[:head] == 0, B[:head], B[:head] + A[:head] * B[step:])
        A, B = A_new, B_new
        step *= 2
    return B


def row_moments(x: Array, mask: Array, row_offsets: Array) -> tuple[Array, Array, Array]:
    """Per-row moments of ``x`` over mask-1 tokens, float64: ``count``, ``sum`` and ``m2 = Σ (x − mean_i)²``; ``(B,)`` each.

    ``x`` is selected (not multiplied) by the mask, so values at mask-0 positions never enter.
    """
    summary = row_summary(x, mask > 0, row_offsets)
    return summary["count"], summary["sum"], summary["m2"]


COMPARE_FIELDS = ("length_ok", "n", "bad", "bad_masked", "nonfinite", "nonfinite_at", "sum", "max", "at", "input",
                  "rladv", "factor", "scaled", "varies", "unrounded_float16", "unrounded_bfloat16")


def compare_native(given: np.ndarray, given_offsets: np.ndarray, got: Array, valid: Array, row_offsets: Array,
                   on_valid: bool, atol: float, rtol: float) -> dict[str, Array] | None:
    """Per row, an input list column (values ``given``, float32 or float64, over ``given_offsets (B+1,)`` from 0)
    against this run's ``got (N,)`` over ``row_offsets``, where ``valid (N,) bool`` is set (``on_valid``) or
    everywhere: one pass in C (``_rows.compare_rows`` says what each of ``COMPARE_FIELDS`` holds), float64
    ``(B,)`` each. None where the C loops are not built or ``got`` is not float32 on the CPU."""
    if not _native_runs(_rows, got) or given.dtype not in (np.float32, np.float64):
        return None
    given = np.ascontiguousarray(given)
    given_offsets = np.ascontiguousarray(given_offsets, dtype=np.int64)
    if given_offsets[0] != 0 or given_offsets[-1] != given.size:
        raise ValueError("compare_native: given_offsets must run from 0 to the number of given values")
    valid_ = np.ascontiguousarray(X.to_numpy(valid), dtype=np.uint8)
    got_ = np.ascontiguousarray(X.to_numpy(got))
    offsets = _native_offsets(row_offsets, got_, valid_)
    out = np.empty((offsets.size - 1, len(COMPARE_FIELDS)), dtype=np.float64)
    _rows.compare_rows(given.ctypes.data, int(given.dtype == np.float64), given_offsets.ctypes.data,
                       got_.ctypes.data, valid_.ctypes.data, offsets.ctypes.data, offsets.size - 1,
                       int(on_valid), atol, rtol, out.ctypes.data)
    return dict(zip(COMPARE_FIELDS, X.like(np.ascontiguousarray(out.T), got)))


SUMMARY_FIELDS = ("count", "sum", "m2", "min", "max", "positive", "negative", "zero", "mass_positive", "mass_negative")


def row_summary(x: Array, valid: Array, row_offsets: Array) -> dict[str, Array]:
    """Per-row summary of ``x (N,)`` over the tokens with ``valid (N,) bool``, float64 ``(B,)`` each
    (``SUMMARY_FIELDS``): ``count``, ``sum``, ``m2 = Σ (x − sum_i / max(count_i, 1))²``, ``min``/``max``
    (±inf for a row without valid tokens), the counts of ``x > 0``, ``x < 0``, ``x == 0``, and the sums of
    the positive and of the negative values. A non-finite valid value makes its row's ``sum`` non-finite.

    One pass per row in C on CPU float32 (``_rows.c``); elsewhere the same sums from segment reductions."""
    if _native_runs(_rows, x):
        valid_ = np.ascontiguousarray(X.to_numpy(valid), dtype=np.uint8)
        x_ = np.ascontiguousarray(X.to_numpy(x))
        offsets = _native_offsets(row_offsets, x_, valid_)
        out = np.empty((offsets.size - 1, len(SUMMARY_FIELDS)), dtype=np.float64)
        _rows.row_summary(x_.ctypes.data, valid_.ctypes.data, offsets.ctypes.data, offsets.size - 1, out.ctypes.data)
        return dict(zip(SUMMARY_FIELDS, X.like(np.ascontiguousarray(out.T), x)))
    xp = X.namespace(x)
    xd = X.float64(x)
    count, total = segment_sum(valid, row_offsets), segment_sum(xp.where(valid, xd, 0.0), row_offsets)
    dev = xp.where(valid, xd - broadcast_rows(total / xp.clip(count, min=1.0), row_offsets), 0.0)
    m2 = segment_sum(dev * dev, row_offsets)
    positive, negative = valid & (x > 0), valid & (x < 0)
    inf = float("inf")
    return {
        "count": count, "sum": total, "m2": m2,
        "min": X.float64(segment_min(xp.where(valid, x, inf), row_offsets, empty=inf)),
        "max": X.float64(segment_max(xp.where(valid, x, -inf), row_offsets, empty=-inf)),
        "positive": segment_sum(positive, row_offsets), "negative": segment_sum(negative, row_offsets),
        "zero": segment_sum(valid & (x == 0), row_offsets),
        "mass_positive": segment_sum(xp.where(positive, x, 0.0), row_offsets),
        "mass_negative": segment_sum(xp.where(negative, x, 0.0), row_offsets),
    }


def combine_moments(count: Array, total: Array, m2: Array) -> tuple[float, float, float]:
    """Merge per-row moments ``(B,)`` (Chan et al.) into ``(N, mean, M2)`` over all rows, in float64.

    ``M2 = Σ m2_i + Σ n_i (mean_i − mean)²``. Reduces whole per-row arrays at once, so the result depends
    on the rows, not on how they were chunked.
    """
    xp = X.namespace(count)
    n = float(xp.sum(count))
    if n == 0:
        return 0.0, 0.0, 0.0
    mean = float(xp.sum(total)) / n
    row_mean = total / xp.clip(count, min=1.0)
    m2_total = float(xp.sum(m2)) + float(xp.sum(count * (row_mean - mean) ** 2))
    return n, mean, m2_total


def masked_whiten(x: Array, mean: Array, var: Array) -> Array:
    """``(x − μ) · rsqrt(var + 1e-8)``: verl's ``masked_whiten`` (shift_mean=True, the 1e-8 inside the root).

    ``μ`` and the unbiased ``var`` are the batch's, float32, given per token ``(N,)`` (rows of several
    batches may share a chunk) or as scalars; ``x (N,)`` float32.
    """
    return (x - mean) * (1.0 / X.namespace(x).sqrt(var + 1e-8))  # rounds as torch.rsqrt on the CPU


def clamped_whiten(x: Array, mean: Array, var: Array, scale: bool = True) -> Array:
    """``(x − μ) · rsqrt(max(var, 1e-8))`` with the biased ``var``: OpenRLHF's whitening of advantages (its
    ``compute_advantages_and_returns``); ``scale`` False: ``x − μ`` only (its ``advantage.no_std_norm``); shapes
    as ``masked_whiten``."""
    return (x - mean) * (1.0 / X.namespace(x).sqrt(X.namespace(x).clip(var, min=1e-8))) if scale else x - mean


def select_rows(keep_row: Array, row_offsets: Array) -> tuple[Array, Array]:
    """Tokens of the rows with ``keep_row (B,) bool``: ``(token_index (M,), new row_offsets (B'+1,))``."""
    xp = X.namespace(row_offsets)
    lengths = row_lengths(row_offsets)
    token_keep = broadcast_rows(keep_row, row_offsets)
    new_offsets = xp.zeros(int(xp.sum(keep_row)) + 1, dtype=row_offsets.dtype, device=X.dev(row_offsets))
    new_offsets[1:] = xp.cumulative_sum(lengths[keep_row])
    return X.flatnonzero(token_keep), new_offsets
