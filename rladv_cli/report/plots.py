"""The HTML pages' charts, drawn with matplotlib (Agg, no pyplot state) and returned as inline SVG text.

Same input, same bytes: the SVG carries no date or creator, its element ids are hashed with a fixed salt
(``svg.hashsalt``) and prefixed with the chart's name (unique on a page), and text stays text (``svg.fonttype none``). Charts have
transparent backgrounds and mid-grey axes and text, so they read on light and dark pages alike. matplotlib is
imported only here, on the first chart drawn.
"""
from __future__ import annotations

import html
import io
import re
from contextlib import contextmanager
from typing import Optional, Sequence

from .model import Histogram

INK = "#8a8f98"  # axes, ticks and text: mid-grey, readable on white and on near-black
COLORS = ("#4c88c8", "#e8892b", "#4fa34a", "#d9534f", "#8e6fc0", "#9a9ea5")
WIDTH, HEIGHT = 6.4, 3.0  # inches; the page scales every chart to its column


@contextmanager
def _figure(height: float = HEIGHT):
    """A matplotlib ``Figure`` in rladv's style; yields ``(figure, out)`` and appends its SVG text to ``out``."""
    import matplotlib
    from cycler import cycler
    from matplotlib.figure import Figure

    style = {
        "svg.fonttype": "none", "svg.hashsalt": "rladv", "font.family": "DejaVu Sans", "font.size": 10,
        "text.color": INK, "axes.labelcolor": INK, "axes.edgecolor": INK, "xtick.color": INK, "ytick.color": INK,
        "axes.facecolor": "none", "figure.facecolor": "none", "savefig.transparent": True,
        "axes.grid": True, "grid.color": INK, "grid.alpha": 0.3, "grid.linewidth": 0.6, "axes.axisbelow": True,
        "axes.spines.top": False, "axes.spines.right": False, "legend.frameon": False,
        "axes.prop_cycle": cycler(color=list(COLORS)), "axes.formatter.useoffset": False,
    }
    with matplotlib.rc_context(style):
        fig = Figure(figsize=(WIDTH, height), layout="constrained")
        out: list[str] = []
        yield fig, out
        buf = io.StringIO()
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
        out.append(buf.getvalue())


def _inline(svg: str, label: str, name: str) -> str:
    """The ``<svg>`` element alone (no XML prolog, no RDF metadata), with a class, an accessible label, and
    every element id (and reference to one) prefixed with ``name``, so charts on one page never share an id."""
    svg = re.sub(r"\s*<metadata>.*?</metadata>", "", svg[svg.index("<svg"):].strip(), flags=re.S)
    svg = re.sub(r'( id="|url\(#|href="#)', rf"\g<1>{name}-", svg)
    return svg.replace("<svg ", f'<svg class="plot" role="img" aria-label="{html.escape(label, quote=True)}" ', 1)


def histogram(h: Histogram, xlabel: str, ylabel: str, name: str, color: int = 0) -> str:
    """Bars over ``h``'s bins, a dashed line at 0 when the range crosses it."""
    with _figure() as (fig, out):
        ax = fig.subplots()
        widths = [b - a for a, b in zip(h.edges, h.edges[1:])]
        ax.bar(h.edges[:-1], h.counts, width=widths, align="edge", color=COLORS[color], linewidth=0)
        _zero_line(ax, h.edges[0], h.edges[-1])
        _count_axis(ax.yaxis)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(axis="x", visible=False)
    return _inline(out[0], f"histogram: {ylabel} by {xlabel}", name)


def _count_axis(axis) -> None:
    """Whole-number ticks on an axis of counts."""
    from matplotlib.ticker import MaxNLocator

    axis.set_major_locator(MaxNLocator(integer=True))


def _zero_line(ax, lo: float, hi: float) -> None:
    if lo < 0 < hi:
        ax.axvline(0.0, color=INK, linestyle="--", linewidth=1)


def overlaid(edges: Sequence[float], parts: Sequence[tuple[str, Sequence[int]]], xlabel: str, ylabel: str,
             name: str) -> str:
    """One step outline per ``(label, counts)`` over the same ``edges``, with a legend."""
    with _figure() as (fig, out):
        ax = fig.subplots()
        for i, (label, counts) in enumerate(parts):
            ax.stairs(counts, edges, label=label, color=COLORS[i % len(COLORS)], linewidth=1.6,
                      fill=len(parts) == 1, alpha=0.9)
        _zero_line(ax, edges[0], edges[-1])
        _count_axis(ax.yaxis)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.legend(fontsize=8.5, loc="best")
    return _inline(out[0], f"{ylabel} by {xlabel}, per part", name)


def bars(labels: Sequence[str], values: Sequence[float], xlabel: str, name: str, percent: bool = False,
         colors: Optional[Sequence[int]] = None, value_format: str = "{:.4g}") -> str:
    """Horizontal bars, one per label (top to bottom), each with its value written beside it."""
    height = max(1.4, 0.5 + 0.3 * len(labels))
    with _figure(height) as (fig, out):
        ax = fig.subplots()
        y = list(range(len(labels)))[::-1]
        shown = [100 * v for v in values] if percent else list(values)
        ax.barh(y, shown, color=[COLORS[c % len(COLORS)] for c in (colors or [0] * len(labels))], height=0.7)
        ax.set_yticks(y, labels)
        fmt = (lambda v: f"{v:.3g}%") if percent else value_format.format
        ax.bar_label(ax.containers[0], [fmt(v) for v in shown], padding=3, color=INK, fontsize=8.5)
        ax.margins(x=0.15)
        if min(shown, default=0) < 0 < max(shown, default=0):
            ax.axvline(0.0, color=INK, linewidth=1)
        ax.set_xlabel(xlabel)
        ax.grid(axis="y", visible=False)
    return _inline(out[0], xlabel, name)


def columns(labels: Sequence[str], values: Sequence[int], xlabel: str, ylabel: str, name: str) -> str:
    """Vertical bars over categories (e.g. groups per group size)."""
    with _figure() as (fig, out):
        ax = fig.subplots()
        ax.bar(range(len(labels)), values, color=COLORS[0], width=0.7)
        ax.set_xticks(range(len(labels)), labels)
        ax.set_xlim(-0.5 - max(0, 4 - len(labels)) / 2, len(labels) - 0.5 + max(0, 4 - len(labels)) / 2)
        _count_axis(ax.yaxis)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(axis="x", visible=False)
    return _inline(out[0], f"{ylabel} by {xlabel}", name)


def paired(labels: Sequence[str], parts: Sequence[tuple[str, Sequence[float]]], xlabel: str, ylabel: str,
           name: str) -> str:
    """Side-by-side vertical bars per category, one colour per ``(label, shares)`` in ``parts`` (shares in
    [0, 1], drawn as percentages), with a legend: e.g. each length tenth's share of the tokens and of the mass."""
    width = 0.8 / max(1, len(parts))
    with _figure() as (fig, out):
        ax = fig.subplots()
        for i, (label, shares) in enumerate(parts):
            x = [k + (i - (len(parts) - 1) / 2) * width for k in range(len(labels))]
            ax.bar(x, [100 * v for v in shares], width=width, color=COLORS[i % len(COLORS)], label=label)
        _category_ticks(ax, labels)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.legend(frameon=False, fontsize=8.5)
        ax.grid(axis="x", visible=False)
    return _inline(out[0], f"{ylabel} by {xlabel}", name)


def _category_ticks(ax, labels: Sequence[str]) -> None:
    """At most about 8 labels along an axis of ordered categories; long ones cut to their end and slanted."""
    every = max(1, len(labels) // 8)
    ticks = list(range(0, len(labels), every))
    shown = [labels[i] if len(labels[i]) <= 32 else "..." + labels[i][-29:] for i in ticks]
    slant = max(map(len, shown), default=0) > 10
    ax.set_xticks(ticks, shown, rotation=25 if slant else 0, ha="right" if slant else "center")


def series(labels: Sequence[str], values: Sequence[float], xlabel: str, ylabel: str, name: str) -> str:
    """A value per ordered category (e.g. per batch), as points joined by a line."""
    with _figure() as (fig, out):
        ax = fig.subplots()
        ax.plot(range(len(values)), values, marker="o", markersize=3.5, color=COLORS[0], linewidth=1.6)
        _category_ticks(ax, labels)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
    return _inline(out[0], f"{ylabel} by {xlabel}", name)


def lines(labels: Sequence[str], parts: Sequence[tuple[str, Sequence[Optional[float]], int]], xlabel: str,
          ylabel: str, name: str, percent: bool = False, full: bool = False,
          guides: Sequence[tuple[float, str]] = ()) -> str:
    """One line per ``(label, values, colour index)`` over ordered categories (None: a gap), with a legend when
    there are several; ``percent``: shares drawn as %, from 0 (to 100 with ``full``); ``guides``: dashed
    horizontal lines ``(y, text)`` in the plotted units."""
    with _figure() as (fig, out):
        ax = fig.subplots()
        top = 0.0
        for label, values, color in parts:
            y = [float("nan") if v is None else (100 * v if percent else v) for v in values]
            top = max([top] + [v for v in y if v == v])
            ax.plot(range(len(y)), y, marker="o", markersize=3.5, color=COLORS[color % len(COLORS)], linewidth=1.6,
                    label=label)
        for y, text in guides:
            ax.axhline(y, color=INK, linestyle="--", linewidth=0.8)
            ax.annotate(text, (1, y), xycoords=("axes fraction", "data"), ha="right", va="bottom", fontsize=8)
        if percent:
            ax.set_ylim(0, 100 if full else max(1.0, 1.15 * top))
            from matplotlib.ticker import PercentFormatter

            ax.yaxis.set_major_formatter(PercentFormatter(100, decimals=None))
        ax.set_xlim(-0.3, len(labels) - 0.7)
        _category_ticks(ax, labels)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        if len(parts) > 1:
            ax.legend(fontsize=8.5, loc="best")
    return _inline(out[0], f"{', '.join(p[0] for p in parts)} by {xlabel}", name)


def stack(parts: Sequence[tuple[str, int, int]], xlabel: str, name: str) -> str:
    """One horizontal bar split into ``(label, count, colour index)`` segments, widths proportional to the counts."""
    total = sum(v for _, v, _ in parts) or 1
    with _figure(1.5) as (fig, out):
        ax = fig.subplots()
        left = 0
        for label, v, color in parts:
            ax.barh([0], [v], left=left, color=COLORS[color], height=0.6,
                    label=f"{label}: {v:,} ({100 * v / total:.1f}%)")
            left += v
        ax.set_xlim(0, total)
        ax.set_yticks([])
        ax.set_xlabel(xlabel)
        ax.grid(visible=False)
        ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncols=2, fontsize=8.5)
    return _inline(out[0], xlabel, name)


def heatmap(x_edges: Sequence[float], y_edges: Sequence[float], counts: Sequence[Sequence[int]],
            means: Sequence[Optional[float]], xlabel: str, ylabel: str, name: str) -> str:
    """Counts per ``(x bin, y bin)`` (``counts[x][y]``, empty cells left clear), the mean ``y`` per ``x`` bin as
    an orange line, and ``y = x`` dashed (the caption says so: a legend would cover cells)."""
    import numpy as np

    with _figure(3.6) as (fig, out):
        ax = fig.subplots()
        grid = np.ma.masked_equal(np.asarray(counts, dtype=float).T, 0)
        mesh = ax.pcolormesh(x_edges, y_edges, grid, cmap="viridis", shading="flat")
        fig.colorbar(mesh, ax=ax, label="valid tokens")
        mids = [(a + b) / 2 for a, b in zip(x_edges, x_edges[1:])]
        pts = [(x, m) for x, m in zip(mids, means) if m is not None]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], color=COLORS[1], marker="o", markersize=3, linewidth=1.6)
        lo, hi = max(x_edges[0], y_edges[0]), min(x_edges[-1], y_edges[-1])
        if lo < hi:
            ax.plot([lo, hi], [lo, hi], color=INK, linestyle="--", linewidth=1)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(visible=False)
    return _inline(out[0], f"{ylabel} against {xlabel}", name)
