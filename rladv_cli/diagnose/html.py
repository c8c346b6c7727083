"""``rladv inspect --html``: the inspection findings as one self-contained HTML page (the run report's page
machinery and charts), the verdict first. ``render_inspection_html(ins) -> str`` is a pure function of the
``Inspection``, the same object ``inspect --json`` prints, so the page holds no number the JSON does not."""
from __future__ import annotations

from ..report import plots
from ..report.checks import STEP_TITLES
from ..report.page import (Html, cards, charts, e, figure, kv, muted, num, page, pct, signal_card, stats_table, table,
                           verdict_card, verdict_steps)
from .findings import Inspection

SECTIONS = (
    ("verdict-steps", "Verdict per step"),
    ("checks", "Checklist"),
    ("tokens", "Tokens and layout"),
    ("groups", "Groups"),
    ("scores", "Scores and rewards"),
    ("masks", "Masks"),
    ("advantages", "Advantages in the file"),
    ("columns", "Columns"),
)


def _section_checks(ins: Inspection) -> str:
    rows = []
    for c in ins.checks:
        status = Html(f'<span class="status-{e(c.status)}">{e(c.status.upper())}</span>')
        first = Html("<br>".join(f"<code>{e(w)}</code>" for w in c.where) or "–")
        rows.append((status, f"{c.step} {STEP_TITLES.get(c.step, '')}", Html(f"<code>{e(c.code)}</code>"), c.count,
                     first, c.message))
    counts = [sum(c.status == s for c in ins.checks) for s in ("pass", "warn", "fail")]
    chart = figure("Checks by status", plots.bars(["pass", "warn", "fail"], counts, "checks", "check-status",
                                                  colors=[2, 1, 3], value_format="{:.0f}"))
    return charts(chart) + "\n" + table(("status", "step", "check", "rows", "first rows (file:row)", "what it means"),
                                        rows, align="lllnll", cls="warnings")


def _section_tokens(ins: Inspection) -> str:
    t, lay, d = ins.tokens, ins.layout, ins.distributions
    actor_mask = "loss_mask 1" if ins.masks.has_loss_mask else "response_mask 1"
    parts = [("actor, used", t.used, 0), ("actor, rejected", t.rejected, 3)] if t.rejected else [("actor", t.actor, 0)]
    anatomy = figure("Token anatomy", plots.stack(
        parts + [("tool observation", t.observation, 1), ("padding", t.padding, 5)],
        "tokens (all positions of all valid rows)", "anatomy"))
    facts = table(("per row", "mean", "min", "max"), align="ln", rows=[
        ("positions", lay.length.mean, lay.length.min, lay.length.max),
        (f"assistant turns (spans of {actor_mask})", lay.turns.mean, lay.turns.min, lay.turns.max),
        ("tool-observation spans", lay.observation_spans.mean, lay.observation_spans.min, lay.observation_spans.max),
    ]) + kv([("rows ending in an observation", lay.rows_ending_in_observation),
             ("rows with padding", lay.rows_with_padding)])
    hists = [figure(caption, plots.histogram(h, xlabel, "rows", name, color))
             for caption, h, xlabel, name, color in (
                 ("Positions per row", d.length, "positions per row (tokens)", "length", 0),
                 ("Actor tokens per row", d.actor_tokens, f"actor tokens per row ({actor_mask})", "actor-tokens", 0),
                 ("Assistant turns per row", d.turns, "assistant turns per row", "turns", 1),
             ) if h is not None]
    return charts(anatomy, f"<div>{facts}</div>", *hists)


def _section_groups(ins: Inspection) -> str:
    g = ins.groups
    if g.count == 0:
        return muted("No uid column: no groups.")
    sizes = sorted((int(k), v) for k, v in g.sizes.items())
    facts = kv([("groups", g.count), ("expected rows per group", g.expected_n),
                ("singleton groups", g.singletons), (f"all-equal groups ({g.basis} totals)", g.all_equal),
                ("all-equal groups (score totals)", g.all_equal_scores)]
               + ([("sessions per uid (size × count)", ", ".join(f"{k}×{v}" for k, v in g.session_sizes.items()))]
                  if g.session_sizes is not None else []))
    chart = figure("Group sizes", plots.columns([str(k) for k, _ in sizes], [v for _, v in sizes], "rows per group",
                                                "groups", "group-sizes"))
    return charts(f"<div>{facts}</div>", chart)


def _section_scores(ins: Inspection) -> str:
    s, d = ins.scores, ins.distributions
    if s is None:
        return muted("No rm_scores or score column.")
    stats = [(f"{s.column} total per row", s.score_total)]
    if s.reward_basis != "score":
        stats.append((f"reward total per row ({s.reward_basis})", s.reward_total))
    facts = kv([("rows with a score on a response_mask 0 position", s.rows_score_on_masked_position),
                ("score tokens on tool observations", s.tokens_score_on_observation),
                ("score tokens on padding", s.tokens_score_on_padding),
                ("rows with a score before their last position", s.rows_non_terminal_score)])
    kl = ""
    if ins.kl is not None:
        kl = "<h3>KL shaping</h3>\n" + kv([
            ("penalty", ins.kl.penalty), ("coefficient", ins.kl.coef), ("mean KL estimate", ins.kl.mean),
            ("rows where shaping raised a reward", ins.kl.rows_raises_reward),
            ("rows whose total flipped sign", ins.kl.rows_flips_sign)])
    hists = [figure(caption, plots.histogram(h, xlabel, "rows", name, color)) for caption, h, xlabel, name, color in (
        ("Score totals per row", d.score_total, "total score per row (reward units)", "score-total", 1),
        ("Reward totals per row", d.reward_total, f"total reward per row, {s.reward_basis} (reward units)",
         "reward-total", 0),
    ) if h is not None]
    return "\n".join([stats_table(stats), charts(f"<div>{facts}</div>", *hists), kl])


def _section_masks(ins: Inspection) -> str:
    m = ins.masks
    rows = [("loss_mask column", m.has_loss_mask), ("attention_mask column", m.has_attention_mask),
            ("padding tokens", m.padding_tokens), ("loss_mask 1 on padding", m.loss_on_padding_tokens),
            ("rows without an actor token", m.rows_without_actor_tokens)]
    if m.loss_vs_response is not None:
        lv = m.loss_vs_response
        rows += [("rows where response_mask drops loss_mask tokens", lv.rows), ("tokens in loss_mask only", lv.loss_only_tokens)]
    return kv(rows)


def _section_advantages(ins: Inspection) -> str:
    a, d = ins.advantages, ins.dead_signal
    if a is None:
        return muted("The file has no advantages column (inspect a `rladv compute` output to see them).")
    out = [stats_table([("advantage per actor token", a)]),
           kv([("tokens with a non-zero advantage where response_mask is 0", a.masked_nonzero_tokens),
               ("rows with such tokens", a.masked_nonzero_rows)])]
    if d is not None and d.zero_tokens:
        chart = figure("Zero-advantage actor tokens by cause", plots.bars(
            list(d.by_cause), [c.share for c in d.by_cause.values()],
            f"share of actor tokens ({d.base}) with advantage exactly 0 (%)", "dead-signal", percent=True,
            colors=[3]))
        causes = table(("cause", "tokens", "share of actor tokens"), align="ln", rows=[
            ("all causes", d.zero_tokens, pct(d.share))] + [(k, c.tokens, pct(c.share)) for k, c in d.by_cause.items()])
        out.append("<h3>Dead signal</h3>\n" + charts(chart, f"<div>{causes}</div>"))
    return "\n".join(out)


def render_inspection_html(ins: Inspection) -> str:
    """The whole page as one string: the same ``ins`` gives the same bytes."""
    sub = (f"{ins.rows:,} rows ({ins.invalid_rows:,} invalid) · {ins.tokens.total:,} tokens from {len(ins.paths)} "
           f"file{'s' if len(ins.paths) != 1 else ''}" + (f" · estimator {ins.estimator}" if ins.estimator else ""))
    worst = Html(f'<span class="status-{e(ins.status)}">{e(ins.status.upper())}</span>')
    headline = verdict_card(ins.verdict) + "\n" + cards([
        signal_card(ins.verdict), ("checklist", worst), ("rows", num(ins.rows)),
        ("actor tokens", num(ins.tokens.actor)), ("groups", num(ins.groups.count)),
        ("checks failed / warned", f"{sum(c.status == 'fail' for c in ins.checks)} / "
                                   f"{sum(c.status == 'warn' for c in ins.checks)}")])
    body = {
        "verdict-steps": verdict_steps(ins.verdict), "checks": _section_checks(ins), "tokens": _section_tokens(ins),
        "groups": _section_groups(ins), "scores": _section_scores(ins), "masks": _section_masks(ins),
        "advantages": _section_advantages(ins),
        "columns": table(("column", "Arrow type"), list(ins.columns.items())),
    }
    more = f" and {len(ins.paths) - 1} more" if len(ins.paths) > 1 else ""
    return page(f"rladv inspect: {ins.paths[0] if ins.paths else '?'}{more}", "rladv inspect", sub, headline,
                [(sid, t, body[sid]) for sid, t in SECTIONS if body[sid]],
                "Made by rladv inspect; this file is self-contained (no scripts, nothing loaded from the network).")
