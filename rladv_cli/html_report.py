"""The run report as one self-contained HTML page: inline CSS and SVG charts, no script, nothing fetched.

``render_html(report, figures) -> str`` is a pure function: the same ``Report`` and ``Figures`` give the same
bytes (no timestamps, fixed number formats). Every number on the page comes from the ``Report`` (the JSON
report's single source), except the distributions in ``Figures``, which the ``Report`` has no room for:

- ``Figures.advantages`` / ``.returns``  histograms over valid tokens (``response_mask`` 1 after rejection),
  accumulated chunk by chunk with ``ValueSketch`` (exact integer counts in fixed float32 buckets, so the
  result does not depend on ``--chunk-rows``);
- ``Figures.reward_total`` / ``.score_total``  per-row totals after / before shaping;
- ``Figures.actor_tokens``  per-row count of response_mask-1 tokens before rejection;
- ``Figures.group_spread``  per group of 2+ rows: max - min of the rows' total rewards.

Every user-controlled string (paths, uids, batch names, config values, column names) is HTML-escaped.
"""
from __future__ import annotations

import html
import json
import math
import os
from typing import Any, Iterable, Optional, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, model_validator

from .report import Report, Stats

MAX_BINS = 40

# Section ids and titles, in page order (tests check every title is on the page).
SECTIONS = (
    ("inputs", "Inputs"),
    ("config", "Configuration"),
    ("tokens", "Tokens"),
    ("groups", "Groups"),
    ("scores", "Scores and rewards"),
    ("kl", "KL shaping"),
    ("rejection", "Rollout rejection"),
    ("advantages", "Advantages and returns"),
    ("warnings", "Warnings"),
    ("timing", "Timing"),
)


# ============================================================================ data
class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Histogram(_Model):
    """Counts of values in ``len(counts)`` bins; bin ``i`` is ``[edges[i], edges[i+1])`` (the last one closed)."""

    edges: list[float]
    counts: list[int]
    nonfinite: int = 0

    @model_validator(mode="after")
    def _shape(self) -> "Histogram":
        if len(self.edges) != len(self.counts) + 1 or not self.counts:
            raise ValueError(f"a histogram needs len(edges) == len(counts) + 1 >= 2; got {len(self.edges)}, {len(self.counts)}")
        return self

    @property
    def total(self) -> int:
        return sum(self.counts)


class Figures(_Model):
    """The distributions the HTML page plots and the ``Report`` does not carry (None: not plotted)."""

    advantages: Optional[Histogram] = None
    returns: Optional[Histogram] = None
    reward_total: Optional[Histogram] = None
    score_total: Optional[Histogram] = None
    actor_tokens: Optional[Histogram] = None
    group_spread: Optional[Histogram] = None


def _numpy(x: Any) -> np.ndarray:
    """A 1-D numpy array from a numpy array, a list or a torch tensor (torch is not imported here)."""
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    return np.asarray(x).reshape(-1)


def _bin_count(lo: float, hi: float, n: int, integer: bool) -> tuple[np.ndarray, int]:
    """Edges for ``n`` values in ``[lo, hi]``: about sqrt(n) bins, at most ``MAX_BINS``; integer data gets
    integer-wide bins centred on the integers."""
    nb = max(1, min(MAX_BINS, math.ceil(math.sqrt(max(n, 1)))))
    if integer:
        width = max(1, math.ceil((hi - lo + 1) / nb))
        nb = max(1, math.ceil((hi - lo + 1) / width))
        return lo - 0.5 + width * np.arange(nb + 1, dtype=np.float64), nb
    if hi == lo:
        return np.array([lo - 0.5, lo + 0.5]), 1
    return np.linspace(lo, hi, nb + 1), nb


def _binned(values: np.ndarray, weights: np.ndarray, lo: float, hi: float, n: int, integer: bool,
            nonfinite: int = 0) -> Histogram:
    edges, nb = _bin_count(lo, hi, n, integer)
    idx = np.floor((values - edges[0]) / (edges[-1] - edges[0]) * nb)
    idx = np.clip(idx, 0, nb - 1).astype(np.int64)
    counts = np.bincount(idx, weights=weights, minlength=nb)
    return Histogram(edges=[float(e) for e in edges], counts=[int(round(c)) for c in counts], nonfinite=nonfinite)


def histogram(values: Any, integer: bool = False) -> Optional[Histogram]:
    """Histogram of the finite entries of ``values`` (1-D) over ``[min, max]``; None when there are none."""
    v = _numpy(values).astype(np.float64)
    finite = np.isfinite(v)
    v = v[finite]
    if v.size == 0:
        return None
    return _binned(v, np.ones(v.size), float(v.min()), float(v.max()), v.size, integer, int((~finite).sum()))


class ValueSketch:
    """Counts of float32 values in 2^19 fixed buckets (sign, exponent and 10 mantissa bits, so each bucket
    spans about 0.1% of its value), plus the exact min, max and count. ``add`` is O(n) and integer counts
    add exactly, so any split of the values into chunks gives the same sketch and the same histogram."""

    MANTISSA_BITS = 10
    _SHIFT = 23 - MANTISSA_BITS

    def __init__(self) -> None:
        self.counts = np.zeros(1 << (32 - self._SHIFT), dtype=np.int64)
        self.count = 0
        self.nonfinite = 0
        self.min = math.inf
        self.max = -math.inf

    def add(self, values: Any, mask: Any = None) -> None:
        """Count ``values`` (any shape; with ``mask``, only where ``mask`` is non-zero)."""
        v = _numpy(values).astype(np.float32)
        if mask is not None:
            v = v[_numpy(mask) != 0]
        finite = np.isfinite(v)
        self.nonfinite += int(v.size - finite.sum())
        v = v[finite] + np.float32(0.0)  # -0.0 -> 0.0
        if v.size == 0:
            return
        self.count += int(v.size)
        self.min = min(self.min, float(v.min()))
        self.max = max(self.max, float(v.max()))
        keys = v.view(np.uint32) >> np.uint32(self._SHIFT)
        self.counts += np.bincount(keys, minlength=self.counts.size)

    def merge(self, other: "ValueSketch") -> None:
        """Add the values ``other`` counted (exact: the result is the sketch of both sets of values)."""
        self.counts += other.counts
        self.count += other.count
        self.nonfinite += other.nonfinite
        self.min, self.max = min(self.min, other.min), max(self.max, other.max)

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, ValueSketch) and self.count == other.count and self.nonfinite == other.nonfinite
                and self.min == other.min and self.max == other.max and np.array_equal(self.counts, other.counts))

    def histogram(self) -> Optional[Histogram]:
        """Linear bins over ``[min, max]``; each bucket's count goes to the bin of the bucket's midpoint."""
        if self.count == 0:
            return None
        keys = np.nonzero(self.counts)[0].astype(np.uint32)
        low = (keys << np.uint32(self._SHIFT)).view(np.float32).astype(np.float64)
        high = ((keys + np.uint32(1)) << np.uint32(self._SHIFT)).view(np.float32).astype(np.float64)
        mid = np.where(np.isfinite(high), (low + high) / 2, low)
        mid = np.clip(mid, self.min, self.max)
        return _binned(mid, self.counts[keys].astype(np.float64), self.min, self.max, self.count, False,
                       self.nonfinite)


def _sketch_or_histogram(x: Any) -> Optional[Histogram]:
    if x is None:
        return None
    if isinstance(x, ValueSketch):
        return x.histogram()
    sketch = ValueSketch()
    sketch.add(x)
    return sketch.histogram()


def build_figures(*, reward_total: Any = None, score_total: Any = None, actor: Any = None,
                  group_id: Any = None, advantages: Any = None, returns: Any = None) -> Figures:
    """The page's distributions from plain arrays (numpy, lists or CPU/GPU torch tensors).

    Per row, all ``(B,)`` in dataset row order: ``reward_total`` (R_i after shaping), ``score_total`` (before
    shaping; dropped when equal to ``reward_total``), ``actor`` (response_mask-1 tokens before rejection),
    ``group_id`` (int group index 0..G-1, None without uid). Per valid token: ``advantages`` and ``returns``,
    each a ``ValueSketch`` fed chunk by chunk or a 1-D array of the values at valid tokens; ``returns`` is
    dropped when it equals ``advantages`` (the group estimators).
    """
    fig: dict[str, Optional[Histogram]] = {}
    if advantages is not None:
        fig["advantages"] = _sketch_or_histogram(advantages)
    if returns is not None:
        same = (returns == advantages) if isinstance(returns, ValueSketch) else (
            advantages is not None and not isinstance(advantages, ValueSketch)
            and np.array_equal(_numpy(returns), _numpy(advantages)))
        if not same:
            fig["returns"] = _sketch_or_histogram(returns)
    if reward_total is not None:
        r = _numpy(reward_total).astype(np.float64)
        fig["reward_total"] = histogram(r)
        if score_total is not None:
            s = _numpy(score_total).astype(np.float64)
            if not np.array_equal(s, r):
                fig["score_total"] = histogram(s)
        if group_id is not None:
            g = _numpy(group_id).astype(np.int64)
            if g.size:
                n = int(g.max()) + 1
                size = np.bincount(g, minlength=n)
                hi = np.full(n, -np.inf)
                lo = np.full(n, np.inf)
                np.maximum.at(hi, g, r)
                np.minimum.at(lo, g, r)
                fig["group_spread"] = histogram((hi - lo)[size > 1])
    if actor is not None:
        fig["actor_tokens"] = histogram(_numpy(actor).astype(np.float64), integer=True)
    return Figures(**fig)


# ============================================================================ formatting
class _Html(str):
    """A string that is already HTML (not escaped again)."""


def _e(x: Any) -> str:
    return x if isinstance(x, _Html) else html.escape(str(x), quote=True)


def _num(x: Any) -> str:
    if x is None:
        return "–"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return f"{x:,}"
    if isinstance(x, float):
        return f"{x:.6g}" if math.isfinite(x) else str(x)
    return str(x)


def _pct(part: Optional[float], whole: Optional[float] = 1.0) -> str:
    if part is None or not whole:
        return "–"
    return f"{100.0 * part / whole:.2f}%"


def _tick(v: float) -> str:
    if v == 0:
        return "0"
    if float(v).is_integer() and abs(v) < 1e6:
        return f"{int(v):,}"
    return f"{v:.4g}"


def _c(x: float) -> str:
    """An SVG coordinate, two decimals (deterministic, compact)."""
    s = f"{x:.2f}".rstrip("0").rstrip(".")
    return "0" if s in ("-0", "") else s


def _cell(v: Any, cls: str = "") -> str:
    klass = f' class="{cls}"' if cls else ""
    return f"<td{klass}>{_e(v) if isinstance(v, (str, _Html)) else _e(_num(v))}</td>"


def _table(header: Optional[Sequence[str]], rows: Iterable[Sequence[Any]], align: str = "l",
           cls: str = "") -> str:
    """A table; ``align`` gives each column's alignment (``l`` text, ``n`` right-aligned numbers), its last
    letter repeating for the remaining columns."""

    def klass(i: int) -> str:
        return "n" if (align[i] if i < len(align) else align[-1]) == "n" else ""

    out = [f'<table class="{cls}">' if cls else "<table>"]
    if header:
        out.append("<tr>" + "".join(
            f'<th class="{klass(i)}">{_e(h)}</th>' if klass(i) else f"<th>{_e(h)}</th>" for i, h in enumerate(header))
            + "</tr>")
    for row in rows:
        out.append("<tr>" + "".join(_cell(v, klass(i)) for i, v in enumerate(row)) + "</tr>")
    out.append("</table>")
    return "\n".join(out)


def _kv(rows: Iterable[tuple[str, Any]]) -> str:
    return _table(None, rows, align="l", cls="kv")


def _figure(caption: str, svg: str, note: str = "") -> str:
    extra = f'<p class="note">{_e(note)}</p>' if note else ""
    return f"<figure><figcaption>{_e(caption)}</figcaption>\n{svg}\n{extra}</figure>"


def _charts(*figures: str) -> str:
    figs = [f for f in figures if f]
    return '<div class="charts">\n' + "\n".join(figs) + "\n</div>" if figs else ""


def _muted(text: str) -> str:
    return f'<p class="muted">{_e(text)}</p>'


# ============================================================================ SVG charts
W, H = 560, 250
ML, MR, MT, MB = 72, 16, 14, 46


def _nice_step(span: float, n: int) -> float:
    raw = span / max(n, 1)
    mag = 10.0 ** math.floor(math.log10(raw))
    return next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw * (1 - 1e-12))


def _nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """Round tick values inside ``[lo, hi]``."""
    if not (hi > lo):
        return [lo]
    step = _nice_step(hi - lo, n)
    k0 = math.ceil(lo / step - 1e-9)
    ticks = []
    k = k0
    while k * step <= hi + step * 1e-9:
        ticks.append(round(k * step, 12) + 0.0)
        k += 1
    return ticks


def _count_axis(top: float, n: int = 4) -> tuple[list[float], float]:
    """Ticks from 0 and the axis top (a tick at or above ``top``) for counts."""
    top = max(top, 1)
    step = max(1.0, _nice_step(top, n)) if top >= 1 else _nice_step(top, n)
    k = math.ceil(top / step - 1e-9)
    return [round(i * step, 12) for i in range(k + 1)], k * step


def _svg_open(w: float, h: float, label: str, cls: str = "chart") -> str:
    return (f'<svg class="{cls}" viewBox="0 0 {_c(w)} {_c(h)}" width="{_c(w)}" height="{_c(h)}" role="img" '
            f'aria-label="{_e(label)}">')


def _axis_labels(w: float, h: float, xlabel: str, ylabel: str, plot_top: float, plot_h: float) -> list[str]:
    out = [f'<text class="label" x="{_c(ML + (w - ML - MR) / 2)}" y="{_c(h - 8)}" text-anchor="middle">{_e(xlabel)}</text>']
    if ylabel:
        out.append(f'<text class="label" transform="translate(14,{_c(plot_top + plot_h / 2)}) rotate(-90)" '
                   f'text-anchor="middle">{_e(ylabel)}</text>')
    return out


def _y_grid(ticks: Sequence[float], y_of, x0: float, x1: float, fmt=_tick) -> list[str]:
    out = []
    for t in ticks:
        y = y_of(t)
        out.append(f'<line class="grid" x1="{_c(x0)}" y1="{_c(y)}" x2="{_c(x1)}" y2="{_c(y)}"/>')
        out.append(f'<text class="tick" x="{_c(x0 - 6)}" y="{_c(y + 3.5)}" text-anchor="end">{_e(fmt(t))}</text>')
    return out


def svg_histogram(h: Histogram, xlabel: str, ylabel: str, color: str = "c1") -> str:
    """Bars of height proportional to the bin counts (one ``rect.bar`` per bin, ``data-count`` = its count),
    a count axis from 0, round ticks on the value axis and a dashed line at 0 when the range crosses it."""
    pw, ph = W - ML - MR, H - MT - MB
    lo, hi = h.edges[0], h.edges[-1]
    yticks, top = _count_axis(max(h.counts))
    scale = ph / top

    def x_of(v: float) -> float:
        return ML + (v - lo) / (hi - lo) * pw

    def y_of(c: float) -> float:
        return MT + ph - c * scale

    out = [_svg_open(W, H, f"histogram: {ylabel} by {xlabel}")]
    out += _y_grid(yticks, y_of, ML, ML + pw)
    for i, count in enumerate(h.counts):
        x0, x1 = x_of(h.edges[i]), x_of(h.edges[i + 1])
        gap = 1.0 if x1 - x0 > 4 else 0.0
        height = count * scale
        closed = "]" if i == len(h.counts) - 1 else ")"
        out.append(
            f'<rect class="bar {color}" x="{_c(x0 + gap / 2)}" y="{_c(MT + ph - height)}" '
            f'width="{_c(max(x1 - x0 - gap, 0.5))}" height="{_c(height)}" data-count="{count}">'
            f"<title>[{_e(_num(h.edges[i]))}, {_e(_num(h.edges[i + 1]))}{closed}: {count:,}</title></rect>"
        )
    y_base = MT + ph
    out.append(f'<line class="axis" x1="{ML}" y1="{_c(y_base)}" x2="{_c(ML + pw)}" y2="{_c(y_base)}"/>')
    for t in _nice_ticks(lo, hi, 6):
        x = x_of(t)
        out.append(f'<line class="axis" x1="{_c(x)}" y1="{_c(y_base)}" x2="{_c(x)}" y2="{_c(y_base + 4)}"/>')
        out.append(f'<text class="tick" x="{_c(x)}" y="{_c(y_base + 16)}" text-anchor="middle">{_e(_tick(t))}</text>')
    if lo < 0 < hi:
        x = x_of(0.0)
        out.append(f'<line class="zero" x1="{_c(x)}" y1="{MT}" x2="{_c(x)}" y2="{_c(y_base)}"/>')
    out += _axis_labels(W, H, xlabel, ylabel, MT, ph)
    out.append("</svg>")
    return "\n".join(out)


def svg_columns(labels: Sequence[str], values: Sequence[int], xlabel: str, ylabel: str, color: str = "c1") -> str:
    """Vertical bars over categories (e.g. number of groups per group size)."""
    pw, ph = W - ML - MR, H - MT - MB
    n = max(len(values), 1)
    yticks, top = _count_axis(max(values, default=1))
    scale = ph / top
    band = min(pw / n, 70.0)
    left = ML + (pw - band * n) / 2
    every = max(1, math.ceil(n / 24))
    out = [_svg_open(W, H, f"{ylabel} by {xlabel}")]
    out += _y_grid(yticks, lambda c: MT + ph - c * scale, ML, ML + pw)
    y_base = MT + ph
    for i, (label, v) in enumerate(zip(labels, values)):
        x0 = left + i * band + band * 0.15
        height = v * scale
        out.append(f'<rect class="bar {color}" x="{_c(x0)}" y="{_c(y_base - height)}" width="{_c(band * 0.7)}" '
                   f'height="{_c(height)}" data-count="{v}"><title>{_e(label)}: {v:,}</title></rect>')
        if i % every == 0:
            out.append(f'<text class="tick" x="{_c(x0 + band * 0.35)}" y="{_c(y_base + 16)}" '
                       f'text-anchor="middle">{_e(label)}</text>')
    out.append(f'<line class="axis" x1="{ML}" y1="{_c(y_base)}" x2="{_c(ML + pw)}" y2="{_c(y_base)}"/>')
    out += _axis_labels(W, H, xlabel, ylabel, MT, ph)
    out.append("</svg>")
    return "\n".join(out)


def svg_hbars(items: Sequence[tuple[str, float, str]], xlabel: str, fmt=_num, percent: bool = False) -> str:
    """Horizontal bars, one per ``(label, value, color)``; values >= 0, each bar labelled with its value."""
    n = max(len(items), 1)
    label_w = min(260.0, 14 + 6.4 * max((len(label) for label, _, _ in items), default=4))
    row_h, mt, mb = 20, 8, 40
    w, h = W, mt + n * row_h + mb
    pw = w - label_w - MR - 56
    vmax = max((v for _, v, _ in items), default=0.0)
    ticks = _nice_ticks(0.0, vmax, 4) if vmax > 0 else [0.0, 1.0]
    top = ticks[-1] if ticks[-1] >= vmax else ticks[-1] + (ticks[1] - ticks[0] if len(ticks) > 1 else vmax)
    top = top or 1.0
    tick_fmt = (lambda t: f"{100 * t:.3g}%") if percent else _tick
    out = [_svg_open(w, h, xlabel)]
    y_base = mt + n * row_h
    for t in (ticks if ticks[-1] >= vmax else ticks + [top]):
        x = label_w + t / top * pw
        out.append(f'<line class="grid" x1="{_c(x)}" y1="{mt}" x2="{_c(x)}" y2="{_c(y_base)}"/>')
        out.append(f'<text class="tick" x="{_c(x)}" y="{_c(y_base + 14)}" text-anchor="middle">{_e(tick_fmt(t))}</text>')
    for i, (label, v, color) in enumerate(items):
        y = mt + i * row_h
        width = v / top * pw
        shown = f"{100 * v:.3g}%" if percent else fmt(v)
        out.append(f'<text class="tick" x="{_c(label_w - 6)}" y="{_c(y + row_h / 2 + 4)}" text-anchor="end">{_e(label)}</text>')
        out.append(f'<rect class="bar {color}" x="{_c(label_w)}" y="{_c(y + 3)}" width="{_c(width)}" '
                   f'height="{row_h - 6}" data-value="{_e(repr(float(v)))}"><title>{_e(label)}: {_e(shown)}</title></rect>')
        out.append(f'<text class="tick" x="{_c(label_w + width + 4)}" y="{_c(y + row_h / 2 + 4)}">{_e(shown)}</text>')
    out.append(f'<line class="axis" x1="{_c(label_w)}" y1="{mt}" x2="{_c(label_w)}" y2="{_c(y_base)}"/>')
    out.append(f'<text class="label" x="{_c(label_w + pw / 2)}" y="{_c(h - 8)}" text-anchor="middle">{_e(xlabel)}</text>')
    out.append("</svg>")
    return "\n".join(out)


def svg_series(labels: Sequence[str], values: Sequence[float], xlabel: str, ylabel: str, color: str = "c1") -> str:
    """A value per ordered category (e.g. per batch), as points joined by a line."""
    pw, ph = W - ML - MR, H - MT - MB
    n = len(values)
    lo, hi = min(values), max(values)
    if hi == lo:
        pad = max(abs(lo) * 0.1, 1e-12)
        lo, hi = lo - pad, hi + pad
    ticks = _nice_ticks(lo, hi, 4)
    step = ticks[1] - ticks[0] if len(ticks) > 1 else (hi - lo)
    lo, hi = min(lo, ticks[0]), max(hi, ticks[-1])
    if ticks[0] > lo + 1e-15:
        lo = ticks[0] - step
    if ticks[-1] < hi - 1e-15:
        hi = ticks[-1] + step
    ticks = _nice_ticks(lo, hi, 4)

    inset = 14.0  # keep the end points and their labels inside the plot

    def x_of(i: int) -> float:
        return ML + (pw / 2 if n == 1 else inset + i / (n - 1) * (pw - 2 * inset))

    def y_of(v: float) -> float:
        return MT + ph - (v - lo) / (hi - lo) * ph

    out = [_svg_open(W, H, f"{ylabel} by {xlabel}")]
    out += _y_grid(ticks, y_of, ML, ML + pw)
    y_base = MT + ph
    out.append(f'<line class="axis" x1="{ML}" y1="{_c(y_base)}" x2="{_c(ML + pw)}" y2="{_c(y_base)}"/>')
    points = " ".join(f"{_c(x_of(i))},{_c(y_of(v))}" for i, v in enumerate(values))
    out.append(f'<polyline class="line {color}" points="{points}"/>')
    every = max(1, math.ceil(n / 8))
    for i, (label, v) in enumerate(zip(labels, values)):
        if n <= 200:
            out.append(f'<circle class="dot {color}" cx="{_c(x_of(i))}" cy="{_c(y_of(v))}" r="3">'
                       f"<title>{_e(label)}: {_e(_num(v))}</title></circle>")
        if i % every == 0 or i == n - 1:
            anchor = "middle" if n == 1 else ("start" if i == 0 else "end" if i == n - 1 else "middle")
            out.append(f'<text class="tick" x="{_c(x_of(i))}" y="{_c(y_base + 16)}" text-anchor="{anchor}">{_e(label)}</text>')
    out += _axis_labels(W, H, xlabel, ylabel, MT, ph)
    out.append("</svg>")
    return "\n".join(out)


def svg_stack(parts: Sequence[tuple[str, int, str]]) -> str:
    """One horizontal bar split into ``(label, count, color)`` segments, widths proportional to the counts."""
    w, h, x0, bar_w = 1000, 34, 0.0, 1000.0
    total = sum(v for _, v, _ in parts) or 1
    out = [_svg_open(w, h, "token anatomy", "chart stack")]
    for label, v, color in parts:
        width = v / total * bar_w
        out.append(f'<rect class="bar {color}" x="{_c(x0)}" y="2" width="{_c(width)}" height="30" data-count="{v}">'
                   f"<title>{_e(label)}: {v:,} ({_pct(v, total)})</title></rect>")
        x0 += width
    out.append("</svg>")
    legend = "".join(f'<span class="key"><span class="swatch {color}"></span>{_e(label)} {_e(_num(v))} '
                     f'({_pct(v, total)})</span>' for label, v, color in parts)
    return "\n".join(out) + f'\n<div class="legend">{legend}</div>'


# ============================================================================ sections
def _stats_rows(items: Sequence[tuple[str, Stats]]) -> str:
    return _table(
        ("", "count", "mean", "std", "min", "max", "positive", "negative", "zero"),
        [(name, s.count, s.mean, s.std, s.min, s.max, _pct(s.fraction_positive), _pct(s.fraction_negative),
          _pct(s.fraction_zero)) for name, s in items], align="ln",
    )


def _config_value(v: Any) -> str:
    if isinstance(v, str):
        return v
    return json.dumps(v, default=str)


def _stages(r: Report) -> list[str]:
    """The stage order as run (SEMANTICS §10), from what the report says was on."""
    cfg = r.config
    score = cfg.get("score_column", "score")
    if cfg.get("reward_components"):
        score = "reward components " + ", ".join(map(str, cfg["reward_components"]))
    stages = ["validate", f"score assembly ({score})"]
    if r.overlong is not None:
        stages.append(f"DAPO overlong shaping (buffer {cfg.get('overlong_buffer_len')})")
    if r.kl.enabled:
        stages.append(f"KL shaping ({r.kl.penalty}, {r.kl.ctrl}, coef {_num(r.kl.coef)}) on the original mask")
    if cfg.get("rollout_rs"):
        stages.append(f"rollout rejection ({cfg['rollout_rs']}, thresholds {cfg.get('rollout_rs_threshold')}) "
                      "rewrites response_mask")
    if cfg.get("rollout_is"):
        stages.append(f"rollout importance weights ({cfg['rollout_is']}, threshold {cfg.get('rollout_is_threshold')})")
    stages.append(f"estimator {cfg.get('estimator')}")
    stages.append("write")
    return stages


def _section_inputs(r: Report) -> str:
    files = _table(("file", "rows", "tokens"),
                   [(f.path, f.rows, f.tokens) for f in r.inputs.files] + [(_Html("<b>total</b>"), r.inputs.rows, r.inputs.tokens)],
                   align="ln")
    out = [f'<div class="scroll">{files}</div>' if len(r.inputs.files) > 12 else files]
    given = [p for p in r.inputs.paths if p not in {f.path for f in r.inputs.files}]
    if given:
        out.append(_kv([("given as", ", ".join(r.inputs.paths))]))
    out.append(_kv([("output", r.output if r.output else "none (computed in memory)")]))
    return "\n".join(out)


def _section_config(r: Report) -> str:
    stages = "".join(f"<li>{_e(s)}</li>" for s in _stages(r))
    plain = "".join(f'<div><span class="k">{_e(k)}</span> <code>{_e(_config_value(v))}</code></div>'
                    for k, v in r.config.items() if not isinstance(v, dict))
    nested = [(k, v) for k, v in r.config.items() if isinstance(v, dict)]
    out = [f'<h3>Stages, in the order they ran</h3>\n<ol class="stages">{stages}</ol>',
           f'<h3>Settings</h3>\n<div class="settings">{plain}</div>']
    for k, v in nested:
        out.append(f"<h3>{_e(k)}</h3>\n<pre>{_e(json.dumps(v, indent=2, default=str))}</pre>")
    return "\n".join(out)


def _section_tokens(r: Report, f: Figures) -> str:
    t = r.tokens
    parts = [("actor, used", t.used, "c1"), ("actor, rejected", t.rejected, "c5"),
             ("tool observation", t.observation, "c2"), ("padding", t.padding, "c4")]
    table = _table(("tokens", "count", "share"), align="ln", rows=[
        ("total", t.total, _pct(t.total, t.total)),
        ("actor (response_mask 1)", t.actor, _pct(t.actor, t.total)),
        ("tool observation (0, not padding)", t.observation, _pct(t.observation, t.total)),
        ("padding", t.padding, _pct(t.padding, t.total)),
        ("rejected by rollout rejection", t.rejected, _pct(t.rejected, t.total)),
        ("used by the estimator", t.used, _pct(t.used, t.total)),
    ])
    chart = ""
    if f.actor_tokens:
        chart = _figure("Actor tokens per row", svg_histogram(
            f.actor_tokens, "actor tokens per row (response_mask 1, before rejection)", "rows", "c1"))
    return "\n".join([svg_stack(parts), _charts(f"<div>{table}</div>", chart)])


def _section_groups(r: Report, f: Figures) -> str:
    g = r.groups
    if g.count == 0:
        return _kv([("batches", g.batches)]) + "\n" + _muted("No uid column: no groups.")
    sizes = sorted(((int(k), v) for k, v in g.sizes.items()))
    table = _kv([
        ("groups", g.count), ("batches", g.batches),
        ("group sizes (rows × groups)", ", ".join(f"{k}×{v}" for k, v in sizes)),
        ("singleton groups (one row)", g.singletons),
        ("all-equal groups (2+ rows, equal total rewards)", g.all_equal),
    ])
    size_chart = _figure("Group sizes", svg_columns([str(k) for k, _ in sizes], [v for _, v in sizes],
                                                    "rows per group", "groups", "c1"))
    spread = ""
    if f.group_spread:
        spread = _figure("Reward spread per group", svg_histogram(
            f.group_spread, "max − min total reward within a group (groups of 2+ rows)", "groups", "c3"),
            "A spread of 0 is an all-equal group: no learning signal from it.")
    return _charts(f"<div>{table}</div>", size_chart, spread)


def _section_scores(r: Report, f: Figures) -> str:
    out = [_stats_rows([("score total per row (before shaping)", r.scores.score_total),
                        ("reward total per row (after shaping, R_i)", r.scores.reward_total)])]
    figs = []
    if f.score_total:
        figs.append(_figure("Score totals per row, before shaping",
                            svg_histogram(f.score_total, "total score per row", "rows", "c2")))
    if f.reward_total:
        figs.append(_figure("Reward totals per row, after shaping",
                            svg_histogram(f.reward_total, "total reward per row (R_i)", "rows", "c1")))
    out.append(_charts(*figs))
    if r.overlong is not None:
        out.append("<h3>DAPO overlong shaping</h3>\n" + _kv(list(r.overlong.items())))
    if r.sessions is not None:
        out.append("<h3>Multi-output sessions</h3>\n" + _kv(list(r.sessions.items())))
    return "\n".join(out)


def _section_kl(r: Report) -> str:
    kl = r.kl
    if not kl.enabled:
        return _muted(f"KL shaping off (kl_coef {_num(kl.coef)}); penalty {kl.penalty}, controller {kl.ctrl}.")
    out = [_kv([("penalty", kl.penalty), ("controller", kl.ctrl), ("coefficient (initial)", kl.coef),
                ("mean KL (actor/reward_kl_penalty)", kl.mean)])]
    if kl.batches:
        out.append('<div class="scroll">' + _table(
            ("batch", "rows", "KL (mean of row means)", "coefficient"), align="ln", rows=
            [(b.batch if b.batch is not None else "all rows", b.rows, b.kl, b.coef) for b in kl.batches]) + "</div>")
    if len(kl.batches) > 1:
        labels = [b.batch if b.batch is not None else str(i) for i, b in enumerate(kl.batches)]
        out.append(_charts(
            _figure("KL coefficient per batch", svg_series(labels, [b.coef for b in kl.batches],
                                                           "batch (in the order the controller stepped)", "coefficient β", "c1")),
            _figure("KL per batch", svg_series(labels, [b.kl for b in kl.batches], "batch", "mean KL estimate", "c2")),
        ))
    return "\n".join(out)


def _rs_options(r: Report, metrics: dict[str, Any]) -> list[str]:
    configured = [o.strip() for o in str(r.config.get("rollout_rs") or "").split(",") if o.strip()]
    return [o for o in configured if f"rollout_rs_{o}_masked_fraction" in metrics]


def _rejection_bars(r: Report, metrics: dict[str, Any], prefix: str = "") -> list[tuple[str, float, str]]:
    items = []
    for option in _rs_options(r, metrics):
        items.append((f"{prefix}{option}: tokens", float(metrics[f"rollout_rs_{option}_masked_fraction"]), "c1"))
        seq = metrics.get(f"rollout_rs_{option}_seq_masked_fraction")
        if seq is not None:
            items.append((f"{prefix}{option}: rows", float(seq), "c2"))
    if "rollout_rs_masked_fraction" in metrics:
        items.append((f"{prefix}all options: tokens", float(metrics["rollout_rs_masked_fraction"]), "c1"))
        if "rollout_rs_seq_masked_fraction" in metrics:
            items.append((f"{prefix}all options: rows", float(metrics["rollout_rs_seq_masked_fraction"]), "c2"))
    return items


def _metric_value(v: Any) -> str:
    return _num(v) if v is None or isinstance(v, (int, float)) else _config_value(v)


def _metric_tables(r: Report, metrics: dict[str, Any]) -> tuple[str, str]:
    """verl's metrics of one batch: a table of ``rollout_rs_<option>_*`` by option, then the others."""
    options = _rs_options(r, metrics)
    claimed: dict[str, tuple[str, str]] = {}
    for option in sorted(options, key=len):  # a longer option name that shares a prefix claims its own keys
        prefix = f"rollout_rs_{option}_"
        claimed.update({k: (option, k[len(prefix):]) for k in metrics if k.startswith(prefix)})
    table = rest = ""
    if options:
        suffixes: list[str] = []
        for option, suffix in claimed.values():
            if suffix not in suffixes:
                suffixes.append(suffix)
        value = {v: metrics[k] for k, v in claimed.items()}
        table = "<h3>Per rejection option (rollout_rs_&lt;option&gt;_…)</h3>\n" + _table(
            ["metric"] + options, [[s] + [_metric_value(value.get((o, s))) for o in options] for s in suffixes],
            align="ln")
    items = "".join(f'<div><span class="k">{_e(k)}</span> <code>{_e(_metric_value(v))}</code></div>'
                   for k, v in metrics.items() if k not in claimed)
    if items:
        rest = f'<h3>Rejection totals, importance weights and off-policy metrics</h3>\n<div class="settings">{items}</div>'
    return table, rest


def _section_rejection(r: Report) -> str:
    rr = r.rollout_rejection
    if not rr:
        return _muted("Rollout correction not run (it runs when old_log_probs and rollout_log_probs are present).")
    out = []
    per_batch = rr.get("batches") if isinstance(rr.get("batches"), dict) else None
    if per_batch is None:
        bars = _rejection_bars(r, rr)
        chart = _figure("Rejected fraction per option", svg_hbars(
            bars, "fraction rejected (tokens: of valid tokens; rows: of rows with a rejected token)", percent=True)) if bars else ""
        table, rest = _metric_tables(r, rr)
        return "\n".join([_charts(chart, f"<div>{table}</div>" if table else ""), rest])
    names = list(per_batch)
    bars = [b for name in names[:30] for b in _rejection_bars(r, per_batch[name], f"{name} · ")]
    if bars:
        note = f"first 30 of {len(names)} batches" if len(names) > 30 else ""
        out.append(_charts(_figure("Rejected fraction per batch and option", svg_hbars(
            bars, "fraction rejected (tokens / rows)", percent=True), note)))
    keys: list[str] = []
    for metrics in per_batch.values():
        keys += [k for k in metrics if k not in keys]
    rows = [[k] + [_metric_value(per_batch[n].get(k)) for n in names] for k in keys]
    out.append('<div class="scroll">' + _table(["metric (verl rollout_corr/…)"] + names, rows, align="ln") + "</div>")
    return "\n".join(out)


def _warning_count(r: Report, code: str) -> int:
    return sum(w.count for w in r.warnings if w.code == code)


def _section_advantages(r: Report, f: Figures) -> str:
    out = [_stats_rows([("advantages per valid token", r.advantages), ("returns per valid token", r.returns)])]
    figs = []
    if f.advantages:
        figs.append(_figure("Advantages over valid tokens", svg_histogram(
            f.advantages, "advantage (per valid token)", "tokens", "c1"),
            f"{f.advantages.nonfinite:,} non-finite value(s) left out" if f.advantages.nonfinite else ""))
    if f.returns:
        figs.append(_figure("Returns over valid tokens", svg_histogram(
            f.returns, "return (per valid token)", "tokens", "c3"),
            f"{f.returns.nonfinite:,} non-finite value(s) left out" if f.returns.nonfinite else ""))
    out.append(_charts(*figs))
    out.append(_dead_signal(r))
    if getattr(r, "whitening", None):
        out.append("<h3>Whitening of the raw advantages, per batch</h3>\n" + '<div class="scroll">' + _table(
            ("batch", "valid tokens", "mean", "variance (unbiased)"),
            [(w.get("batch") if w.get("batch") is not None else "all rows", w.get("tokens"), w.get("mean"), w.get("var"))
             for w in r.whitening], align="ln") + "</div>")
    return "\n".join(out)


DEAD_CAUSES = {
    "rejected": "rejected by rollout rejection",
    "all_equal_group": "in an all-equal group",
    "singleton": "in a singleton group",
    "other": "other (e.g. the estimator's own zeros)",
}


def _dead_signal(r: Report) -> str:
    """Actor tokens whose advantage is exactly 0, by cause (the report's ``dead_signal``), and the rows and
    groups behind them."""
    d = getattr(r, "dead_signal", None) or {}
    causes = d.get("causes") or {}
    actor = d.get("actor_tokens")
    tokens = _table(("actor tokens with advantage exactly 0", "tokens", "share of actor tokens"), align="ln", rows=[
        ("all causes", d.get("zero_advantage_tokens"), _pct(d.get("zero_advantage_tokens"), actor)),
    ] + [(DEAD_CAUSES.get(k, k), v, _pct(v, actor)) for k, v in causes.items()]) if d else ""
    sources = _table(("where the learning signal is lost", "count"), align="ln", rows=[
        ("groups of 2+ rows with equal total rewards", r.groups.all_equal),
        ("singleton groups (the estimator's fallback)", r.groups.singletons),
        ("rows without an actor token", _warning_count(r, "row_without_actor_tokens")),
        ("rows whose every valid token was rejected", _warning_count(r, "row_fully_rejected")),
    ])
    chart = ""
    if causes and actor:
        chart = _figure("Zero-advantage actor tokens by cause", svg_hbars(
            [(DEAD_CAUSES.get(k, k), float(v) / actor, "c5") for k, v in causes.items()],
            "share of actor tokens whose advantage is exactly 0", percent=True))
    return "<h3>Dead signal</h3>\n" + _charts(chart, f"<div>{tokens}\n{sources}</div>")


def _section_warnings(r: Report) -> str:
    if not r.warnings:
        return '<p class="ok">No warnings.</p>'
    rows = []
    for w in r.warnings:
        code = _Html(f'<code id="warning-{_e(w.code)}" class="warn">{_e(w.code)}</code>')
        first = _Html("<br>".join(f"<code>{_e(x)}</code>" for x in w.where) or "–")
        rows.append((code, w.count, first, w.message))
    return _table(("code", "count", "first rows (file:row)", "what it means"), rows, align="lnll",
                  cls="warnings")


def _section_timing(r: Report) -> str:
    t = r.timing
    total = t.seconds.get("total")
    stages = [(k, v) for k, v in t.seconds.items() if k != "total"]
    table = _kv([("device", t.device), ("tokens per second", f"{t.tokens_per_second:,.0f}"), ("total seconds", total)])
    chart = _figure("Seconds per stage", svg_hbars(
        [(k, v, "c1") for k, v in stages], "seconds (summed over chunks and passes)", fmt=lambda v: f"{v:.3g} s")) if stages else ""
    return _charts(f"<div>{table}</div>", chart)


# ============================================================================ page
CSS = """
:root{--bg:#ffffff;--fg:#1d2026;--muted:#5d6570;--line:#d9dde3;--panel:#f6f7f9;
--c1:#3f73b0;--c2:#e07b1a;--c3:#3d8f3a;--c4:#8f959c;--c5:#d0433f;--warn:#a35200;--ok:#2b7a2b}
@media (prefers-color-scheme: dark){:root{--bg:#15171b;--fg:#e4e7eb;--muted:#9aa3ae;--line:#353b43;
--panel:#1d2025;--c1:#6ea0dc;--c2:#f29a45;--c3:#6cbf66;--c4:#8a9098;--c5:#ef6b66;--warn:#ffb454;--ok:#7fd17f}}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--fg);font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif}
main{max-width:1240px;margin:0 auto;padding:20px 28px 48px}
h1{font-size:24px;margin:0 0 4px}h2{font-size:19px;margin:34px 0 10px;padding-bottom:4px;border-bottom:2px solid var(--line)}
h3{font-size:15px;margin:18px 0 6px}
.sub,.muted,.note{color:var(--muted)}.note{margin:4px 0 0;font-size:12px}
a,a:visited{color:var(--c1)}
nav{margin:12px 0 4px;display:flex;flex-wrap:wrap;gap:6px 14px}nav a{color:var(--c1);text-decoration:none}
.cards{display:flex;flex-wrap:wrap;gap:10px;margin-top:12px}
.card{background:var(--panel);border:1px solid var(--line);border-radius:6px;padding:8px 14px;min-width:130px}
.card b{display:block;font-size:18px;font-variant-numeric:tabular-nums}.card span{color:var(--muted);font-size:12px}
table{border-collapse:collapse;margin:6px 0 10px}
th,td{padding:4px 12px 4px 0;border-bottom:1px solid var(--line);text-align:left;vertical-align:top}
th{font-weight:600;color:var(--muted)}th.n,td.n{text-align:right;padding-left:12px;font-variant-numeric:tabular-nums}
table.kv td:first-child{color:var(--muted);padding-right:18px}table.kv td.n{text-align:left;padding-left:0}
table.warnings td:last-child{max-width:560px}
code,pre{font-family:ui-monospace,"SFMono-Regular",Menlo,Consolas,"DejaVu Sans Mono",monospace;font-size:12.5px}
pre{background:var(--panel);border:1px solid var(--line);padding:8px;overflow:auto}
code.warn{color:var(--warn);font-weight:600}.ok{color:var(--ok);font-weight:600}
.scroll{overflow:auto;max-height:420px;max-width:100%}
.charts{display:grid;grid-template-columns:repeat(auto-fill,minmax(460px,1fr));gap:14px;margin:10px 0;align-items:start}
.settings{display:grid;grid-template-columns:repeat(auto-fill,minmax(290px,1fr));gap:2px 18px}
.settings div{border-bottom:1px solid var(--line);padding:3px 0;overflow-wrap:anywhere}.settings .k{color:var(--muted)}
figure{margin:0;background:var(--panel);border:1px solid var(--line);border-radius:6px;padding:8px 10px}
figcaption{font-weight:600;margin-bottom:4px}
svg.chart{display:block;width:100%;max-width:640px;height:auto}svg.stack{max-width:100%;margin:6px 0}
svg text{fill:var(--fg);font-size:11px}svg text.label{fill:var(--muted);font-size:12px}
svg .grid{stroke:var(--line);stroke-width:1}svg .axis{stroke:var(--muted);stroke-width:1}
svg .zero{stroke:var(--fg);stroke-width:1;stroke-dasharray:4 3;opacity:.6}
svg .line{fill:none;stroke-width:2}
.c1{fill:var(--c1);stroke:var(--c1)}.c2{fill:var(--c2);stroke:var(--c2)}.c3{fill:var(--c3);stroke:var(--c3)}
.c4{fill:var(--c4);stroke:var(--c4)}.c5{fill:var(--c5);stroke:var(--c5)}svg rect.bar{stroke:none}
svg polyline.line{fill:none}
.legend{display:flex;flex-wrap:wrap;gap:4px 18px;font-size:12.5px;margin-bottom:8px}
.swatch{display:inline-block;width:11px;height:11px;border-radius:2px;margin-right:5px;vertical-align:-1px}
.swatch.c1{background:var(--c1)}.swatch.c2{background:var(--c2)}.swatch.c3{background:var(--c3)}
.swatch.c4{background:var(--c4)}.swatch.c5{background:var(--c5)}
ol.stages{margin:4px 0 8px;padding-left:22px}
footer{margin-top:40px;color:var(--muted);font-size:12px}
""".strip()


def _header(r: Report) -> str:
    estimator = str(r.config.get("estimator", "?"))
    files = len(r.inputs.files)
    sub = (f"rladv {r.rladv_version} · estimator {estimator} · {r.inputs.rows:,} rows · {r.inputs.tokens:,} tokens "
           f"from {files} file{'s' if files != 1 else ''} · device {r.timing.device}")
    n_warn = len(r.warnings)
    cards = [
        ("rows", _num(r.inputs.rows)), ("tokens", _num(r.inputs.tokens)),
        ("actor tokens used", f"{_num(r.tokens.used)} ({_pct(r.tokens.used, r.tokens.total)})"),
        ("groups", _num(r.groups.count)), ("advantage mean ± std", f"{_num(r.advantages.mean)} ± {_num(r.advantages.std)}"),
        ("warnings", _Html(f'<a href="#warnings">{n_warn}</a>') if n_warn else "0"),
    ]
    nav = "".join(f'<a href="#{sid}">{_e(title)}</a>' for sid, title in SECTIONS)
    card_html = "".join(f'<div class="card"><b>{_e(v)}</b><span>{_e(k)}</span></div>' for k, v in cards)
    return (f'<header><h1>rladv run report</h1>\n<p class="sub">{_e(sub)}</p>\n'
            f'<div class="cards">{card_html}</div>\n<nav>{nav}</nav></header>')


def render_html(report: Report, figures: Optional[Figures] = None) -> str:
    """The whole page as one string: same ``report`` and ``figures`` -> the same bytes."""
    r, f = report, figures or Figures()
    body = {
        "inputs": _section_inputs(r),
        "config": _section_config(r),
        "tokens": _section_tokens(r, f),
        "groups": _section_groups(r, f),
        "scores": _section_scores(r, f),
        "kl": _section_kl(r),
        "rejection": _section_rejection(r),
        "advantages": _section_advantages(r, f),
        "warnings": _section_warnings(r),
        "timing": _section_timing(r),
    }
    more = f" and {len(r.inputs.paths) - 1} more" if len(r.inputs.paths) > 1 else ""
    title = f"rladv report: {r.config.get('estimator', '?')} on {r.inputs.paths[0] if r.inputs.paths else '?'}{more}"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        '<head>\n<meta charset="utf-8">\n<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f'<meta name="color-scheme" content="light dark">\n<title>{_e(title)}</title>\n<style>\n{CSS}\n</style>\n</head>',
        "<body>\n<main>",
        _header(r),
    ]
    for sid, heading in SECTIONS:
        parts.append(f'<section id="{sid}">\n<h2>{_e(heading)}</h2>\n{body[sid]}\n</section>')
    parts.append(f"<footer>Made by rladv {_e(r.rladv_version)}; this file is self-contained "
                 "(no scripts, nothing loaded from the network).</footer>")
    parts.append("</main>\n</body>\n</html>\n")
    # ASCII only (non-ASCII as character references): the bytes do not depend on the locale's encoding
    return "\n".join(parts).encode("ascii", "xmlcharrefreplace").decode("ascii")


def write_html(path: str | os.PathLike, report: Report, figures: Optional[Figures] = None) -> None:
    """Write ``render_html(report, figures)`` to ``path`` atomically (temporary file + rename)."""
    from .io import write_json_atomic

    write_json_atomic(os.fspath(path), render_html(report, figures))
