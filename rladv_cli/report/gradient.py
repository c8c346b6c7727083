"""The report's gradient section (docs/weights.md): where the update's mass ``Σ |token_weight|`` sits, by cause,
sign, response length, group and turn, and the hazards of how the loss aggregation spreads it.

``weight_rows`` runs in the write pass on one chunk's tokens; ``gradient`` builds the section from per-row arrays
once the run is over (numpy only).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from ..tensors import xp as X
from ..tensors.xp import Array
from .verdict import CAUSES, THRESHOLDS, Thresholds, VerdictHazard, level_for, pct

TURNS = 8  # turns (spans of actor tokens) counted one by one; the later ones share the last bucket
TOP_GROUPS = 10
LENGTH_PARTS = 10  # rows by their tokens, in tenths
LONGEST = 0.10  # length_bias: the longest tenth of the rows against the batch
HEAVIEST = 0.05  # mass_concentration: the mass share of the heaviest 5% of the rows
MIN_ROWS = 20  # mass_concentration is not judged on fewer rows with mass
TRUNCATED_OVER = 2.0  # truncated_negative_mass counts only when their negative share is this many times their tokens'


def weight_rows(weights: Array, b) -> dict:
    """Per row of one chunk (``weights (N,)`` and the ``Batch``'s arrays): ``w_abs``, ``w_pos``, ``w_neg`` (the sum
    of the negative weights, <= 0), float64 ``(B,)``, and per turn ``w_turn`` (mass) and ``t_turn`` (tokens after
    rejection) ``(B, TURNS)``; a turn is a span of actor tokens of the mask before rejection, and turns past
    ``TURNS`` fall in the last column. Weights and the mask are 0 off that mask, so segments from each span's
    start (or row start) to the next sum them per span in one pass; the spans, few, are then placed in their
    rows."""
    from ..tensors import kernels

    xp = X.namespace(weights)
    off, a = b.row_offsets, xp.abs(weights)
    mass, net = kernels.segment_sum(a, off), kernels.segment_sum(weights, off)
    out = {"w_abs": mass, "w_pos": (mass + net) / 2, "w_neg": (net - mass) / 2}
    rows = X.numel(off) - 1
    m0 = b.original_mask > 0
    start = xp.asarray(m0, copy=True)
    start[1:] &= ~m0[:-1]
    first = off[:-1][kernels.row_lengths(off) > 0]
    start[first] = m0[first]
    starts = X.flatnonzero(start)
    bounds = xp.concat([X.unique(xp.concat([off[:-1], starts])), off[-1:]])
    is_span = xp.zeros(X.numel(bounds) - 1, dtype=xp.bool, device=X.dev(off))
    is_span[xp.searchsorted(bounds[:-1], starts)] = True
    segment_mass = kernels.segment_sum(a, bounds)[is_span]
    segment_tokens = kernels.segment_sum(X.float32(b.response_mask), bounds)[is_span]
    row = xp.searchsorted(off, starts, side="right") - 1
    rank = xp.arange(X.numel(starts), dtype=xp.int64, device=X.dev(off)) - xp.searchsorted(starts, off[:-1])[row]
    slot = row * TURNS + xp.clip(rank, max=TURNS - 1)
    out["w_turn"] = xp.reshape(X.index_add(rows * TURNS, slot, segment_mass), (rows, TURNS))
    out["t_turn"] = xp.reshape(X.index_add(rows * TURNS, slot, segment_tokens), (rows, TURNS))
    return out


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class MassPart(_Model):
    part: str
    rows: int
    tokens: int = Field(description="actor tokens after rollout rejection")
    token_share: float = Field(description="of all such tokens")
    mass_share: float = Field(description="of the gradient mass sum |token_weight|")
    positive_share: Optional[float] = Field(description="of the part's own mass, from tokens with weight > 0 (None "
                                            "for turns)")
    tokens_per_row: Optional[list[int]] = Field(None, description="length parts: the fewest and most tokens of a row")


class GroupMass(_Model):
    group: str
    rows: int
    tokens: int
    token_share: float
    mass_share: float
    net: float = Field(description="sum of the group's token weights (signed)")


class LengthBias(_Model):
    rows: int = Field(description="the longest tenth of the rows with tokens (at least 1)")
    min_tokens: int = Field(description="the shortest of them, in tokens")
    token_share: float
    mass_share: float
    factor: float = Field(description="mass share / token share: what one of their tokens weighs against the average")
    aggregation_factor: float = Field(description="the same ratio of the loss aggregation's per-row scale alone "
                                      "(token-weighted), without the advantages")


class Concentration(_Model):
    rows: int = Field(description="rows with gradient mass")
    heaviest: int = Field(description="the heaviest 5% of them (at least 1)")
    mass_share: float = Field(description="of the mass, on the heaviest rows")
    top_row: int = Field(description="dataset row of the heaviest row")
    top_share: float


class Truncated(_Model):
    source: str = Field(description="what marks the truncated rows: the truncated column, or --max-resp-len")
    rows: int
    token_share: float
    negative_mass_share: float = Field(description="of the mass of the negative token weights")


class Gradient(_Model):
    """What each token weighs in the update (docs/weights.md)."""

    trainer: str
    option: str = Field(description="the trainer's setting that picks the mode")
    mode: str
    default: bool = Field(description="whether the mode is the trainer's default")
    formula: str = Field(description="w_t = A_t · ρ_t · m_t · c_i, and the mode's c_i")
    mini_batch_size: Optional[int] = Field(description="rows per mini-batch; None: each step is one")
    micro_batch_size: Optional[int] = Field(description="rows per micro-batch; None: one per mini-batch")
    loss_scale_factor: Optional[float]
    mini_batches: int
    terms: dict[str, list[float]] = Field(description="per term of c_i, its smallest and largest value over the rows")
    mass: float = Field(description="sum of |token_weight| over the batch")
    net: float = Field(description="sum of token_weight")
    positive_share: float = Field(description="of the mass, from tokens with weight > 0")
    weighted_tokens: int = Field(description="tokens with a non-zero weight")
    by_cause: list[MassPart] = Field(description="rows by the verdict's cause (signal, singleton, all_0, ...)")
    by_length: list[MassPart] = Field(description="rows with tokens in tenths by their token count, shortest first")
    by_turn: list[MassPart] = Field(description=f"actor spans by their rank in the row (the last: {TURNS}+)")
    top_groups: list[GroupMass] = Field(description=f"the {TOP_GROUPS} groups with the most mass")
    length_bias: Optional[LengthBias]
    concentration: Optional[Concentration]
    truncated: Optional[Truncated] = Field(description="None without a truncated column or --max-resp-len")
    hazards: list[VerdictHazard] = Field(description="at warn or above; also in the verdict")


@dataclass(frozen=True)
class WeighedRows:
    """Per row ``(B,)`` numpy: ``mass``, ``positive``, ``negative`` (<= 0) and ``tokens`` (after rejection);
    ``scale`` the mode's ``c_i``; ``cause`` (``verdict.CAUSES`` index); ``turn_mass``, ``turn_tokens``
    ``(B, TURNS)``; ``group`` dense ids with ``group_names`` (None without groups); ``truncated`` (None: not
    known) with ``truncated_source``."""

    mass: np.ndarray
    positive: np.ndarray
    negative: np.ndarray
    tokens: np.ndarray
    scale: np.ndarray
    cause: np.ndarray
    turn_mass: np.ndarray
    turn_tokens: np.ndarray
    group: Optional[np.ndarray] = None
    group_names: Optional[Sequence[str]] = None
    truncated: Optional[np.ndarray] = None
    truncated_source: str = ""


def _share(x: float, total: float) -> float:
    return float(x) / float(total) if total > 0 else 0.0


def _part(name: str, sel: np.ndarray, r: WeighedRows, total_mass: float, total_tokens: float) -> MassPart:
    mass = float(r.mass[sel].sum())
    return MassPart(part=name, rows=int(sel.sum()), tokens=int(r.tokens[sel].sum()),
                    token_share=_share(r.tokens[sel].sum(), total_tokens), mass_share=_share(mass, total_mass),
                    positive_share=_share(r.positive[sel].sum(), mass))


def _by_length(r: WeighedRows, total_mass: float, total_tokens: float) -> list[MassPart]:
    with_tokens = np.flatnonzero(r.tokens > 0)
    order = with_tokens[np.argsort(r.tokens[with_tokens], kind="stable")]
    parts = []
    for piece in np.array_split(order, min(LENGTH_PARTS, order.size)) if order.size else []:
        sel = np.zeros(r.mass.size, dtype=bool)
        sel[piece] = True
        lo, hi = int(r.tokens[piece].min()), int(r.tokens[piece].max())
        part = _part(f"{lo}-{hi} tokens" if lo != hi else f"{lo} tokens", sel, r, total_mass, total_tokens)
        parts.append(part.model_copy(update={"tokens_per_row": [lo, hi]}))
    return parts


def _by_turn(r: WeighedRows, total_mass: float, total_tokens: float) -> list[MassPart]:
    mass, tokens = r.turn_mass.sum(0), r.turn_tokens.sum(0)
    parts = []
    for k in range(TURNS):
        rows = int(((r.turn_tokens[:, k] > 0) | (r.turn_mass[:, k] > 0)).sum())
        if not rows:
            continue
        parts.append(MassPart(part=f"turn {k + 1}" + ("+" if k == TURNS - 1 else ""), rows=rows,
                              tokens=int(tokens[k]), token_share=_share(tokens[k], total_tokens),
                              mass_share=_share(mass[k], total_mass), positive_share=None))
    return parts


def _top_groups(r: WeighedRows, total_mass: float, total_tokens: float) -> list[GroupMass]:
    if r.group is None:
        return []
    g = r.group.astype(np.int64)
    n = int(g.max()) + 1 if g.size else 0
    mass, tokens = np.bincount(g, r.mass, n), np.bincount(g, r.tokens, n)
    net, rows = np.bincount(g, r.positive + r.negative, n), np.bincount(g, minlength=n)
    order = np.argsort(-mass, kind="stable")[:TOP_GROUPS]
    return [GroupMass(group=str(r.group_names[k]) if r.group_names is not None else str(k), rows=int(rows[k]),
                      tokens=int(tokens[k]), token_share=_share(tokens[k], total_tokens),
                      mass_share=_share(mass[k], total_mass), net=float(net[k])) for k in order if mass[k] > 0]


def _length_bias(r: WeighedRows, total_mass: float, total_tokens: float) -> tuple[Optional[LengthBias], int]:
    with_tokens = np.flatnonzero(r.tokens > 0)
    if with_tokens.size < 2 or total_mass <= 0:
        return None, -1
    k = max(1, int(math.ceil(LONGEST * with_tokens.size)))
    longest = with_tokens[np.argsort(-r.tokens[with_tokens], kind="stable")[:k]]
    token_share = _share(r.tokens[longest].sum(), total_tokens)
    mass_share = _share(r.mass[longest].sum(), total_mass)
    scale = r.scale[with_tokens].astype(np.float64)
    per_token = _share((r.tokens[with_tokens] * scale).sum(), r.tokens[with_tokens].sum())
    theirs = _share((r.tokens[longest] * r.scale[longest].astype(np.float64)).sum(), r.tokens[longest].sum())
    return LengthBias(rows=int(k), min_tokens=int(r.tokens[longest].min()), token_share=token_share,
                      mass_share=mass_share, factor=_share(mass_share, token_share),
                      aggregation_factor=_share(theirs, per_token)), int(longest[0])


def _concentration(r: WeighedRows, total_mass: float) -> Optional[Concentration]:
    heavy = np.flatnonzero(r.mass > 0)
    if not heavy.size:
        return None
    order = heavy[np.argsort(-r.mass[heavy], kind="stable")]
    k = max(1, int(math.ceil(HEAVIEST * heavy.size)))
    return Concentration(rows=int(heavy.size), heaviest=k, mass_share=_share(r.mass[order[:k]].sum(), total_mass),
                         top_row=int(order[0]), top_share=_share(r.mass[order[0]], total_mass))


def _truncated(r: WeighedRows, total_tokens: float) -> Optional[Truncated]:
    if r.truncated is None:
        return None
    t = r.truncated.astype(bool)
    negative = -float(r.negative.sum())
    return Truncated(source=r.truncated_source, rows=int(t.sum()), token_share=_share(r.tokens[t].sum(), total_tokens),
                     negative_mass_share=_share(-r.negative[t].sum(), negative))


def _hazards(g: Gradient, longest_row: int, r: WeighedRows, thresholds: Thresholds,
             row_command: Callable[[int], str]) -> list[VerdictHazard]:
    """The hazards at warn or above, each with its measure (docs/debugging.md, Levels)."""
    out = []

    def add(code: str, measure: float, message: str, row: Optional[int]) -> None:
        level = level_for(code, measure, thresholds)
        if level in ("warn", "fail"):
            out.append(VerdictHazard(code=code, level=level, measure=measure, message=message,
                                     example=row_command(row) if row is not None and row >= 0 else None))

    lb = g.length_bias
    if lb is not None and lb.factor > 0:
        measure = max(lb.factor, 1 / lb.factor)
        way = "more" if lb.factor > 1 else "less"
        add("length_bias", measure,
            f"each token of the longest {lb.rows} row(s) ({lb.min_tokens}+ tokens, {pct(lb.token_share)} of the "
            f"tokens) weighs {lb.factor:.2f}x the batch's average ({lb.aggregation_factor:.2f}x from {g.mode} alone, the rest "
            f"from their advantages): long responses are learned from {way} per token", longest_row)
    c = g.concentration
    if c is not None and c.rows >= MIN_ROWS:
        add("mass_concentration", c.mass_share,
            f"the heaviest {c.heaviest} of {c.rows} rows with weight carry {pct(c.mass_share)} of the gradient mass; "
            f"the heaviest alone {pct(c.top_share)}", c.top_row)
    t = g.truncated
    if t is not None and t.rows:
        over = t.negative_mass_share >= TRUNCATED_OVER * t.token_share
        first = int(np.flatnonzero(r.truncated.astype(bool) & (r.negative < 0))[0]) if over and (
            r.truncated.astype(bool) & (r.negative < 0)).any() else None
        add("truncated_negative_mass", t.negative_mass_share if over else 0.0,
            f"{pct(t.negative_mass_share)} of the negative gradient mass sits on {t.rows} truncated row(s) holding "
            f"{pct(t.token_share)} of the tokens ({t.source}): the update mostly pushes away from responses cut at "
            "the length limit, a length penalty in disguise", first)
    return out


def gradient(r: WeighedRows, *, trainer: str, option: str, mode: str, default: bool, formula: str,
             mini_batch_size: Optional[int], micro_batch_size: Optional[int], loss_scale_factor: Optional[float],
             mini_batches: int, terms: dict[str, np.ndarray], thresholds: Thresholds = THRESHOLDS,
             row_command: Callable[[int], str] = str) -> Gradient:
    """The gradient section of ``r`` (per-row arrays) under the named mode, with its hazards."""
    total_mass, total_tokens = float(r.mass.sum()), float(r.tokens.sum())
    causes = []
    for code in np.unique(r.cause):
        sel = r.cause == code
        name = "signal" if CAUSES[code] == "ok" else CAUSES[code]
        causes.append(_part(name, sel, r, total_mass, total_tokens))
    causes.sort(key=lambda p: -p.mass_share)
    bias, longest_row = _length_bias(r, total_mass, total_tokens)
    g = Gradient(
        trainer=trainer, option=option, mode=mode, default=default, formula=formula, mini_batch_size=mini_batch_size,
        micro_batch_size=micro_batch_size, loss_scale_factor=loss_scale_factor, mini_batches=mini_batches,
        terms={name: [float(np.min(v)), float(np.max(v))] for name, v in terms.items() if np.size(v)},
        mass=total_mass, net=float((r.positive + r.negative).sum()),
        positive_share=_share(r.positive.sum(), total_mass),
        weighted_tokens=int(r.tokens[r.mass > 0].sum()),
        by_cause=causes, by_length=_by_length(r, total_mass, total_tokens),
        by_turn=_by_turn(r, total_mass, total_tokens), top_groups=_top_groups(r, total_mass, total_tokens),
        length_bias=bias, concentration=_concentration(r, total_mass), truncated=_truncated(r, total_tokens),
        hazards=[])
    return g.model_copy(update={"hazards": _hazards(g, longest_row, r, thresholds, row_command)})


def render_gradient(g: Gradient, console) -> None:
    """The section on a terminal, a line per view: the mode and formula, the mass, by cause, by length tenth
    (each tenth's weight per token against the average), by turn, the heaviest groups."""
    from rich.markup import escape

    batches = f"{g.mini_batches} mini-batch(es)" + (f" of {g.mini_batch_size} rows" if g.mini_batch_size else "")
    arrow = lambda parts: ", ".join(f"{escape(p.part)} {pct(p.token_share)} -> {pct(p.mass_share)}"  # noqa: E731
                                    for p in parts)
    lines = [f"[bold]gradient[/bold]: {escape(g.trainer)} {escape(g.option)}={escape(g.mode)}, {batches}: "
             f"{escape(g.formula)}",
             f"mass Σ|w| {g.mass:.4g} (net {g.net:.2g}), {pct(g.positive_share)} positive, on {g.weighted_tokens} "
             "tokens", f"by cause (tokens -> mass): {arrow(g.by_cause)}"]
    if g.by_length:
        ratios = " ".join(f"{p.mass_share / p.token_share:.2f}" if p.token_share else "-" for p in g.by_length)
        lo, hi = g.by_length[0].tokens_per_row[0], g.by_length[-1].tokens_per_row[1]
        lines.append(f"per token against the average, by length tenth ({lo} to {hi} tokens): {ratios}")
    if len(g.by_turn) > 1:
        lines.append(f"by turn (tokens -> mass): {arrow(g.by_turn)}")
    if g.top_groups:
        heaviest = ", ".join(f"{escape(x.group)} {pct(x.mass_share)}" for x in g.top_groups[:3])
        lines.append(f"heaviest groups: {heaviest}")
    console.print(lines[0])
    for line in lines[1:]:
        console.print(f"  {line}")
