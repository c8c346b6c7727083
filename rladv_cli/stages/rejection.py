"""Rollout correction (docs/semantics.md §5, verl 0.9.1): rejection keep-masks, IS weights and their metrics.

Tokens are flat (numpy or torch arrays, docs/arrays.md): per-token arrays are ``(N,)`` float32,
``row_offsets (B+1,)`` int64, ``m0`` is the original ``response_mask`` as float32 0/1.
``ℓ = old_log_probs − rollout_log_probs`` and ``ℓs = clamp(ℓ, −20, 20)``. Per-token arithmetic stays in float32
as in verl (a Python threshold is rounded to float32 when it meets an array); row sums are float64
(``segment_sum``) rounded to float32 where verl holds a float32 row value. Batch metrics are reduced from
per-row arrays with ``math.fsum``, so they do not depend on chunking.
"""
from __future__ import annotations

import math

import numpy as np

# The settings' side (options, thresholds, their parsing) lives in ``config.correction`` (no torch), which checks
# them when a run's settings are built.
from ..config.correction import ImportanceSampling, RejectionRule
from ..errors import ComputeError
from ..tensors import xp as X
from ..tensors.kernels import broadcast_rows, segment_max, segment_min, segment_sum
from ..tensors.xp import Array

SAFETY_BOUND = 20.0
_IS_THR = "--rollout-is-threshold"

__all__ = ["rejection_keep", "importance_weights", "RolloutCorrectionStats"]


# ------------------------------------------------------------------------------------------- per-row kernels


def _row_sum(x: Array, m0: Array, row_offsets: Array) -> Array:
    """``masked_sum(x, m0, row)``: ``Σ_t x_t`` over ``m0 = 1`` (a select: off-mask values never leak); ``(B,)`` f64."""
    xp = X.namespace(x)
    return segment_sum(xp.where(m0 > 0, x, xp.zeros_like(x)), row_offsets)


def _row_mean(x: Array, m0: Array, row_offsets: Array, n32: Array) -> Array:
    """``masked_mean(x, m0, row) = f32(Σ) / (n_i + 1e-8)`` in float32 (0 for a row without valid token); ``(B,)``."""
    return X.float32(_row_sum(x, m0, row_offsets)) / (n32 + 1e-8)


def _row_extreme(x: Array, valid: Array, row_offsets: Array, largest: bool) -> Array:
    """Max (or min) over a row's valid tokens, ``∓inf`` for a row without one; ``(B,)`` float32."""
    fill = float("-inf") if largest else float("inf")
    xp = X.namespace(x)
    x = xp.where(valid, x, xp.full_like(x, fill))
    return segment_max(x, row_offsets, empty=fill) if largest else segment_min(x, row_offsets, empty=fill)


def _row_count(flag: Array, row_offsets: Array) -> Array:
    """Number of ``True`` tokens per row, ``(B,)`` float64 (exact)."""
    return segment_sum(X.float32(flag), row_offsets)


def _safe_log_ratio(old_log_probs: Array, rollout_log_probs: Array) -> tuple[Array, Array]:
    """``ℓ = old − rollout`` and ``ℓs = clamp(ℓ, −20, 20)``, both ``(N,)`` float32."""
    lr = old_log_probs - rollout_log_probs
    return lr, X.namespace(lr).clip(lr, min=-SAFETY_BOUND, max=SAFETY_BOUND)


def _token_stat(stat: str, ls: Array) -> Array:
    """``k1 = −ℓs``, ``k2 = 0.5·ℓs²``, ``k3 = (exp(ℓs) − 1) − ℓs`` (verl's operation order); ``(N,)``."""
    if stat == "k1":
        return -ls
    xp = X.namespace(ls)
    if stat == "k2":
        return 0.5 * xp.square(ls)
    return X.exp32(ls) - 1.0 - ls


def _evaluate_rule(rule: RejectionRule, ls: Array, m0: Array, row_offsets: Array, n32: Array):
    """``(stat_t (N,), row_stat (B,) | None, keep (N,) bool)`` for one rule; row stats broadcast to tokens.

    Row aggregates use ``m0``: sum and mean as ``masked_sum``/``masked_mean``, max over valid tokens (0 if none).
    Bounds are compared in float32, as verl compares a float32 tensor with a Python float (numpy 2 does too).
    """
    xp = X.namespace(ls)
    k = _token_stat(rule.stat, ls)
    row_stat = None
    if rule.agg == "sum":
        row_stat = X.float32(_row_sum(k, m0, row_offsets))
    elif rule.agg == "mean":
        row_stat = _row_mean(k, m0, row_offsets, n32)
    elif rule.agg == "max":
        row_max = _row_extreme(k, m0 > 0, row_offsets, largest=True)
        row_stat = xp.where(row_max == -math.inf, xp.zeros_like(row_max), row_max)
    x = k if row_stat is None else row_stat
    ok = x <= rule.upper
    if rule.lower is not None:
        ok = ok & (x >= rule.lower)
    if row_stat is None:
        return k, None, ok
    return broadcast_rows(row_stat, row_offsets), row_stat, broadcast_rows(ok, row_offsets)


def rejection_keep(
    rules: tuple[RejectionRule, ...] | list[RejectionRule],
    old_log_probs: Array,
    rollout_log_probs: Array,
    m0: Array,
    row_offsets: Array,
) -> tuple[Array, dict[str, Array]]:
    """``keep = Π_o keep_o`` (AND of all rules), ``(N,)`` float32 0/1, and ``{option: keep_o (N,)}``.

    A sequence rule's verdict covers the whole row. The caller forms ``m = m0 · keep``.
    """
    _, ls = _safe_log_ratio(old_log_probs, rollout_log_probs)
    n32 = X.float32(segment_sum(m0, row_offsets))
    keep = X.namespace(ls).ones_like(ls)
    per_option: dict[str, Array] = {}
    for rule in rules:
        keep_o = X.float32(_evaluate_rule(rule, ls, m0, row_offsets, n32)[2])
        per_option[rule.option] = keep_o
        keep = keep * keep_o
    return keep, per_option


def _raw_and_applied_weights(cfg: ImportanceSampling, lr: Array, m0: Array, row_offsets: Array):
    """``(w_raw, w, S)``: ``w_raw = exp(ℓs)·m0`` (token) or ``exp(clamp(S_i, ±20))·m0`` (sequence, ``S_i`` the
    unclamped masked row sum of ``ℓ``); ``w = min(w_raw, thr)`` (TIS) or ``w_raw·[lo ≤ w_raw ≤ hi]`` (IcePop).
    ``S (B,)`` float32 is returned for the sequence metrics (None at token level)."""
    xp = X.namespace(lr)
    if cfg.level == "token":
        S = None
        raw = X.exp32(xp.clip(lr, min=-SAFETY_BOUND, max=SAFETY_BOUND)) * m0
    else:
        S = X.float32(_row_sum(lr, m0, row_offsets))
        raw = broadcast_rows(X.exp32(xp.clip(S, min=-SAFETY_BOUND, max=SAFETY_BOUND)), row_offsets) * m0
    if cfg.band is None:
        return raw, xp.clip(raw, max=cfg.threshold), S
    lo, hi = cfg.band
    return raw, xp.where((raw >= lo) & (raw <= hi), raw, xp.zeros_like(raw)), S


def importance_weights(
    cfg: ImportanceSampling,
    old_log_probs: Array,
    rollout_log_probs: Array,
    m0: Array,
    row_offsets: Array,
    norm_factor: float | Array | None = None,
) -> Array:
    """``rollout_is_weights (N,)`` float32: truncated (TIS) or IcePop weights on ``m0``, divided by ``norm_factor``
    (``RolloutCorrectionStats.norm_factor()``; a per-token ``(N,)`` array when rows of several batches share
    a chunk) when ``cfg.batch_normalize``. Rejected tokens keep their weight."""
    lr, _ = _safe_log_ratio(old_log_probs, rollout_log_probs)
    w = _raw_and_applied_weights(cfg, lr, m0, row_offsets)[1]
    if cfg.batch_normalize:
        if norm_factor is None:
            raise ValueError("batch-normalised IS weights need norm_factor from RolloutCorrectionStats")
        w = w / norm_factor
    return w


# -------------------------------------------------------------------------------------------- batch metrics


def _f32(x: float) -> np.float32:
    return np.float32(x)


def _masked_mean(total: float, count: float) -> np.float32:
    """Batch ``masked_mean`` from an exact total: ``f32(Σ) / (f32(count) + 1e-8)`` in float32."""
    return _f32(total) / (_f32(count) + _f32(1e-8))


def _fsum(a: np.ndarray) -> float:
    return math.fsum(a.tolist())


def _mean(a: np.ndarray) -> np.float32:
    """``a.mean()`` of float32 row values, from the exact sum."""
    return _f32(_fsum(a) / a.size)


def _std(a: np.ndarray) -> np.float32:
    """Unbiased ``a.std()`` (two-pass in float64), 0 for ≤ 1 value."""
    if a.size <= 1:
        return _f32(0.0)
    mu = _fsum(a) / a.size
    return _f32(math.sqrt(_fsum((a - mu) ** 2) / (a.size - 1)))


def _clamped_std(csum: float, c2sum: float, count: float) -> np.float32:
    """``sqrt(max(E[c²] − E[c]², 0))`` over ``m0`` in float32 (verl's form), 0 when ``count ≤ 1``."""
    if count <= 1:
        return _f32(0.0)
    mean_c = _masked_mean(csum, count)
    var = _masked_mean(c2sum, count) - mean_c * mean_c
    return np.sqrt(max(var, _f32(0.0)))


class RolloutCorrectionStats:
    """Batch-level accumulator of every docs/semantics.md §5.4 metric (verl 0.9.1), fed chunk by chunk.

    ``update`` reduces each chunk to per-row values (float64 row sums, counts, row extrema, float32 row
    statistics) and keeps them; ``metrics``/``norm_factor`` reduce the concatenated rows with exact sums, so the
    result is independent of how rows are split into chunks. IS metrics describe the weights before batch
    normalisation (as verl reports them), so one pass of ``update`` over all chunks suffices.
    """

    def __init__(self, rules: tuple[RejectionRule, ...] | list[RejectionRule], is_cfg: ImportanceSampling | None):
        self.rules = tuple(rules)
        self.is_cfg = is_cfg
        self._keys: list[str] | None = None
        self._chunks: list[np.ndarray] = []

    # -- accumulation

    def merge(self, other: "RolloutCorrectionStats") -> None:
        """Append the rows ``other`` gathered (the next shard's), as if they had been fed here."""
        self._keys = self._keys or other._keys
        self._chunks.extend(other._chunks)

    def update(self, old_log_probs: Array, rollout_log_probs: Array, m0: Array, row_offsets: Array) -> None:
        """Add one chunk of rows: ``(N,)`` float32 log-probs and ``m0``, ``row_offsets (B+1,)``."""
        if X.numel(row_offsets) <= 1:
            return
        xp = X.namespace(old_log_probs, rollout_log_probs, m0)
        cols: dict[str, Array] = {}
        lr, ls = _safe_log_ratio(old_log_probs, rollout_log_probs)
        valid = m0 > 0
        n = segment_sum(m0, row_offsets)
        n32 = X.float32(n)
        cols["n"] = n
        self._offpolicy_rows(cols, old_log_probs, rollout_log_probs, lr, ls, m0, row_offsets, n32)
        keep = xp.ones_like(valid)
        for rule in self.rules:
            keep = keep & self._rule_rows(cols, rule, ls, m0, valid, row_offsets, n32)
        cols["rs/rejected"] = _row_count(~keep & valid, row_offsets)
        if self.is_cfg is not None:
            self._is_rows(cols, lr, m0, valid, row_offsets, n32)
        keys = list(cols)
        if self._keys is None:
            self._keys = keys
        # One stacked transfer per chunk; float32 values and counts are exact in float64.
        self._chunks.append(X.to_numpy(xp.stack([X.float64(cols[k]) for k in keys])))

    @staticmethod
    def _offpolicy_rows(cols, old, rollout, lr, ls, m0, row_offsets, n32) -> None:
        """Per-row pieces of the off-policy diagnostics: row mean log-probs, ``S_i``, token sums over ``m0``."""
        xp = X.namespace(lr)
        lp_old = _row_mean(old, m0, row_offsets, n32)
        lp_roll = _row_mean(rollout, m0, row_offsets, n32)
        S = X.float32(_row_sum(lr, m0, row_offsets))
        diff = lp_roll - lp_old
        cols["lp_old"] = lp_old
        cols["lp_roll"] = lp_roll
        cols["ppl_old"] = X.exp32(-lp_old)
        cols["ppl_roll"] = X.exp32(-lp_roll)
        cols["log_ppl_diff"] = diff
        cols["ppl_ratio"] = X.exp32(diff)
        cols["S"] = S
        cols["rho2_seq"] = X.exp32(2.0 * xp.clip(S, min=-SAFETY_BOUND, max=SAFETY_BOUND))
        cols["kl_sum"] = _row_sum(rollout - old, m0, row_offsets)
        cols["k3_kl_sum"] = _row_sum(X.exp32(lr) - lr - 1.0, m0, row_offsets)
        cols["rho2_sum"] = _row_sum(xp.square(X.exp32(ls)), m0, row_offsets)

    @staticmethod
    def _rule_rows(cols, rule: RejectionRule, ls, m0, valid, row_offsets, n32) -> Array:
        """Per-row pieces of ``rollout_rs_<option>_*``; returns the rule's token keep (bool)."""
        stat_t, row_stat, keep = _evaluate_rule(rule, ls, m0, row_offsets, n32)
        row_val = row_stat if row_stat is not None else _row_mean(stat_t, m0, row_offsets, n32)
        lower = rule.lower if rule.lower is not None else 0.0
        xp = X.namespace(stat_t)
        clamped = xp.clip(stat_t, min=lower, max=rule.upper)
        p = f"rs/{rule.option}/"
        cols[p + "sum"] = _row_sum(stat_t, m0, row_offsets)
        cols[p + "csum"] = _row_sum(clamped, m0, row_offsets)
        cols[p + "c2sum"] = _row_sum(xp.square(clamped), m0, row_offsets)
        cols[p + "row"] = row_val
        cols[p + "row_high"] = row_val > rule.upper
        if rule.lower is not None:
            cols[p + "row_low"] = row_val < rule.lower
        if rule.is_token:  # a sequence rule's extrema and fractions come from the row values instead
            cols[p + "max"] = _row_extreme(stat_t, valid, row_offsets, largest=True)
            cols[p + "min"] = _row_extreme(stat_t, valid, row_offsets, largest=False)
            cols[p + "tok_high"] = _row_count((stat_t > rule.upper) & valid, row_offsets)
            if rule.lower is not None:
                cols[p + "tok_low"] = _row_count((stat_t < rule.lower) & valid, row_offsets)
        cols[p + "rejected"] = _row_count(~keep & valid, row_offsets)
        return keep

    def _is_rows(self, cols, lr, m0, valid, row_offsets, n32) -> None:
        """Per-row pieces of ``rollout_is_*``: sums of applied/clamped weights, raw-weight counts, row means."""
        cfg = self.is_cfg
        raw, w, S = _raw_and_applied_weights(cfg, lr, m0, row_offsets)
        upper, lower = cfg.upper, cfg.lower
        xp = X.namespace(w)
        clamped = xp.clip(w, min=0.0, max=upper)
        q = _row_mean(w, m0, row_offsets, n32)
        q_raw = _row_mean(raw, m0, row_offsets, n32)
        cols["is/w_sum"] = _row_sum(w, m0, row_offsets)
        cols["is/csum"] = _row_sum(clamped, m0, row_offsets)
        cols["is/c2sum"] = _row_sum(xp.square(clamped), m0, row_offsets)
        cols["is/q"] = q
        cols["is/q_dev"] = xp.abs(q - 1.0)
        cols["is/q_high"] = q_raw > upper
        cols["is/q_low"] = q_raw < lower
        if cfg.level == "token":
            cols["is/max"] = _row_extreme(w, valid, row_offsets, largest=True)
            cols["is/min"] = _row_extreme(w, valid, row_offsets, largest=False)
            cols["is/tok_high"] = _row_count((raw > upper) & valid, row_offsets)
            cols["is/tok_low"] = _row_count((raw < lower) & valid, row_offsets)
        else:
            # verl compares S_i with log thresholds taken in float32.
            log_upper = X.log32(xp.asarray(upper, dtype=xp.float32, device=X.dev(S)))
            log_lower = X.log32(xp.asarray(lower, dtype=xp.float32, device=X.dev(S)))
            cols["is/row_high"] = S > log_upper
            cols["is/row_low"] = S < log_lower
        if cfg.band is not None:
            cols["is/oob"] = _row_count(((raw < lower) | (raw > upper)) & valid, row_offsets)

    # -- reduction

    def _rows(self) -> dict[str, np.ndarray]:
        """Concatenated per-row arrays (float64), one per accumulated quantity."""
        if not self._chunks:
            raise ComputeError("rollout correction: the batch has no row")
        table = np.concatenate(self._chunks, axis=1)
        rows = dict(zip(self._keys, table))
        if _fsum(rows["n"]) == 0:
            raise ComputeError(
                "rollout correction: response_mask has no valid token (1) in the batch; verl 0.9.1 raises here"
            )
        return rows

    def norm_factor(self) -> float | None:
        """IS batch-normalisation ``μ`` (docs/semantics.md §5.2) or None when not normalising; 1.0 when ``μ ≤ 1e-8``.

        token: ``μ = masked_mean(w, m0)``; sequence: ``μ = Σ_i q_i / max(#valid rows, 1e-8)``.
        """
        if self.is_cfg is None or not self.is_cfg.batch_normalize:
            return None
        return self._norm_factor(self._rows())

    def _norm_factor(self, rows: dict[str, np.ndarray]) -> float:
        if self.is_cfg.level == "token":
            mu = _masked_mean(_fsum(rows["is/w_sum"]), _fsum(rows["n"]))
        else:
            valid_rows = _f32(np.count_nonzero(rows["n"]))
            mu = _f32(_fsum(rows["is/q"][rows["n"] > 0])) / max(valid_rows, _f32(1e-8))
        return float(mu) if mu > _f32(1e-8) else 1.0

    def metrics(self) -> dict[str, float]:
        """Every docs/semantics.md §5.4 metric of verl 0.9.1 (keys without ``rollout_corr/``), in verl's order: IS, RS, off-policy."""
        rows = self._rows()
        out: dict[str, np.floating | float] = {}
        if self.is_cfg is not None:
            out.update(self._is_metrics(rows))
        for rule in self.rules:
            out.update(_rule_metrics(rule, rows))
        if self.rules:
            n = rows["n"]
            rejected_rows = np.count_nonzero(rows["rs/rejected"] > 0)
            out["rollout_rs_masked_fraction"] = _masked_mean(_fsum(rows["rs/rejected"]), _fsum(n))
            out["rollout_rs_seq_masked_fraction"] = _f32(rejected_rows) / _f32(n.size)
        out.update(_offpolicy_metrics(rows))
        return {key: float(value) for key, value in out.items()}

    def _is_metrics(self, rows: dict[str, np.ndarray]) -> dict[str, np.floating | float]:
        """``rollout_is_*`` (verl 0.9.1): mean/max/min/std/ESS/seq_* from the applied weights (std/ESS clamped to
        ``[0, upper]``), high/low fractions from the raw weights (sequence level: from ``S_i`` over all rows)."""
        cfg = self.is_cfg
        n = rows["n"]
        count = _fsum(n)
        valid = n > 0
        m: dict[str, np.floating | float] = {}
        if cfg.level == "sequence":
            S = np.array([rows["S"].min(), rows["S"].max()], dtype=np.float32)
            m["rollout_is_max"] = float(X.exp32(np.minimum(S[1], np.float32(SAFETY_BOUND))))
            m["rollout_is_min"] = float(X.exp32(S[0]))
            m["rollout_is_mean"] = _masked_mean(_fsum(rows["is/w_sum"]), count)
            m["rollout_is_ratio_fraction_high"] = _mean(rows["is/row_high"])
            m["rollout_is_ratio_fraction_low"] = _mean(rows["is/row_low"])
        else:
            m["rollout_is_mean"] = _masked_mean(_fsum(rows["is/w_sum"]), count)
            m["rollout_is_ratio_fraction_high"] = _masked_mean(_fsum(rows["is/tok_high"]), count)
            m["rollout_is_ratio_fraction_low"] = _masked_mean(_fsum(rows["is/tok_low"]), count)
            m["rollout_is_max"] = _f32(rows["is/max"][valid].max())
            m["rollout_is_min"] = _f32(rows["is/min"][valid].min())
        csum, c2sum = _fsum(rows["is/csum"]), _fsum(rows["is/c2sum"])
        m["rollout_is_std"] = _clamped_std(csum, c2sum, count)
        # ESS = 1 / masked_mean((c / d)²) with d = masked_mean(c) + 1e-8; Σ(c/d)² = Σc² / d² row by row.
        d = np.float64(_masked_mean(csum, count) + _f32(1e-8))
        mean_sq = _masked_mean(c2sum / (d * d), count)
        if mean_sq == 0:
            raise ComputeError(
                f"{_IS_THR}: every IS weight of the batch is 0 (IcePop band {cfg.band}); verl 0.9.1 fails computing "
                "rollout_is_eff_sample_size (division by zero)"
            )
        m["rollout_is_eff_sample_size"] = 1.0 / float(mean_sq)
        q = rows["is/q"]
        m["rollout_is_seq_mean"] = _mean(q)
        m["rollout_is_seq_std"] = _std(q)
        m["rollout_is_seq_max"] = _f32(q.max())
        m["rollout_is_seq_min"] = _f32(q.min())
        m["rollout_is_seq_max_deviation"] = _f32(rows["is/q_dev"].max())
        m["rollout_is_seq_fraction_high"] = _mean(rows["is/q_high"])
        m["rollout_is_seq_fraction_low"] = _mean(rows["is/q_low"])
        if cfg.band is not None:
            m["rollout_is_oob_ratio"] = _masked_mean(_fsum(rows["is/oob"]), count)
        if cfg.batch_normalize:
            m["rollout_is_batch_norm_factor"] = self._norm_factor(rows)
        return m


def _rule_metrics(rule: RejectionRule, rows: dict[str, np.ndarray]) -> dict[str, np.floating | float]:
    """``rollout_rs_<option>_*``: token-weighted mean/std, token (token rule) or row (sequence rule)
    extrema and fractions, and row-value summaries over valid rows."""
    p = f"rs/{rule.option}/"
    key = f"rollout_rs_{rule.option}_"
    n = rows["n"]
    count = _fsum(n)
    valid = n > 0
    row_val = rows[p + "row"][valid]
    k1 = rule.lower is not None
    m: dict[str, np.floating | float] = {key + "mean": _masked_mean(_fsum(rows[p + "sum"]), count)}
    if rule.is_token:
        m[key + "max"] = _f32(rows[p + "max"][valid].max())
        m[key + "min"] = _f32(rows[p + "min"][valid].min())
        m[key + "fraction_high"] = _masked_mean(_fsum(rows[p + "tok_high"]), count)
        m[key + "fraction_low"] = _masked_mean(_fsum(rows[p + "tok_low"]), count) if k1 else 0.0
    else:
        m[key + "max"] = _f32(row_val.max())
        m[key + "min"] = _f32(row_val.min())
        m[key + "fraction_high"] = _mean(rows[p + "row_high"][valid])
        m[key + "fraction_low"] = _mean(rows[p + "row_low"][valid]) if k1 else 0.0
    m[key + "std"] = _clamped_std(_fsum(rows[p + "csum"]), _fsum(rows[p + "c2sum"]), count)
    m[key + "seq_mean"] = _mean(row_val)
    m[key + "seq_std"] = _std(row_val)
    m[key + "seq_max"] = _f32(row_val.max())
    m[key + "seq_min"] = _f32(row_val.min())
    m[key + "seq_max_deviation"] = _f32(np.abs(row_val).max())
    m[key + "seq_fraction_high"] = _mean(rows[p + "row_high"][valid])
    if k1:
        m[key + "seq_fraction_low"] = _mean(rows[p + "row_low"][valid])
    m[key + "masked_fraction"] = _masked_mean(_fsum(rows[p + "rejected"]), count)
    m[key + "seq_masked_fraction"] = _f32(np.count_nonzero(rows[p + "rejected"] > 0)) / _f32(
        np.count_nonzero(valid)
    )
    return m


def _offpolicy_metrics(rows: dict[str, np.ndarray]) -> dict[str, np.floating | float]:
    """Off-policy diagnostics over ``m0``: PPLs and log-PPL differences are means over all ``B`` rows of row
    values; ``kl``, ``k3_kl``, ``chi2_token`` are token means; ``chi2_seq`` a row mean."""
    count = _fsum(rows["n"])
    diff = rows["log_ppl_diff"]
    return {
        "training_ppl": _mean(rows["ppl_old"]),
        "training_log_ppl": _mean(-rows["lp_old"]),
        "kl": _masked_mean(_fsum(rows["kl_sum"]), count),
        "k3_kl": _masked_mean(_fsum(rows["k3_kl_sum"]), count),
        "rollout_ppl": _mean(rows["ppl_roll"]),
        "rollout_log_ppl": _mean(-rows["lp_roll"]),
        "log_ppl_diff": _mean(diff),
        "log_ppl_abs_diff": _mean(np.abs(diff)),
        "log_ppl_diff_max": _f32(diff.max()),
        "log_ppl_diff_min": _f32(diff.min()),
        "ppl_ratio": _mean(rows["ppl_ratio"]),
        "chi2_token": _masked_mean(_fsum(rows["rho2_sum"]), count) - _f32(1.0),
        "chi2_seq": _mean(rows["rho2_seq"]) - _f32(1.0),
    }
