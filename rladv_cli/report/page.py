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


CSS = """
:root{--bg:#ffffff;--fg:#1d2026;--muted:#5d6570;--line:#d9dde3;--panel:#f6f7f9;
--c1:#3f73b0;--warn:#a35200;--ok:#2b7a2b;--bad:#c0302b}
@media (prefers-color-scheme: dark){:root{--bg:#15171b;--fg:#e4e7eb;--muted:#9aa3ae;--line:#353b43;
--panel:#1d2025;--c1:#6ea0dc;--warn:#ffb454;--ok:#7fd17f;--bad:#ff7b72}}
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
svg.plot{display:block;width:100%;height:auto}
.status-pass{color:var(--ok);font-weight:600}.status-warn{color:var(--warn);font-weight:600}.status-fail{color:var(--bad);font-weight:600}
ol.stages{margin:4px 0 8px;padding-left:22px}
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
