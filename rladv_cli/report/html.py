"""The run report as one self-contained HTML page, the verdict first: inline CSS and matplotlib SVG charts, no
script, nothing fetched. ``render_html(report) -> str`` is a pure function of the ``Report`` (the JSON report is
the single source of every number and every plotted distribution), so the same report gives the same bytes.
Timing is left out of the page (it is in the JSON), so two runs on the same data give the same page.
"""
from __future__ import annotations

import json
import os
from typing import Any, Optional

from . import plots
from .model import Histogram, Report, SplitPart, replay_rows, replay_title, tool_rewards_line
from .page import (Html, cards, charts, config_value, e, figure, kv, muted, num, page, pct, signal_card, stats_table,
                   table, verdict_card, verdict_steps, write_page)

# Section ids and titles, in page order.
SECTIONS = (
    ("verdict-steps", "Verdict per step"),
    ("gradient", "What each token weighs"),
    ("inputs", "Inputs"),
    ("config", "Configuration"),
    ("tokens", "Tokens"),
    ("groups", "Groups"),
    ("scores", "Scores and rewards"),
    ("kl", "KL shaping"),
    ("rejection", "Rollout rejection"),
    ("advantages", "Advantages and returns"),
    ("replay", "Replay of the input's columns"),
    ("warnings", "Warnings"),
)
DEAD_CAUSES = {
    "rejected": "rejected by rollout rejection",
    "all_equal_group": "in an all-equal group",
    "singleton": "in a singleton group",
    "other": "other (e.g. the estimator's own zeros)",
}


def _hist(caption: str, h: Optional[Histogram], xlabel: str, ylabel: str, name: str, color: int = 0,
          note: str = "") -> str:
    return figure(caption, plots.histogram(h, xlabel, ylabel, name, color), note) if h else ""


def _stages(r: Report) -> list[str]:
    """The stage order as run (docs/semantics.md §10), from what the report says was on."""
    cfg = r.config
    score = cfg.get("score_column", "score")
    if cfg.get("reward_components"):
        score = "reward components " + ", ".join(map(str, cfg["reward_components"]))
    if cfg.get("tool_reward_coef") is not None:
        score += f" + {num(cfg['tool_reward_coef'])} x sum of tool_rewards"
    stages = ["validate", f"score assembly ({score})"]
    if r.overlong is not None:
        stages.append(f"DAPO overlong shaping (buffer {cfg.get('overlong_buffer_len')})")
    if r.kl.enabled:
        stages.append(f"KL shaping ({r.kl.penalty}, {r.kl.ctrl}, coef {num(r.kl.coef)}) on the original mask")
    if cfg.get("rollout_rs"):
        stages.append(f"rollout rejection ({cfg['rollout_rs']}, thresholds {cfg.get('rollout_rs_threshold')}) "
                      "rewrites response_mask")
    if cfg.get("rollout_is"):
        stages.append(f"rollout importance weights ({cfg['rollout_is']}, threshold {cfg.get('rollout_is_threshold')})")
    stages.append(f"estimator {cfg.get('estimator')}")
    stages.append("write")
    return stages


def _section_inputs(r: Report) -> str:
    files = table(("file", "rows", "tokens"),
                   [(f.path, f.rows, f.tokens) for f in r.inputs.files] + [(Html("<b>total</b>"), r.inputs.rows, r.inputs.tokens)],
                   align="ln")
    out = [f'<div class="scroll">{files}</div>' if len(r.inputs.files) > 12 else files]
    given = [p for p in r.inputs.paths if p not in {f.path for f in r.inputs.files}]
    if given:
        out.append(kv([("given as", ", ".join(r.inputs.paths))]))
    out.append(kv([("output", r.output if r.output else "none (computed in memory)")]))
    return "\n".join(out)


def _section_config(r: Report) -> str:
    stages = "".join(f"<li>{e(s)}</li>" for s in _stages(r))
    plain = "".join(f'<div><span class="k">{e(k)}</span> <code>{e(config_value(v))}</code></div>'
                    for k, v in r.config.items() if not isinstance(v, dict))
    nested = [(k, v) for k, v in r.config.items() if isinstance(v, dict)]
    out = [f'<h3>Stages, in the order they ran</h3>\n<ol class="stages">{stages}</ol>',
           f'<h3>Settings</h3>\n<div class="settings">{plain}</div>']
    for k, v in nested:
        out.append(f"<h3>{e(k)}</h3>\n<pre>{e(json.dumps(v, indent=2, default=str))}</pre>")
    return "\n".join(out)


def _section_kl(r: Report) -> str:
    kl = r.kl
    if not kl.enabled:
        return muted(f"KL shaping off (kl_coef {num(kl.coef)}); penalty {kl.penalty}, controller {kl.ctrl}.")
    out = [kv([("penalty", kl.penalty), ("controller", kl.ctrl), ("coefficient (initial)", kl.coef),
                ("mean KL (actor/reward_kl_penalty)", kl.mean)])]
    if kl.batches:
        out.append('<div class="scroll">' + table(
            ("batch", "rows", "KL (mean of row means)", "coefficient"), align="ln", rows=
            [(b.batch if b.batch is not None else "all rows", b.rows, b.kl, b.coef) for b in kl.batches]) + "</div>")
    if len(kl.batches) > 1:
        labels = [b.batch if b.batch is not None else str(i) for i, b in enumerate(kl.batches)]
        out.append(charts(
            figure("KL coefficient per batch", plots.series(
                labels, [b.coef for b in kl.batches], "batch (in the order the controller stepped)",
                "coefficient β (reward units per nat)", "kl-coef")),
            figure("KL per batch", plots.series(labels, [b.kl for b in kl.batches], "batch",
                                                "mean KL estimate (nats per token)", "kl-mean")),
        ))
    return "\n".join(out)


def _rs_options(r: Report, metrics: dict[str, Any]) -> list[str]:
    configured = [o.strip() for o in str(r.config.get("rollout_rs") or "").split(",") if o.strip()]
    return [o for o in configured if f"rollout_rs_{o}_masked_fraction" in metrics]


def _rejection_bars(r: Report, metrics: dict[str, Any], prefix: str = "") -> list[tuple[str, float, int]]:
    items = []
    for option in _rs_options(r, metrics):
        items.append((f"{prefix}{option}: tokens", float(metrics[f"rollout_rs_{option}_masked_fraction"]), 0))
        seq = metrics.get(f"rollout_rs_{option}_seq_masked_fraction")
        if seq is not None:
            items.append((f"{prefix}{option}: rows", float(seq), 1))
    if "rollout_rs_masked_fraction" in metrics:
        items.append((f"{prefix}all options: tokens", float(metrics["rollout_rs_masked_fraction"]), 0))
        if "rollout_rs_seq_masked_fraction" in metrics:
            items.append((f"{prefix}all options: rows", float(metrics["rollout_rs_seq_masked_fraction"]), 1))
    return items


def _metric_value(v: Any) -> str:
    return num(v) if v is None or isinstance(v, (int, float)) else config_value(v)


def _metric_tables(r: Report, metrics: dict[str, Any]) -> tuple[str, str]:
    """verl's metrics of one batch: a table of ``rollout_rs_<option>_*`` by option, then the others."""
    options = _rs_options(r, metrics)
    claimed: dict[str, tuple[str, str]] = {}
    for option in sorted(options, key=len):  # a longer option name that shares a prefix claims its own keys
        prefix = f"rollout_rs_{option}_"
        claimed.update({k: (option, k[len(prefix):]) for k in metrics if k.startswith(prefix)})
    per_option = rest = ""
    if options:
        suffixes: list[str] = []
        for option, suffix in claimed.values():
            if suffix not in suffixes:
                suffixes.append(suffix)
        value = {v: metrics[k] for k, v in claimed.items()}
        per_option = "<h3>Per rejection option (rollout_rs_&lt;option&gt;_…)</h3>\n" + table(
            ["metric"] + options, [[s] + [_metric_value(value.get((o, s))) for o in options] for s in suffixes],
            align="ln")
    items = "".join(f'<div><span class="k">{e(k)}</span> <code>{e(_metric_value(v))}</code></div>'
                   for k, v in metrics.items() if k not in claimed)
    if items:
        rest = f'<h3>Rejection totals, importance weights and off-policy metrics</h3>\n<div class="settings">{items}</div>'
    return per_option, rest


def _section_rejection(r: Report) -> str:
    rr = r.rollout_rejection
    if not rr:
        return muted("Rollout correction not run (it runs when old_log_probs and rollout_log_probs are present).")
    out = []
    per_batch = rr.get("batches") if isinstance(rr.get("batches"), dict) else None
    if per_batch is None:
        bars = _rejection_bars(r, rr)
        chart = figure("Rejected fraction per option", _rejection_plot(
            bars, "share rejected (%; tokens: of valid tokens, rows: of rows)", "rejection")) if bars else ""
        per_option, rest = _metric_tables(r, rr)
        return "\n".join([charts(chart, f"<div>{per_option}</div>" if per_option else ""), rest])
    names = list(per_batch)
    bars = [b for name in names[:30] for b in _rejection_bars(r, per_batch[name], f"{name} · ")]
    if bars:
        note = f"first 30 of {len(names)} batches" if len(names) > 30 else ""
        out.append(charts(figure("Rejected fraction per batch and option", _rejection_plot(
            bars, "share rejected (%; tokens / rows)", "rejection"), note)))
    keys: list[str] = []
    for metrics in per_batch.values():
        keys += [k for k in metrics if k not in keys]
    rows = [[k] + [_metric_value(per_batch[n].get(k)) for n in names] for k in keys]
    out.append('<div class="scroll">' + table(["metric (verl rollout_corr/…)"] + names, rows, align="ln") + "</div>")
    return "\n".join(out)


def _rejection_plot(bars: list[tuple[str, float, int]], xlabel: str, name: str) -> str:
    return plots.bars([label for label, _, _ in bars], [v for _, v, _ in bars], xlabel, name, percent=True,
                      colors=[c for _, _, c in bars])


def _section_warnings(r: Report) -> str:
    if not r.warnings:
        return '<p class="ok">No warnings.</p>'
    rows = []
    for w in r.warnings:
        code = Html(f'<code id="warning-{e(w.code)}" class="warn">{e(w.code)}</code>')
        first = Html("<br>".join(f"<code>{e(x)}</code>" for x in w.where) or "–")
        rows.append((code, w.count, first, w.message))
    return table(("code", "count", "first rows (file:row)", "what it means"), rows, align="lnll",
                  cls="warnings")


def _section_replay(r: Report) -> str:
    """The input's own columns against this run's (the report's ``replay``), when the input has any."""
    rp = r.replay
    out = [muted(replay_title(rp) + ". Rewards and importance weights are compared at every position, advantages "
                 "and returns where this run's response_mask is 1.")]
    out.append(table(("column", "finding"), replay_rows(rp), cls="replay"))
    if rp["hint"]:
        out.append(f'<p><strong>Where to look:</strong> {e(rp["hint"])}</p>')
    return "\n".join(out)


def _section_tokens(r: Report) -> str:
    t, d = r.tokens, r.distributions
    parts = [("actor, used", t.used, 0), ("actor, rejected", t.rejected, 3), ("tool observation", t.observation, 1),
             ("padding", t.padding, 5)]
    counts = table(("tokens", "count", "share"), align="ln", rows=[
        ("total", t.total, pct(t.total, t.total)),
        ("actor (response_mask 1)", t.actor, pct(t.actor, t.total)),
        ("tool observation (0, not padding)", t.observation, pct(t.observation, t.total)),
        ("padding", t.padding, pct(t.padding, t.total)),
        ("rejected by rollout rejection", t.rejected, pct(t.rejected, t.total)),
        ("used by the estimator", t.used, pct(t.used, t.total)),
    ])
    anatomy = figure("Token anatomy", plots.stack(parts, "tokens (all positions of all rows)", "anatomy"))
    per_row = _hist("Actor tokens per row", d.actor_tokens, "actor tokens per row (response_mask 1, before rejection)",
                    "rows", "actor-tokens")
    return charts(anatomy, f"<div>{counts}</div>", per_row)


def _section_groups(r: Report) -> str:
    g, d = r.groups, r.distributions
    if g.count == 0:
        return kv([("batches", g.batches)]) + "\n" + muted("No uid column: no groups.")
    sizes = sorted(((int(k), v) for k, v in g.sizes.items()))
    facts = kv([
        ("groups", g.count), ("batches", g.batches),
        ("group sizes (rows × groups)", ", ".join(f"{k}×{v}" for k, v in sizes)),
        ("singleton groups (one row)", g.singletons),
        ("all-equal groups (2+ rows, equal total rewards)", g.all_equal),
    ])
    size_chart = figure("Group sizes", plots.columns([str(k) for k, _ in sizes], [v for _, v in sizes],
                                                     "rows per group", "groups", "group-sizes"))
    spread = _hist("Reward spread per group", d.group_spread,
                   "max − min total reward within a group (reward units; groups of 2+ rows)", "groups",
                   "group-spread", 2, "A spread of 0 is an all-equal group: no learning signal from it.")
    return charts(f"<div>{facts}</div>", size_chart, spread)


def _section_scores(r: Report) -> str:
    d = r.distributions
    out = [stats_table([("score total per row (before shaping)", r.scores.score_total),
                        ("reward total per row (after shaping, R_i)", r.scores.reward_total)])]
    out.append(charts(
        _hist("Score totals per row, before shaping", d.score_total, "total score per row (reward units)", "rows",
              "score-total", 1),
        _hist("Reward totals per row, after shaping" if d.score_total else "Reward totals per row (no shaping)",
              d.reward_total, "total reward per row R_i (reward units)", "rows", "reward-total"),
    ))
    if r.overlong is not None:
        out.append("<h3>DAPO overlong shaping</h3>\n" + kv(list(r.overlong.items())))
    if r.tool_rewards is not None:
        out.append("<h3>Tool rewards</h3>\n<p>" + e(tool_rewards_line(r.tool_rewards)) + "</p>")
    if r.sessions is not None:
        out.append("<h3>Multi-output sessions</h3>\n" + kv(list(r.sessions.items())))
    return "\n".join(out)


def _split_table(parts: list[SplitPart], first: str) -> str:
    return table((first, "rows", "valid tokens", "mean advantage", "positive tokens"), align="ln", rows=[
        (p.label, p.rows, p.tokens, p.mean, pct(p.fraction_positive)) for p in parts])


OUTCOME_NOTES = {
    "group": "Rows by their uid group: above, at or below the group's mean total reward in a mixed group, or in an "
             "all-equal or singleton group.",
    "reward sign": "This estimator does not use groups: rows by the sign of their total reward R_i.",
}


def _section_advantages(r: Report) -> str:
    d = r.distributions
    out = [stats_table([("advantages per valid token", r.advantages), ("returns per valid token", r.returns)])]
    out.append(charts(
        _hist("Advantages over valid tokens", d.advantages, "advantage (advantage units, per valid token)",
              "valid tokens", "advantages"),
        _hist("Returns over valid tokens", d.returns, "return (reward units, per valid token)", "valid tokens",
              "returns", 2),
    ))
    s = d.advantage_splits
    if s is not None:
        edges = d.advantages.edges
        xlabel = "advantage (advantage units)"
        out.append("<h3>By outcome</h3>\n" + muted(OUTCOME_NOTES.get(s.outcome, s.outcome)))
        out.append(charts(
            figure("Advantages by outcome", plots.overlaid(edges, [(p.label, p.counts) for p in s.by_outcome],
                                                           xlabel, "valid tokens", "by-outcome")),
            f"<div>{_split_table(s.by_outcome, 'outcome')}</div>"))
        out.append("<h3>By response length</h3>\n" + muted(
            "Rows by their valid tokens (response_mask 1 after rejection), in power-of-two buckets."))
        out.append(charts(
            figure("Mean advantage per length bucket", plots.bars(
                [p.label for p in s.by_length], [p.mean or 0.0 for p in s.by_length],
                "mean advantage over the bucket's valid tokens (advantage units)", "by-length-mean")),
            figure("Advantages by length bucket", plots.overlaid(
                edges, [(p.label, p.counts) for p in s.by_length], xlabel, "valid tokens", "by-length")),
            f"<div>{_split_table(s.by_length, 'valid tokens per row')}</div>"))
        g = s.sign
        out.append("<h3>Positive vs negative</h3>")
        out.append(charts(
            figure("Advantage mass by sign", plots.bars(
                ["positive", "negative"], [g.mass_positive, g.mass_negative],
                "sum of advantages over valid tokens (advantage units × tokens)", "sign-mass", colors=[2, 3])),
            "<div>" + table(("sign", "valid tokens", "rows (by their advantage sum)", "mass (sum)"), align="ln", rows=[
                ("positive", g.tokens_positive, g.rows_positive, g.mass_positive),
                ("negative", g.tokens_negative, g.rows_negative, g.mass_negative),
                ("zero", g.tokens_zero, g.rows_zero, 0.0)]) + "</div>"))
    rv = d.returns_vs_values
    if rv is not None:
        out.append("<h3>Returns vs values</h3>\n" + kv([
            ("explained variance, 1 − Var(returns − values) / Var(returns)", rv.explained_variance)]))
        out.append(charts(figure("Returns against the critic's values", plots.heatmap(
            rv.value_edges, rv.return_edges, rv.counts, rv.mean_return, "value (reward units, per valid token)",
            "return (reward units)", "returns-vs-values"), "Colour: valid tokens per cell; line: mean return per "
            "value bin; dashed: return = value.")))
    out.append(_zero_advantages(r))
    if r.whitening:
        out.append("<h3>Whitening of the raw advantages, per batch</h3>\n" + '<div class="scroll">' + table(
            ("batch", "valid tokens", "mean", "variance (unbiased)"),
            [(w.get("batch") if w.get("batch") is not None else "all rows", w.get("tokens"), w.get("mean"), w.get("var"))
             for w in r.whitening], align="ln") + "</div>")
    return "\n".join(out)


def _section_gradient(r: Report) -> str:
    """The gradient section (docs/weights.md): the mode and its formula, the mass by cause, length, turn and
    group, against the tokens' shares, and the figures behind the hazards."""
    g = r.gradient
    out = [kv([("trainer and mode", f"{g.trainer} {g.option}={g.mode}" + (" (its default)" if g.default else "")),
               ("token weight", g.formula),
               ("mini-batches", f"{num(g.mini_batches)}" + (f" of {num(g.mini_batch_size)} rows" if g.mini_batch_size
                                                             else " (each step is one)")),
               *([("micro-batches", f"{num(g.micro_batch_size)} rows each")] if g.micro_batch_size else []),
               *((name, f"{num(lo)}" if lo == hi else f"{num(lo)} to {num(hi)}") for name, (lo, hi) in g.terms.items()),
               ("gradient mass Σ|w|", g.mass), ("net Σw", g.net), ("positive share of the mass", pct(g.positive_share)),
               ("tokens with a weight", g.weighted_tokens)])]
    out.append(muted("Each token's weight is its coefficient on ∇log π in the loss the optimizer step minimises, at "
                     "the old policy. A part whose mass share exceeds its token share weighs more per token than "
                     "the batch's average."))

    def shares(parts, first: str, name: str, caption: str) -> str:
        if not parts:
            return ""
        labels = [p.part for p in parts]
        chart = figure(caption, plots.paired(labels, [("tokens", [p.token_share for p in parts]),
                                                      ("gradient mass", [p.mass_share for p in parts])],
                                             first, "share (%)", name))
        rows = [(p.part, p.rows, p.tokens, pct(p.token_share), pct(p.mass_share),
                 "–" if p.positive_share is None else pct(p.positive_share)) for p in parts]
        return charts(chart, "<div>" + table((first, "rows", "tokens", "token share", "mass share",
                                              "positive part of its mass"), rows, align="lnnnnn") + "</div>")

    out.append("<h3>By cause</h3>\n" + shares(g.by_cause, "cause", "mass-by-cause", "Mass by the verdict's cause"))
    out.append("<h3>By response length</h3>\n" + muted("Rows with tokens in tenths by their actor tokens, shortest "
                                                        "first.") + shares(g.by_length, "tokens per row",
                                                                           "mass-by-length", "Mass by length tenth"))
    if len(g.by_turn) > 1:
        out.append("<h3>By turn</h3>\n" + muted("A turn is a span of actor tokens; tool observations separate them.")
                   + shares(g.by_turn, "turn", "mass-by-turn", "Mass by turn"))
    if g.top_groups:
        out.append("<h3>The groups with the most mass</h3>\n" + table(
            ("group", "rows", "tokens", "token share", "mass share", "net Σw"),
            [(x.group, x.rows, x.tokens, pct(x.token_share), pct(x.mass_share), x.net) for x in g.top_groups],
            align="lnnnnn"))
    facts = []
    if g.length_bias is not None:
        lb = g.length_bias
        facts.append(("length: one token of the longest rows against the average",
                      f"{lb.factor:.3g}x ({lb.aggregation_factor:.3g}x from the aggregation alone; {num(lb.rows)} "
                      f"rows of {num(lb.min_tokens)}+ tokens)"))
    if g.concentration is not None:
        c = g.concentration
        facts.append(("mass on the heaviest 5% of rows", f"{pct(c.mass_share)} ({num(c.heaviest)} of {num(c.rows)} "
                                                         f"rows; the heaviest alone {pct(c.top_share)})"))
    if g.truncated is not None:
        t = g.truncated
        facts.append(("negative mass on truncated rows", f"{pct(t.negative_mass_share)} ({num(t.rows)} rows, "
                                                         f"{pct(t.token_share)} of the tokens; {t.source})"))
    if facts:
        out.append("<h3>Hazard figures</h3>\n" + kv(facts))
    return "\n".join(out)


def _zero_advantages(r: Report) -> str:
    """Actor tokens whose advantage is exactly 0, by cause (the report's ``dead_signal``)."""
    d = r.dead_signal
    causes, actor = d.get("causes") or {}, d.get("actor_tokens")
    return "<h3>Advantage exactly 0</h3>\n" + muted(
        "Counted on the advantages, so not the verdict's measure: a singleton row can keep a non-zero advantage "
        "(grpo gives it its raw score) and still carry no group-relative signal.") + "\n" + table(
        ("actor tokens with advantage exactly 0", "tokens", "share of actor tokens"), align="ln", rows=[
            ("all causes", d.get("zero_advantage_tokens"), pct(d.get("zero_advantage_tokens"), actor)),
        ] + [(DEAD_CAUSES.get(k, k), v, pct(v, actor)) for k, v in causes.items()])


def render_html(report: Report) -> str:
    """The whole page as one string: the same ``report`` gives the same bytes."""
    r = report
    estimator = str(r.config.get("estimator", "?"))
    files = len(r.inputs.files)
    sub = (f"rladv {r.rladv_version} · estimator {estimator} · {r.inputs.rows:,} rows · {r.inputs.tokens:,} tokens "
           f"from {files} file{'s' if files != 1 else ''} · device {r.timing.device}")
    n_warn = len(r.warnings)
    headline = verdict_card(r.verdict) + "\n" + cards([
        signal_card(r.verdict), ("rows", num(r.inputs.rows)), ("tokens", num(r.inputs.tokens)),
        ("actor tokens used (after rejection)", f"{num(r.tokens.used)} of {num(r.tokens.actor)}"),
        ("groups", num(r.groups.count)), ("advantage mean ± std", f"{num(r.advantages.mean)} ± {num(r.advantages.std)}"),
        ("warnings", Html(f'<a href="#warnings">{n_warn}</a>') if n_warn else "0"),
    ] + ([("replay of the input's columns", Html(
        f'<a href="#replay">{"agree" if r.replay["agree"] else e("differ: " + str(r.replay["first_difference"]))}</a>'))]
        if r.replay else []))
    body = {
        "inputs": _section_inputs(r), "config": _section_config(r), "tokens": _section_tokens(r),
        "groups": _section_groups(r), "scores": _section_scores(r), "kl": _section_kl(r),
        "rejection": _section_rejection(r), "advantages": _section_advantages(r), "warnings": _section_warnings(r),
    }
    if r.verdict.steps:
        body["verdict-steps"] = verdict_steps(r.verdict)
    if r.gradient is not None:
        body["gradient"] = _section_gradient(r)
    if r.replay:
        body["replay"] = _section_replay(r)
    more = f" and {len(r.inputs.paths) - 1} more" if len(r.inputs.paths) > 1 else ""
    title = f"rladv report: {estimator} on {r.inputs.paths[0] if r.inputs.paths else '?'}{more}"
    return page(title, "rladv run report", sub, headline, [(sid, t, body[sid]) for sid, t in SECTIONS if sid in body],
                f"Made by rladv {r.rladv_version}; this file is self-contained (no scripts, nothing loaded from "
                "the network). Timing is in the JSON report (--report).")


def write_html(path: str | os.PathLike, report: Report) -> None:
    """Write ``render_html(report)`` to ``path`` atomically (temporary file + rename)."""
    write_page(path, render_html(report))
