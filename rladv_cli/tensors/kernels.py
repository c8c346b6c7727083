"""Segmented tensor kernels on flat ragged data.

A chunk of ``B`` rows is held flat: every per-token tensor has shape ``(N,)`` with ``N = Σ L_i``, and
``row_offsets (B+1,) int64`` marks where each row starts (Arrow list offsets, rebased to 0). No kernel pads
to ``[B, T]`` and no kernel loops over tokens in Python. Every result for a row depends only on that row's
own values, never on which chunk it sits in or where, so chunked and whole-batch runs agree bit for bit.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

try:  # the C loops (setup.py builds them when a compiler is there)
    from . import _scan
except ImportError:  # pragma: no cover - depends on the install
    _scan = None
try:
    from . import _rows
except ImportError:  # pragma: no cover - depends on the install
    _rows = None

NATIVE_SCAN = _scan is not None


def row_lengths(row_offsets: Tensor) -> Tensor:
    """``L_i = row_offsets[i+1] - row_offsets[i]``; ``(B,) int64``."""
    return row_offsets[1:] - row_offsets[:-1]


def row_ids(row_offsets: Tensor) -> Tensor:
    """Row index of every token: ``(N,) int64`` with ``row_ids[t] = i`` for ``row_offsets[i] <= t < row_offsets[i+1]``."""
    lengths = row_lengths(row_offsets)
    return torch.repeat_interleave(torch.arange(lengths.numel(), device=row_offsets.device), lengths)


def segment_sum(x: Tensor, row_offsets: Tensor) -> Tensor:
    """``out_i = Σ_{t in row i} x_t``, accumulated in float64 and returned as float64; ``(B,)``.

    Float64 accumulation keeps a row sum within one float32 rounding of the exact value, whatever the row
    length, and the result does not depend on the row's neighbours.
    """
    return _sums(x, row_offsets)[0]


def _sums(x: Tensor, row_offsets: Tensor, nonzero: bool = False) -> tuple[Tensor, Tensor | None]:
    """``segment_sum`` of ``x`` and, with ``nonzero``, each row's count of ``x != 0`` (float64 ``(B,)``).
    float32 on the CPU: one pass in C (``_rows.row_sums``) that adds in token order, as torch's float64
    segment reduction does, without a float64 copy of ``x``."""
    rows = row_offsets.numel() - 1
    if _native_runs(_rows, x):
        offsets = _native_offsets(row_offsets, x)
        sums = torch.empty(rows, dtype=torch.float64)
        counts = torch.empty(rows, dtype=torch.float64) if nonzero else None
        _rows.row_sums(x.contiguous().data_ptr(), offsets.data_ptr(), rows, sums.data_ptr(),
                       0 if counts is None else counts.data_ptr())
        return sums, counts
    if x.numel() == 0:
        zeros = torch.zeros(rows, dtype=torch.float64, device=x.device)
        return zeros, zeros.clone() if nonzero else None
    sums = torch.segment_reduce(x.double(), "sum", offsets=row_offsets, unsafe=True)
    return sums, torch.segment_reduce((x != 0).double(), "sum", offsets=row_offsets, unsafe=True) if nonzero else None


def padded_row_sum(x: Tensor, row_offsets: Tensor, width: Tensor) -> Tensor:
    """``Σ_t x[i,t]`` in float32 exactly as verl sums a row of a ``[B, T]`` tensor right-padded with zeros to
    ``T = width[i]`` (the longest response of the row's batch); ``(B,)``.

    torch's float32 sum is a vectorised cascade whose rounding depends on the padded width, and in a
    low-variance group a 1-ulp change of ``R_i`` moves a std-normalised advantage by up to ~1e-3. Summing
    the same zero-padded rows reproduces verl bit for bit. On the CPU the sum runs on one thread: torch
    splits long single rows across threads, which would make a row's total depend on its chunk; one
    thread gives what a many-row batch gives.

    A row with at most one non-zero value sums to that value (or +0.0) in any order, so only rows with
    two or more are padded and summed. Tensors on another device are summed on the CPU and the totals moved
    back: a GPU's float32 reduction order is not the CPU's, and on an H200 that moved grpo's advantages in
    low-variance groups of the multiturn sample by up to 4e-5, beyond the CPU/GPU bound of 1e-5.
    """
    if x.device.type != "cpu":
        return padded_row_sum(x.cpu(), row_offsets.cpu(), width.cpu()).to(x.device)
    lengths = row_lengths(row_offsets)
    total, nonzero = _sums(x, row_offsets, nonzero=True)
    out = total.to(x.dtype).masked_fill_(nonzero == 0, 0.0)
    several = nonzero > 1
    for w in torch.unique(width[several]).tolist():
        rows = torch.nonzero(several & (width == w)).flatten()
        # Pad at most ~16M values at once: a long row in the batch must not blow up memory.
        step = max(1, PADDED_SUM_BUDGET // int(w))
        for part in rows.split(step):
            keep = torch.zeros_like(lengths, dtype=torch.bool).index_fill_(0, part, True)
            tokens, offsets = select_rows(keep, row_offsets)
            padded = torch.zeros(part.numel(), int(w), dtype=x.dtype, device=x.device)
            local = row_ids(offsets)
            padded[local, torch.arange(tokens.numel(), device=x.device) - offsets[local]] = x[tokens]
            with _one_thread(x.device):
                out[part] = padded.sum(dim=1)
    return out


PADDED_SUM_BUDGET = 1 << 24


class _one_thread:
    """Run torch CPU ops on one thread inside the block (no-op on other devices)."""

    def __init__(self, device: torch.device):
        self.cpu = device.type == "cpu"

    def __enter__(self) -> None:
        if self.cpu:
            self.threads = torch.get_num_threads()
            torch.set_num_threads(1)

    def __exit__(self, *exc) -> None:
        if self.cpu:
            torch.set_num_threads(self.threads)


def segment_max(x: Tensor, row_offsets: Tensor, empty: float = 0.0) -> Tensor:
    """``out_i = max_{t in row i} x_t`` (``empty`` for a row of length 0); ``(B,)`` in ``x.dtype``."""
    out = torch.segment_reduce(x, "max", offsets=row_offsets, unsafe=True, initial=float("-inf"))
    return torch.where(row_lengths(row_offsets) > 0, out, torch.full_like(out, empty))


def segment_min(x: Tensor, row_offsets: Tensor, empty: float = 0.0) -> Tensor:
    """``out_i = min_{t in row i} x_t`` (``empty`` for a row of length 0); ``(B,)`` in ``x.dtype``."""
    return -segment_max(-x, row_offsets, empty=-empty)


def broadcast_rows(per_row: Tensor, row_offsets: Tensor) -> Tensor:
    """Repeat a per-row value over the row's tokens: ``(B,) -> (N,)``. On the CPU through ``numpy.repeat``:
    no index array, and several times faster than ``torch.repeat_interleave`` there."""
    if per_row.device.type == "cpu" and not per_row.requires_grad:
        return torch.from_numpy(np.repeat(per_row.numpy(), row_lengths(row_offsets).cpu().numpy()))
    return torch.repeat_interleave(per_row, row_lengths(row_offsets), output_size=int(row_offsets[-1]))


def row_last_index(row_offsets: Tensor) -> Tensor:
    """Flat index of each row's last token, ``(B,) int64`` (rows have ``L_i >= 1``)."""
    return row_offsets[1:] - 1


def shift_left_in_row(x: Tensor, row_offsets: Tensor) -> Tensor:
    """``out_t = x_{t+1}`` inside a row and ``0`` at each row's last token; ``(N,)``."""
    out = torch.zeros_like(x)
    out[:-1] = x[1:]
    out[row_last_index(row_offsets)] = 0
    return out


def cumsum_in_row(x: Tensor, row_offsets: Tensor) -> Tensor:
    """Inclusive prefix sum inside every row, ``out_t = Σ_{row start ≤ u ≤ t} x_u``; ``(N,)``.

    The reverse scan run on the flipped tokens (rows reversed and in reverse order), so a row's result depends
    only on the row.
    """
    flipped_offsets = (row_offsets[-1] - row_offsets).flip(0)
    flipped = x.flip(0)
    return reverse_linear_scan(torch.ones_like(flipped), flipped, flipped_offsets).flip(0)


def reverse_linear_scan(a: Tensor, b: Tensor, row_offsets: Tensor) -> Tensor:
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
    if b.dtype == torch.float32:
        return log_depth_scan(a.double(), b.double(), row_offsets).float()
    return log_depth_scan(a, b, row_offsets)


def _native_scan(a: Tensor, b: Tensor, row_offsets: Tensor) -> Tensor:
    a, b = a.contiguous(), b.contiguous()
    offsets = _native_offsets(row_offsets, a, b)
    out = torch.empty_like(b)
    _scan.reverse_linear_scan(a.data_ptr(), b.data_ptr(), offsets.data_ptr(), offsets.numel() - 1, out.data_ptr())
    return out


def native_gae(mask: Tensor, rewards: Tensor, values: Tensor, row_offsets: Tensor, gamma: float,
               gamma_lam: float) -> tuple[Tensor, Tensor] | None:
    """verl's GAE loop per row in C (see ``estimators.gae`` for the formula): ``(advantages, returns)``,
    ``(N,)`` float32 each, rounded as verl's loop rounds; ``None`` where the C kernel cannot run (no build,
    not a CPU float32 batch)."""
    tensors = (mask, rewards, values)
    if not _native_runs(_scan, *tensors):
        return None
    mask, rewards, values = (x.contiguous() for x in tensors)
    offsets = _native_offsets(row_offsets, *tensors)
    advantages, returns = torch.empty_like(values), torch.empty_like(values)
    _scan.gae(mask.data_ptr(), rewards.data_ptr(), values.data_ptr(), offsets.data_ptr(), offsets.numel() - 1,
              gamma, gamma_lam, advantages.data_ptr(), returns.data_ptr())
    return advantages, returns


def _native_runs(module, *tensors: Tensor) -> bool:
    """The C loops of ``module`` (``_scan``, ``_rows``) take float32 CPU tensors, and only where it was built."""
    return module is not None and all(x.device.type == "cpu" and x.dtype == torch.float32 for x in tensors)


def _native_offsets(row_offsets: Tensor, *tensors: Tensor) -> Tensor:
    """int64 offsets the C loops may trust: from 0 to the token count every tensor has."""
    offsets = row_offsets.to(torch.int64).contiguous()
    n = int(offsets[-1])
    if int(offsets[0]) != 0 or any(x.numel() != n for x in tensors):
        raise ValueError("native scan: offsets must run from 0 to the number of tokens")
    return offsets


def log_depth_scan(a: Tensor, b: Tensor, row_offsets: Tensor) -> Tensor:
    """``reverse_linear_scan`` without a loop in any language: the path for GPUs.

    Log-depth Hillis-Steele scan over the flat tokens: after step k, ``(A_t, B_t)`` summarises the window
    ``[t, t + 2^k)`` as ``h_t = B_t + A_t · h_{t+2^k}``; windows merge by
    ``(A1, B1) ∘ (A2, B2) = (A1·A2, B1 + A1·B2)``, skipped when ``A1 = 0``. ``A`` is forced to 0 at each
    row's last token, so a window that reaches its row's end takes nothing more and rows never mix. Only products and sums of the
    inputs appear (no division by ``γ^t``), so nothing underflows into inf/NaN. ``ceil(log2 max L_i)`` steps
    of elementwise work; each window's merge tree depends only on offsets relative to ``t``, so a row's
    result is the same wherever it sits.
    """
    n = a.numel()
    if n == 0:
        return b.clone()
    A = a.clone()
    A[row_last_index(row_offsets)] = 0.0
    B = b.clone()
    longest = int(row_lengths(row_offsets).max())
    step = 1
    while step < longest:
        head = n - step  # positions whose window can still grow; the last `step` ones already end their row
        A_new, B_new = torch.empty_like(A), torch.empty_like(B)
        A_new[head:], B_new[head:] = A[head:], B[head:]
        torch.mul(A[:head], A[step:], out=A_new[:head])
        # Where A is 0 (the window already ends its row, or a reset) nothing from the right may enter,
        # not even the sign of a zero from the next row.
        torch.where(A[:head] == 0, B[:head], B[:head] + A[:head] * B[step:], out=B_new[:head])
        A, B = A_new, B_new
        step *= 2
    return B


def row_moments(x: Tensor, mask: Tensor, row_offsets: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Per-row moments of ``x`` over mask-1 tokens, float64: ``count``, ``sum`` and ``m2 = Σ (x − mean_i)²``; ``(B,)`` each.

    ``x`` is selected (not multiplied) by the mask, so values at mask-0 positions never enter.
    """
    summary = row_summary(x, mask > 0, row_offsets)
    return summary["count"], summary["sum"], summary["m2"]


COMPARE_FIELDS = ("length_ok", "n", "bad", "bad_masked", "nonfinite", "nonfinite_at", "sum", "max", "at", "input",
                  "rladv", "factor", "scaled", "varies", "unrounded_float16", "unrounded_bfloat16")


def compare_native(given: np.ndarray, given_offsets: np.ndarray, got: Tensor, valid: Tensor, row_offsets: Tensor,
                   on_valid: bool, atol: float, rtol: float) -> dict[str, Tensor] | None:
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
    valid = valid.to(torch.uint8).contiguous()
    offsets = _native_offsets(row_offsets, got, valid)
    out = torch.empty(offsets.numel() - 1, len(COMPARE_FIELDS), dtype=torch.float64)
    _rows.compare_rows(given.ctypes.data, int(given.dtype == np.float64), given_offsets.ctypes.data,
                       got.contiguous().data_ptr(), valid.data_ptr(), offsets.data_ptr(), offsets.numel() - 1,
                       int(on_valid), atol, rtol, out.data_ptr())
    return dict(zip(COMPARE_FIELDS, out.T))


SUMMARY_FIELDS = ("count", "sum", "m2", "min", "max", "positive", "negative", "zero", "mass_positive", "mass_negative")


def row_summary(x: Tensor, valid: Tensor, row_offsets: Tensor) -> dict[str, Tensor]:
    """Per-row summary of ``x (N,)`` over the tokens with ``valid (N,) bool``, float64 ``(B,)`` each
    (``SUMMARY_FIELDS``): ``count``, ``sum``, ``m2 = Σ (x − sum_i / max(count_i, 1))²``, ``min``/``max``
    (±inf for a row without valid tokens), the counts of ``x > 0``, ``x < 0``, ``x == 0``, and the sums of
    the positive and of the negative values. A non-finite valid value makes its row's ``sum`` non-finite.

    One pass per row in C on CPU float32 (``_rows.c``); elsewhere the same sums from segment reductions."""
    if _native_runs(_rows, x):
        valid = valid.to(torch.uint8).contiguous()
        offsets = _native_offsets(row_offsets, x, valid)
        out = torch.empty(offsets.numel() - 1, len(SUMMARY_FIELDS), dtype=torch.float64)
        _rows.row_summary(x.contiguous().data_ptr(), valid.data_ptr(), offsets.data_ptr(), offsets.numel() - 1,
                          out.data_ptr())
        return dict(zip(SUMMARY_FIELDS, out.T))
    xm = torch.where(valid, x.double(), 0.0)
    count, total = segment_sum(valid, row_offsets), segment_sum(xm, row_offsets)
    dev = torch.where(valid, x.double() - broadcast_rows(total / count.clamp_min(1.0), row_offsets), 0.0)
    m2 = segment_sum(dev * dev, row_offsets)
    positive, negative = valid & (x > 0), valid & (x < 0)
    inf = torch.tensor(float("inf"), device=x.device)
    return {
        "count": count, "sum": total, "m2": m2,
        "min": segment_min(torch.where(valid, x, inf), row_offsets, empty=float("inf")).double(),
        "max": segment_max(torch.where(valid, x, -inf), row_offsets, empty=float("-inf")).double(),
        "positive": segment_sum(positive, row_offsets), "negative": segment_sum(negative, row_offsets),
        "zero": segment_sum(valid & (x == 0), row_offsets),
        "mass_positive": segment_sum(torch.where(positive, x, 0.0), row_offsets),
        "mass_negative": segment_sum(torch.where(negative, x, 0.0), row_offsets),
    }


def combine_moments(count: Tensor, total: Tensor, m2: Tensor) -> tuple[float, float, float]:
    """Merge per-row moments ``(B,)`` (Chan et al.) into ``(N, mean, M2)`` over all rows, in float64.

    ``M2 = Σ m2_i + Σ n_i (mean_i − mean)²``. Reduces whole per-row arrays at once, so the result depends
    on the rows, not on how they were chunked.
    """
    n = float(count.sum())
    if n == 0:
        return 0.0, 0.0, 0.0
    mean = float(total.sum()) / n
    row_mean = total / count.clamp_min(1.0)
    m2_total = float(m2.sum()) + float((count * (row_mean - mean) ** 2).sum())
    return n, mean, m2_total


def masked_whiten(x: Tensor, mean: Tensor, var: Tensor) -> Tensor:
    """``(x − μ) · rsqrt(var + 1e-8)``: verl's ``masked_whiten`` (shift_mean=True, the 1e-8 inside the root).

    ``μ`` and the unbiased ``var`` are the batch's, float32, given per token ``(N,)`` (rows of several
    batches may share a chunk) or as scalars; ``x (N,)`` float32.
    """
    return (x - mean) * torch.rsqrt(var + 1e-8)


def clamped_whiten(x: Tensor, mean: Tensor, var: Tensor, scale: bool = True) -> Tensor:
    """``(x − μ) · rsqrt(max(var, 1e-8))`` with the biased ``var``: OpenRLHF's whitening of advantages (its
    ``compute_advantages_and_returns``); ``scale`` False: ``x − μ`` only (its ``advantage.no_std_norm``); shapes
    as ``masked_whiten``."""
    return (x - mean) * var.clamp(min=1e-8).rsqrt() if scale else x - mean


def select_rows(keep_row: Tensor, row_offsets: Tensor) -> tuple[Tensor, Tensor]:
    """Tokens of the rows with ``keep_row (B,) bool``: ``(token_index (M,), new row_offsets (B'+1,))``."""
    lengths = row_lengths(row_offsets)
    token_keep = broadcast_rows(keep_row, row_offsets)
    new_offsets = torch.zeros(int(keep_row.sum()) + 1, dtype=row_offsets.dtype, device=row_offsets.device)
    new_offsets[1:] = torch.cumsum(lengths[keep_row], 0)
    return torch.nonzero(token_keep).flatten(), new_offsets
