"""The comparison as one self-contained HTML page, in the run report's chrome (``report.page``): the runs, the
pairs, and per pair the scatter of its token advantages and the groups that differ most. A pure function of the
``Comparison`` and its pairs' samples: the same comparison gives the same bytes (timing is left out)."""
from __future__ import annotations

import numpy as np

from ..report import plots
from ..report.page import Html, cards, charts, e, figure, kv, muted, num, page, pct, table

SCATTER_DPI = 150
DEFINITIONS = (
    ("correlation", "Pearson's r of the two runs' advantages over the tokens whose response_mask is 1 in both."),
    ("B rescales A", "shown when B = k × A on every token valid in both: a correlation of 1 says B is A scaled and "
                     "shifted; this says it is A scaled, by k."),
    ("rows flipped", "rows whose advantage (the mean over the row's own valid tokens) is > 0 in one run and < 0 in "
                     "the other, of the rows with valid tokens in both."),
    ("weight > 2x", "tokens whose advantage's magnitude changes by more than 2x: |b| > 2|a| or |a| > 2|b|. 0 in one "
                    "run and not in the other counts; 0 in both does not; exactly 2x does not."),
    ("mean |A-B|", "the mean absolute difference of the two runs' advantages over the tokens valid in both; per "
                   "group, over the group's tokens valid in both."),
    ("signal", "each run's verdict: the share of actor tokens that carry learning signal (rladv compute's)."),
)


def scatter(a: np.ndarray, b: np.ndarray, xlabel: str, ylabel: str, name: str) -> str:
    """One point per sampled token ``(a, b)``, translucent (equal advantages pile up), and ``b = a`` dashed. The
    points are one embedded PNG at ``SCATTER_DPI`` (as SVG elements they would take ~110 bytes each); axes and
    text stay vector."""
    with plots._figure(3.6) as (fig, out):
        fig.set_dpi(SCATTER_DPI)
        ax = fig.subplots()
        ax.scatter(a, b, s=7, alpha=0.35, linewidths=0, color=plots.COLORS[0], rasterized=True)
        lo, hi = float(min(a.min(), b.min())), float(max(a.max(), b.max()))
        ax.plot([lo, hi], [lo, hi], color=plots.INK, linestyle="--", linewidth=1)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
    return plots._inline(out[0], f"{ylabel} against {xlabel}, one point per sampled token", name)


def _level(text: str, level: str) -> Html:
    return Html(f'<span class="lvtext lv-{e(level)}">{e(text)}</span>')


def _runs(c) -> str:
    rows = []
    for r in c.runs:
        causes = Html("<br>".join(f"<code>{e(x.code)}</code> {e(pct(x.share))}" for x in r.causes) or "–")
        zero = r.dead_signal.get("zero_advantage_tokens")
        actor = r.dead_signal.get("actor_tokens")
        rows.append((r.name, Html(f"<code>{e(r.options)}</code>"), _level(r.level.upper(), r.level),
                     _level(pct(r.signal_share), r.level), f"{num(r.signal_rows)} of {num(r.rows)}", causes,
                     f"{num(r.advantages.mean)} ± {num(r.advantages.std)}", pct(zero, actor),
                     ", ".join(r.warnings) or "–"))
    return table(("run", "options", "verdict", "signal", "rows with signal", "without signal, by cause",
                  "advantage mean ± std", "advantage exactly 0", "warnings"), rows, align="lllnnlnnl")


def _pairs(c) -> str:
    return table(("A", "B", "tokens valid in both", "valid in A only", "valid in B only", "correlation",
                  "rows flipped", "weight > 2x", "mean |A-B|", "max |A-B|"), align="llnnnnnnnn", rows=[
        (p.a, p.b, p.tokens, p.tokens_only_a, p.tokens_only_b, p.correlation,
         f"{pct(p.sign_flip_share)} ({num(p.sign_flips)} of {num(p.rows)})",
         f"{pct(p.weight_changed_share)} ({num(p.weight_changed)})", p.mean_abs_diff, p.max_abs_diff)
        for p in c.pairs])


def _pair(c, k: int) -> str:
    p = c.pairs[k]
    a, b = p.sample
    plot = (figure(f"Token advantages: {p.a} against {p.b}", scatter(
        a, b, f"advantage under {p.a}", f"advantage under {p.b}", f"scatter-{k}"),
        f"{len(a):,} of the {p.tokens:,} tokens valid in both, sampled by position (the same positions for every "
        "pair); dashed: equal advantages.") if len(a) else muted("No token is valid in both runs."))
    if c.groups_by is None:
        groups = muted("No uid column: no groups to rank.")
    elif not p.groups:
        groups = muted("No group has a token valid in both runs.")
    else:
        groups = table(("group", "rows", "tokens", "mean |A-B|", "row", "that row under A, then B"), align="lnnnl",
                       rows=[(str(g.uid) if g.batch is None else f"{g.batch} {g.uid}", g.rows, g.tokens,
                              g.mean_abs_diff, Html(f"{num(g.row)}<br><small>{e(g.where)}</small>"),
                              Html("<br>".join(f"<code>{e(x)}</code>" for x in g.explain))) for g in p.groups])
        title = f"The {len(p.groups)} groups that differ most (mean |A-B| per {c.groups_by} group)"
        groups = f"<h3>{e(title)}</h3>\n{groups}"
    figures = kv([("tokens valid in both", p.tokens), ("valid in A only / B only", f"{num(p.tokens_only_a)} / "
                   f"{num(p.tokens_only_b)}"), ("correlation", p.correlation),
                  *([("B rescales A", f"B = {p.scale:.6g} × A on every token")] if p.scale is not None else []),
                  ("rows flipped", f"{pct(p.sign_flip_share)} ({num(p.sign_flips)} of {num(p.rows)})"),
                  ("weight > 2x", f"{pct(p.weight_changed_share)} ({num(p.weight_changed)})"),
                  ("mean |A-B| / max |A-B|", f"{num(p.mean_abs_diff)} / {num(p.max_abs_diff)}")])
    return "\n".join([charts(plot, f"<div>{figures}</div>"), groups])


def render_html(c) -> str:
    """The page of a ``Comparison`` as one string."""
    files = len(c.inputs.files)
    sub = (f"rladv {c.rladv_version} · {len(c.runs)} runs · {c.inputs.rows:,} rows · {c.inputs.tokens:,} tokens "
           f"from {files} file{'s' if files != 1 else ''}")
    correlated = [p for p in c.pairs if p.correlation is not None]
    least = min(correlated, key=lambda p: p.correlation, default=None)
    flipped = max(c.pairs, key=lambda p: p.sign_flip_share or 0.0)
    lowest = "–" if least is None else f"{least.correlation:.4f} ({least.a} vs {least.b})"
    headline = cards([("runs", len(c.runs)), ("rows", num(c.inputs.rows)), ("tokens", num(c.inputs.tokens)),
                      *((r.name + ": signal", _level(pct(r.signal_share), r.level)) for r in c.runs),
                      ("lowest correlation", lowest),
                      ("most rows flipped", f"{pct(flipped.sign_flip_share)} ({flipped.a} vs {flipped.b})")])
    sections = [("runs", "Runs", _runs(c)), ("pairs", "Pairs", _pairs(c))]
    sections += [(f"pair-{k}", f"{p.a} vs {p.b}", _pair(c, k)) for k, p in enumerate(c.pairs)]
    sections.append(("definitions", "What the figures mean", table(None, DEFINITIONS, cls="kv")))
    more = f" and {len(c.inputs.paths) - 1} more" if len(c.inputs.paths) > 1 else ""
    title = f"rladv compare: {', '.join(r.name for r in c.runs)} on {c.inputs.paths[0]}{more}"
    return page(title, "rladv compare", sub, headline, sections,
                f"Made by rladv {c.rladv_version}; this file is self-contained (no scripts, nothing loaded from the "
                "network). Timing is in the JSON (--json).")
