"""The page machinery shared by rladv's HTML pages (``compute --html``, ``inspect --html``): escaping, number
formats, tables, figure cards, the stylesheet and the page shell. Pure functions: same input, same bytes.

Every user-controlled string (paths, uids, batch names, config values, column names) goes through ``e``;
pages are ASCII (other characters become character references), so the bytes do not depend on the locale.
"""
from __future__ import annotations

import html
import json
import math
import os
from typing import Any, Iterable, Optional, Sequence

from . import plots
from .verdict import THRESHOLDS, Verdict
from .verdict import pct as share


class Html(str):
    """A string that is already HTML (not escaped again)."""


def e(x: Any) -> str:
    return x if isinstance(x, Html) else html.escape(str(x), quote=True)


def num(x: Any) -> str:
    if x is None:
        return "–"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return f"{x:,}"
    if isinstance(x, float):
        return f"{x:.6g}" if math.isfinite(x) else str(x)
    return str(x)


def pct(part: Optional[float], whole: Optional[float] = 1.0) -> str:
    if part is None or not whole:
        return "–"
    return f"{100.0 * part / whole:.2f}%"


def _cell(v: Any, cls: str = "") -> str:
    klass = f' class="{cls}"' if cls else ""
    return f"<td{klass}>{e(v) if isinstance(v, (str, Html)) else e(num(v))}</td>"


def table(header: Optional[Sequence[str]], rows: Iterable[Sequence[Any]], align: str = "l", cls: str = "") -> str:
    """A table; ``align`` gives each column's alignment (``l`` text, ``n`` right-aligned numbers), its last
    letter repeating for the remaining columns."""

    def klass(i: int) -> str:
        return "n" if (align[i] if i < len(align) else align[-1]) == "n" else ""

    out = [f'<table class="{cls}">' if cls else "<table>"]
    if header:
        out.append("<tr>" + "".join(
            f'<th class="{klass(i)}">{e(h)}</th>' if klass(i) else f"<th>{e(h)}</th>" for i, h in enumerate(header))
            + "</tr>")
    for row in rows:
        out.append("<tr>" + "".join(_cell(v, klass(i)) for i, v in enumerate(row)) + "</tr>")
    out.append("</table>")
    return "\n".join(out)


def kv(rows: Iterable[tuple[str, Any]]) -> str:
    return table(None, rows, align="l", cls="kv")


def figure(caption: str, svg: str, note: str = "") -> str:
    extra = f'<p class="note">{e(note)}</p>' if note else ""
    return f"<figure><figcaption>{e(caption)}</figcaption>\n{svg}\n{extra}</figure>"


def charts(*figures: str) -> str:
    figs = [f for f in figures if f]
    return '<div class="charts">\n' + "\n".join(figs) + "\n</div>" if figs else ""


def muted(text: str) -> str:
    return f'<p class="muted">{e(text)}</p>'


def config_value(v: Any) -> str:
    return v if isinstance(v, str) else json.dumps(v, default=str)


def stats_table(items: Sequence[tuple[str, Any]]) -> str:
    """One row per ``(name, Stats)``: count, mean, std, min, max and the sign fractions."""
    return table(
        ("", "count", "mean", "std", "min", "max", "positive", "negative", "zero"),
        [(name, s.count, s.mean, s.std, s.min, s.max, pct(s.fraction_positive), pct(s.fraction_negative),
          pct(s.fraction_zero)) for name, s in items], align="ln",
    )


def cards(items: Sequence[tuple[str, Any]]) -> str:
    """Headline numbers as ``(label, value)`` cards."""
    return '<div class="cards">' + "".join(
        f'<div class="card"><b>{e(v)}</b><span>{e(k)}</span></div>' for k, v in items) + "</div>"


# ------------------------------------------------------------------------------------ the verdict
def _bar(parts: Sequence[tuple[str, float, str]], label: str) -> str:
    """One bar split into ``(name, share of the whole, level class)`` segments, with a legend below."""
    segments = "".join(f'<span class="lv-{e(cls)}" style="width:{100 * x:.3f}%" title="{e(name)}: {e(share(x))}">'
                       "</span>" for name, x, cls in parts if x > 0)
    legend = "".join(f'<span><span class="sw lv-{e(cls)}"></span>{e(name)} {e(share(x))}</span>'
                     for name, x, cls in parts)
    return (f'<div class="bar" role="img" aria-label="{e(label)}">{segments}</div>\n'
            f'<div class="legend">{legend}</div>')


def _in_level(text: str, level: str) -> Html:
    return Html(f'<span class="lvtext lv-{e(level)}">{e(text)}</span>')


def signal_card(v: Verdict) -> tuple[str, Html]:
    """The headline card of the signal share, in the verdict's colour."""
    label = "actor tokens with learning signal" + (" (predicted)" if v.basis == "groups" else "")
    return label, _in_level(share(v.signal_share), v.level)


def verdict_card(v: Verdict) -> str:
    """The verdict at the top of a page: its level, signal share and headline, the actor tokens split by cause
    (largest first, each with an example command), the hints, and how the groups of 2+ rows split."""
    causes = sorted(v.causes, key=lambda c: -c.share)
    out = [f'<div class="verdict lv-{e(v.level)}" id="verdict">',
           f'<div class="verdict-top"><span class="badge">{e(v.level.upper())}</span>'
           f'<b class="big">{e(share(v.signal_share))}</b><span class="headline">{e(v.headline)}</span></div>',
           _bar([("carries signal", v.signal_share, "ok")] + [(c.code, c.share, c.level) for c in causes],
                f"{num(v.actor_tokens)} actor tokens: with learning signal, then by cause")]
    if v.basis == "groups":
        out.append(muted("Predicted from the groups and masks: the file has no advantages."))
    weighed = v.signal_mass_share is not None
    if causes:
        out.append("<h3>Why the rest carries none</h3>\n" + table(
            ("share", "tokens", *(("gradient mass",) if weighed else ()), "cause", "what", "example"),
            align="nnnl" if weighed else "nnl", rows=[
                (Html(f'<span class="sw lv-{e(c.level)}"></span>{e(share(c.share))}'), c.tokens,
                 *((share(c.mass_share or 0.0),) if weighed else ()),
                 Html(f'<code class="lvtext lv-{e(c.level)}">{e(c.code)}</code>'), c.message,
                 Html(f"<code>{e(c.example)}</code>") if c.example else "–") for c in causes]))
    if v.hazards:
        out.append('<h3>Gradient hazards (<a href="#gradient">what each token weighs</a>)</h3>\n' + table(
            ("level", "hazard", "what", "example"), align="lll", rows=[
                (Html(f'<span class="sw lv-{e(h.level)}"></span>{e(h.level)}'),
                 Html(f'<code class="lvtext lv-{e(h.level)}">{e(h.code)}</code>'), h.message,
                 Html(f"<code>{e(h.example)}</code>") if h.example else "–") for h in v.hazards]))
    if v.hints:
        out.append("<h3>Likely causes</h3>\n<ul>" + "".join(f"<li>{e(h)}</li>" for h in v.hints) + "</ul>")
    g = v.group_outcomes
    if g is not None:
        out.append(f"<h3>Groups of 2+ rows ({num(g.groups)}), by how their total rewards split</h3>\n" + _bar(
            [("all 0", g.all_zero, "fail"), ("all top", g.all_top, "warn"), ("other tied", g.all_equal_other, "tie"),
             ("mixed", g.mixed, "ok")], f"{num(g.groups)} groups of 2+ rows by outcome"))
    out.append("</div>")
    return "\n".join(out)


STEP_SERIES = (  # caption, y label, lines (label, StepVerdict field, colour index), y scale, guides (y, text)
    ("Signal share per step", "tokens with signal (%)", (("signal share", "signal_share", 2),), "0-100%",
     ((100 * (1 - THRESHOLDS["no_signal"][0]), "warn below"), (100 * (1 - THRESHOLDS["no_signal"][1]), "fail below"))),
    ("Tied groups per step", "groups of 2+ rows (%)", (("all-0 groups", "all_zero_share", 3),
                                                      ("all-top groups", "all_top_share", 1)), "0-100%", ()),
    ("Rejected share per step", "tokens rejected (%)", (("rejected share", "rejected_share", 4),), "%", ()),
    ("KL per step", "mean KL (nats per token)", (("KL mean", "kl_mean", 0),), "", ()),
)


def verdict_steps(v: Verdict) -> str:
    """The verdict per training step: a line chart per ``STEP_SERIES`` entry that has a value (a line per
    field with one), and a table of the steps; "" without steps."""
    if not v.steps:
        return ""
    names = [s.step.rsplit("/", 1)[-1] for s in v.steps]  # a file's name without its folder; whole in the table
    figs = []
    for caption, ylabel, fields, scale, guides in STEP_SERIES:
        parts = [(label, [getattr(s, field) for s in v.steps], color) for label, field, color in fields]
        parts = [p for p in parts if any(x is not None for x in p[1])]
        if parts:
            name = "step-" + fields[0][1].replace("_", "-")
            figs.append(figure(caption, plots.lines(names, parts, "step (in order)", ylabel, name, percent=bool(scale),
                                                    full=scale == "0-100%", guides=guides)))
    pc = lambda x: "–" if x is None else share(x)  # noqa: E731
    rows = [(s.step, s.rows, s.actor_tokens, _in_level(share(s.signal_share), s.level),
             _in_level(s.level.upper(), s.level), pc(s.singleton_share), pc(s.all_zero_share), pc(s.all_top_share),
             share(s.rejected_share), s.kl_mean) for s in v.steps]
    steps = table(("step", "rows", "actor tokens", "signal", "level", "singleton groups", "all-0 groups",
                   "all-top groups", "rejected", "KL mean"), rows, align="lnnnlnnnnn")
    return "\n".join([
        muted("Signal and rejected: shares of the step's actor tokens; all-0 and all-top: of its groups of 2+ rows; "
              "singletons: of its groups."),
        charts(*figs), f'<div class="scroll">{steps}</div>' if len(rows) > 12 else steps])


CSS = """
:root{--bg:#ffffff;--fg:#1d2026;--muted:#5d6570;--line:#d9dde3;--panel:#f6f7f9;
--c1:#3f73b0;--warn:#a35200;--ok:#2b7a2b;--bad:#c0302b;--note:#1b7a9c}
@media (prefers-color-scheme: dark){:root{--bg:#15171b;--fg:#e4e7eb;--muted:#9aa3ae;--line:#353b43;
--panel:#1d2025;--c1:#6ea0dc;--warn:#ffb454;--ok:#7fd17f;--bad:#ff7b72;--note:#5cc6e6}}
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
.card b{display:block;font-size:18px;font-variant-numeric:tabular-nums}.card>span{color:var(--muted);font-size:12px}
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
svg.plot{display:block;width:100%;height:auto}
.status-pass{color:var(--ok);font-weight:600}.status-warn{color:var(--warn);font-weight:600}.status-fail{color:var(--bad);font-weight:600}
ol.stages{margin:4px 0 8px;padding-left:22px}
.lv-ok{--lv:var(--ok)}.lv-note{--lv:var(--note)}.lv-warn{--lv:var(--warn)}.lv-fail{--lv:var(--bad)}.lv-tie{--lv:var(--muted)}
.lvtext{color:var(--lv);font-weight:600}
.verdict td.n{white-space:nowrap}
.verdict{margin-top:12px;background:var(--panel);border:1px solid var(--line);border-left:6px solid var(--lv);border-radius:6px;padding:10px 16px 6px}
.verdict-top{display:flex;align-items:baseline;gap:14px}
.badge{background:var(--lv);color:var(--bg);font-weight:700;padding:2px 10px;border-radius:4px;letter-spacing:.05em}
.verdict .big{font-size:30px;line-height:1.1;color:var(--lv);font-variant-numeric:tabular-nums;white-space:nowrap}
.verdict .headline{font-size:15px}
.verdict h3{font-size:14px;margin:12px 0 2px}.verdict ul{margin:4px 0 8px;padding-left:20px}
.bar{display:flex;height:14px;margin:8px 0 4px;border-radius:3px;overflow:hidden;background:var(--line)}
.bar span{background:var(--lv);min-width:2px;border-right:1px solid var(--panel)}
.sw{display:inline-block;width:10px;height:10px;background:var(--lv);border-radius:2px;margin-right:6px}
.legend{color:var(--muted);font-size:12px;display:flex;flex-wrap:wrap;gap:2px 16px}
footer{margin-top:40px;color:var(--muted);font-size:12px}
""".strip()


def page(title: str, heading: str, subtitle: str, headline: str, sections: Sequence[tuple[str, str, str]],
         footer: str) -> str:
    """A whole page: ``heading``, ``subtitle``, ``headline`` HTML, a link per section, then each
    ``(id, title, body HTML)`` as a ``<section>`` with an ``<h2>``; ASCII only."""
    nav = "".join(f'<a href="#{sid}">{e(t)}</a>' for sid, t, _ in sections)
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        '<head>\n<meta charset="utf-8">\n<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f'<meta name="color-scheme" content="light dark">\n<title>{e(title)}</title>\n<style>\n{CSS}\n</style>\n</head>',
        "<body>\n<main>",
        f'<header><h1>{e(heading)}</h1>\n<p class="sub">{e(subtitle)}</p>\n{headline}\n<nav>{nav}</nav></header>',
    ]
    parts += [f'<section id="{sid}">\n<h2>{e(t)}</h2>\n{body}\n</section>' for sid, t, body in sections]
    parts.append(f"<footer>{e(footer)}</footer>")
    parts.append("</main>\n</body>\n</html>\n")
    return "\n".join(parts).encode("ascii", "xmlcharrefreplace").decode("ascii")


def write_page(path: str | os.PathLike, text: str) -> None:
    """Write a page atomically (temporary file + rename)."""
    from ..io.write import write_json_atomic

    write_json_atomic(os.fspath(path), text)
