"""The checklist's streaming scan (numpy only, no torch): what to read from the schema (``plan``), the row
checks of the columns inspect reads beyond the contract's, and the per-row scalars of one chunk."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..contract import validation
from ..contract.columns import array_of, assemble_scores, flat_values, list_offsets, list_sums, score_positions
from ..contract.schema import COLUMNS
from ..errors import ConfigError, InputError
from ..io.read import Dataset

# Columns inspect reads beyond the contract's: list<number> aligned with response_mask (token_weight: an rladv
# output's, docs/weights.md), and session ids.
EXTRA_LISTS = ("token_level_rewards", "advantages", "token_weight")


# ==================================================================================== numpy helpers
def _seg_sum(x: np.ndarray, off: np.ndarray) -> np.ndarray:
    """Per-row sums of a flat array (every row has ``L_i >= 1``); bools are counted."""
    if off.size <= 1:
        return np.zeros(0, dtype=np.int64 if x.dtype == bool else x.dtype)
    return np.add.reduceat(x.astype(np.int64) if x.dtype == bool else x, off[:-1])


def _in_row_cumsum(x: np.ndarray, off: np.ndarray, row_of: np.ndarray) -> np.ndarray:
    """Inclusive running sum of ``x`` inside each row."""
    c = np.cumsum(x.astype(np.int64))
    return c - (c - x)[off[:-1]][row_of]


def kl_estimate(logprob: np.ndarray, ref_logprob: np.ndarray, mode: str) -> np.ndarray:
    """verl's per-token KL estimate (docs/semantics.md §4.1) in float32 numpy, ``d = logprob − ref_logprob``:
    ``kl``/``k1`` d, ``abs`` |d|, ``mse``/``k2`` 0.5·d², ``low_var_kl``/``k3`` clamp(e^k − k − 1, ±10) with
    ``k = clamp(ref − logprob, ±20)``; ``<mode>+`` has the base mode's value (NaN where 0.5·d² is not finite)."""
    logprob, ref_logprob = logprob.astype(np.float32), ref_logprob.astype(np.float32)
    d = logprob - ref_logprob
    base = mode.removesuffix("+")
    with np.errstate(over="ignore", invalid="ignore"):
        if base in ("kl", "k1"):
            value = d
        elif base == "abs":
            value = np.abs(d)
        elif base in ("mse", "k2"):
            value = np.float32(0.5) * np.square(d)
        elif base in ("low_var_kl", "k3"):
            k = np.clip(ref_logprob - logprob, np.float32(-20), np.float32(20))
            value = np.clip((np.exp(k) - k) - np.float32(1), np.float32(-10), np.float32(10))
        else:
            raise ConfigError(f"--kl-penalty {mode}: not a KL estimate verl implements")
        if mode.endswith("+"):
            k2 = np.float32(0.5) * np.square(d)
            value = value + (k2 - k2)
    return value.astype(np.float32, copy=False)


# ==================================================================================== validation per row
def _check_extra(table: pa.Table, path: str, start: int) -> None:
    """Row checks of the non-contract columns inspect reads (same rules as a contract float list)."""
    names = table.column_names
    lengths = pc.list_value_length(array_of(table["response_mask"])).to_numpy(zero_copy_only=False)
    for name in names:
        arr = array_of(table[name])
        if name == "session_id":
            bad = np.flatnonzero(arr.is_null().to_numpy(zero_copy_only=False))
            if bad.size:
                raise InputError(path, "is null; every row of a multi-output dataset needs one", row=start + int(bad[0]), column=name)
            continue
        if name not in EXTRA_LISTS:
            continue
        bad = np.flatnonzero(arr.is_null().to_numpy(zero_copy_only=False))
        if bad.size:
            raise InputError(path, "is null; every row needs a value", row=start + int(bad[0]), column=name)
        row_len = pc.list_value_length(arr).to_numpy(zero_copy_only=False)
        bad = np.flatnonzero(row_len != lengths)
        if bad.size:
            i = int(bad[0])
            raise InputError(path, f"has length {row_len[i]} but response_mask has {lengths[i]}", row=start + i, column=name)
        values = arr.flatten()
        v = values.to_numpy(zero_copy_only=False).astype(np.float64) if len(values) else np.zeros(0)
        bad = np.flatnonzero(values.is_null().to_numpy(zero_copy_only=False) | ~np.isfinite(v)) if len(values) else bad[:0]
        if bad.size:
            parents = pc.list_parent_indices(arr).to_numpy()
            raise InputError(path, f"has {v[bad[0]]}; values must be finite", row=start + int(parents[bad[0]]), column=name)


def _check_rows(table: pa.Table, path: str, start: int) -> None:
    validation.check_chunk(table, path, start)
    _check_extra(table, path, start)


def invalid_rows(table: pa.Table, path: str, start: int) -> list[tuple[int, str]]:
    """``(row within table, message)`` of every row that fails inspect's checks (``validation.invalid_rows``)."""
    return [(row, str(err)) for row, err in validation.invalid_rows(table, path, start, _check_rows)]


_MIX = np.uint64(0x9E3779B97F4A7C15)  # odd 64-bit constants of a multiply-xorshift mix (splitmix64's)
_MIX2 = np.uint64(0xBF58476D1CE4E5B9)


def prompt_keys(arr: pa.Array) -> np.ndarray:
    """A 64-bit key per row ``(B,)`` of a prompt column: equal prompts, equal keys (different ones collide with
    chance ~2^-64). A list (token ids): a position-aware mix of its values summed per row, vectorised; a string
    or number: Python's hash of the value (stable within one process, which is all a comparison needs)."""
    if pa.types.is_fixed_size_list(arr.type):  # a padded [B, P] tensor saved with pyarrow
        arr = arr.cast(pa.list_(arr.type.value_field))
    if pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type):
        off = list_offsets(arr)
        flat = arr.flatten().fill_null(0).to_numpy(zero_copy_only=False)
        bits = flat.astype(np.float64).view(np.uint64) if flat.dtype.kind == "f" else flat.astype(np.int64).view(np.uint64)
        pos = (np.arange(flat.size) - np.repeat(off[:-1], np.diff(off))).astype(np.uint64)
        with np.errstate(over="ignore"):
            x = (bits + pos * _MIX) * _MIX2
            x ^= x >> np.uint64(31)
            x *= _MIX
        keys = np.zeros(len(arr), dtype=np.uint64)
        np.add.at(keys, np.repeat(np.arange(len(arr)), np.diff(off)), x)
        return keys ^ np.diff(off).astype(np.uint64)
    return np.array([hash(v) for v in arr.to_pylist()], dtype=np.int64).view(np.uint64)


# ==================================================================================== the streaming scan
@dataclass
class Plan:
    """What the scan reads and computes, fixed from the schema before any row is read."""

    score: Optional[str]
    uid: bool
    attention: bool
    loss: bool
    kl: bool
    tlr: bool
    advantages: bool
    session: bool
    tools: bool
    columns: list[str]
    prompts: bool = False  # a ``prompts`` column (token ids, text or an id): the uid-spans-prompts check
    weights: bool = False  # a ``token_weight`` column: the verdict's gradient mass

    @property
    def basis(self) -> str:
        return "kl_shaped" if self.kl else "token_level_rewards" if self.tlr else "score"


@dataclass
class RowScalars:
    """Per-row scalars of the valid rows, appended chunk by chunk (dataset order); the facts compute computes
    too go by their names in ``report.facts.ROW_FACTS``."""

    parts: dict[str, list[np.ndarray]] = field(default_factory=dict)
    _whole: dict[str, np.ndarray] = field(default_factory=dict)

    def add(self, **cols: np.ndarray) -> None:
        for k, v in cols.items():
            self.parts.setdefault(k, []).append(np.asarray(v))
            self._whole.pop(k, None)

    def replace(self, name: str, values: np.ndarray) -> None:
        """Put ``values`` (every row) in place of the column ``name``."""
        self.parts[name] = [np.asarray(values)]
        self._whole.pop(name, None)

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self._whole:
            p = self.parts.get(name)
            self._whole[name] = np.concatenate(p) if p else np.zeros(0)
        return self._whole[name]

    def __contains__(self, name: str) -> bool:
        return name in self.parts


def scan_chunk(t: pa.Table, plan: Plan, beta: float, kl_mode: str) -> dict[str, np.ndarray]:
    """Per-row scalars of one validated chunk ``t`` (numpy only)."""
    off = list_offsets(array_of(t["response_mask"]))
    B, N = t.num_rows, int(off[-1])
    lengths = np.diff(off)
    row_of = np.repeat(np.arange(B), lengths)
    pos = np.arange(N) - off[:-1][row_of]
    m = flat_values(t, "response_mask", np.int8).astype(bool)
    pad = flat_values(t, "attention_mask", np.int8) == 0 if plan.attention else np.zeros(N, dtype=bool)
    # m0: the mask as read before rollout rejection (an rladv output's loss_mask), as rladv compute's m0
    m0 = flat_values(t, "loss_mask", np.int8).astype(bool) if plan.loss else m
    first = pos == 0
    actor = _seg_sum(m0, off)
    obs = ~m0 & ~pad
    prev_m0 = np.concatenate([[False], m0[:-1]]) & ~first
    prev_obs = np.concatenate([[False], obs[:-1]]) & ~first
    last = score_positions(off, (~pad).astype(np.int8) if plan.attention else None)[0] - off[:-1]
    used = _seg_sum(m, off) if plan.loss else actor
    out: dict[str, np.ndarray] = dict(
        length=lengths, actor=actor, used=used, padding=_seg_sum(pad, off),
        turns=_seg_sum(m0 & ~prev_m0, off), observation_spans=_seg_sum(obs & ~prev_obs, off),
        ends_in_observation=~m0[off[:-1] + last],
    )
    if plan.loss:
        out.update(loss_only=_seg_sum(m0 & ~m, off), loss_on_padding=_seg_sum(m0 & pad, off))
    r = None
    if plan.score is not None:
        s = assemble_scores(t, off, off[:-1] + last)
        nz = s != 0
        score_total = _seg_sum(s.astype(np.float64), off)
        out.update(score_total=score_total, score_on_observation=_seg_sum(nz & obs, off),
                   score_on_padding=_seg_sum(nz & pad, off),
                   non_terminal=_seg_sum(nz & (pos < last[row_of]), off) > 0)
        r = s
        if plan.kl:
            kld = kl_estimate(flat_values(t, "old_log_probs", np.float32), flat_values(t, "ref_log_prob", np.float32), kl_mode)
            kld = kld * m0.astype(np.float32)  # KL shaping runs before rejection (docs/semantics.md §4.2, §10)
            penalty = np.float32(beta) * kld
            r = s - penalty
            out.update(kl_row=_seg_sum(kld.astype(np.float64), off) / (actor + 1e-8),
                       kl_raises_reward=_seg_sum(penalty.astype(np.float64), off) < 0)
        elif plan.tlr:
            r = flat_values(t, "token_level_rewards", np.float32)
        reward_total = _seg_sum(r.astype(np.float64), off) if r is not s else score_total
        out["reward_total"] = reward_total
        if plan.kl:
            sign = np.sign(score_total)
            out["kl_flips_sign"] = (sign != 0) & (np.sign(reward_total) != sign)
        # credit_reset_at_mask: a reward on an actor token after a mask-0 position that has an actor token
        # before it reaches those earlier tokens in carry mode and not in reset mode (both drop rewards that
        # sit on mask-0 positions themselves)
        actor_before = _in_row_cumsum(m, off, row_of) - m
        cut = _in_row_cumsum(~m & (actor_before > 0), off, row_of) > 0
        out["credit_reset_at_mask"] = _seg_sum(cut & m & (r != 0), off) > 0
    if plan.tools:
        out["tool_reward_sum"], out["tool_calls"] = list_sums(t, "tool_rewards")
    if plan.prompts:
        out["prompt_key"] = prompt_keys(array_of(t["prompts"]))
    if plan.advantages:
        a = flat_values(t, "advantages", np.float32).astype(np.float64)
        am = np.where(m, a, 0.0)
        total = _seg_sum(am, off)
        mean = np.divide(total, used, out=np.zeros(B), where=used > 0)
        out.update(
            adv_count=used, adv_sum=total, adv_m2=_seg_sum(np.where(m, (a - mean[row_of]) ** 2, 0.0), off),
            adv_min=np.minimum.reduceat(np.where(m, a, np.inf), off[:-1]) if B else np.zeros(0),
            adv_max=np.maximum.reduceat(np.where(m, a, -np.inf), off[:-1]) if B else np.zeros(0),
            adv_positive=_seg_sum(m & (a > 0), off), adv_negative=_seg_sum(m & (a < 0), off),
            adv_masked_nonzero=_seg_sum(~m & (a != 0), off),
            adv_zero=_seg_sum(m0 & m & (a == 0), off),
            dead_rejected=_seg_sum(m0 & ~m & (a == 0), off),
        )
    if plan.weights:
        out["w_abs"] = _seg_sum(np.abs(flat_values(t, "token_weight", np.float32).astype(np.float64)) * m, off)
    return out


def plan_of(ds: Dataset, kl_coef: float, batch_key: Optional[str] = None) -> tuple[Plan, list[str]]:
    """Columns to read (``batch_key``'s too) and computations to run, and a message per unusable contract column."""
    schema = ds.schema
    bad: list[str] = []
    usable: set[str] = set()
    for f in schema:
        if f.name in COLUMNS:
            try:
                validation.check_schema(ds.paths[0], pa.schema([f]), {})
                usable.add(f.name)
            except InputError as err:
                if f.name == "response_mask":
                    raise
                bad.append(str(err))
        elif f.name in EXTRA_LISTS:
            t = f.type
            if validation.is_number_list(t):
                usable.add(f.name)
            else:
                bad.append(f"{ds.paths[0]}: column {f.name}: has type {t}; expected a list of numbers")
        elif f.name in ("session_id", "prompts"):
            usable.add(f.name)
    if "response_mask" not in usable:
        raise InputError(ds.paths[0], "missing; inspect needs it to tell actor tokens from the rest", column="response_mask")
    score = "rm_scores" if "rm_scores" in usable else "score" if "score" in usable else None
    kl = kl_coef != 0.0 and score is not None and {"old_log_probs", "ref_log_prob"} <= usable
    plan = Plan(
        score=score, uid="uid" in usable, attention="attention_mask" in usable, loss="loss_mask" in usable,
        kl=kl, tlr="token_level_rewards" in usable and not kl, advantages="advantages" in usable,
        session="session_id" in usable and "uid" in usable, tools="tool_rewards" in usable, columns=[],
        prompts="prompts" in usable and "uid" in usable, weights="token_weight" in usable,
    )
    wanted = {"response_mask", score, "uid" if plan.uid else None, "attention_mask" if plan.attention else None,
              "loss_mask" if plan.loss else None, "token_level_rewards" if plan.tlr else None,
              "advantages" if plan.advantages else None, "session_id" if plan.session else None,
              "tool_rewards" if plan.tools else None, "prompts" if plan.prompts else None,
              "token_weight" if plan.weights else None, batch_key}
    if kl:
        wanted |= {"old_log_probs", "ref_log_prob"}
    plan.columns = [c for c in schema.names if c in wanted]
    return plan, bad

