"""The run report (docs/contract.md §4): pydantic models, JSON out, and a rich rendering of the same content."""
from __future__ import annotations

import math
import shlex
from typing import Any, Optional

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from .gradient import Gradient, render_gradient
from .tables import WithTables
from .verdict import Verdict, render_verdict


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class FileInfo(_Model):
    path: str
    rows: int
    tokens: int


class RowFilter(_Model):
    """The ``--where`` predicate that chose the rows, and how many it kept of those read."""

    where: str
    rows_read: int
    rows_kept: int


class Inputs(_Model):
    paths: list[str]
    files: list[FileInfo]
    rows: int = Field(description="rows computed (those --where kept)")
    tokens: int
    filter: Optional[RowFilter] = None
    sequence_level: bool = Field(False, description="a score per row and no token lists: each row is one position")
    skipped: list[str] = Field(default_factory=list, description="rladv outputs (an earlier run's DATASET.adv.parquet, ...) that a folder or pattern held beside the data, left out; name one to read it")


def row_filter(source) -> Optional[RowFilter]:
    """The ``RowFilter`` of a ``RowSource`` read with ``--where``, else None."""
    f = source.filter
    return None if f is None else RowFilter(where=f.where, rows_read=f.rows_read, rows_kept=f.rows_kept)


def filter_line(f: Optional[RowFilter]) -> str:
    """`` (--where '...' kept K of N rows)`` for a header line, or ``""``."""
    return "" if f is None else f" (--where {f.where!r} kept {f.rows_kept} of {f.rows_read} rows)"


class Tokens(_Model):
    """Token counts: actor (input response_mask 1), observation (0, not padding), padding, rejected by rollout rejection."""

    total: int
    actor: int
    observation: int
    padding: int
    rejected: int
    used: int = Field(description="actor tokens left for the estimator after rejection")


class Groups(_Model):
    count: int
    sizes: dict[str, int] = Field(description="group size -> number of groups")
    singletons: int
    all_equal: int = Field(description="groups of 2+ rows whose total rewards (after shaping) are all equal")
    batches: int
    formed_by: str = Field("uid", description="what made the groups, by --convention: uid, prompts (equal prompt "
                           "token ids) or 'blocks of N rows' (consecutive rows in file order)")


class Stats(_Model):
    """Summary of values: over rows (scores) or over valid tokens (advantages, returns)."""

    count: int
    mean: Optional[float]
    std: Optional[float]
    min: Optional[float]
    max: Optional[float]
    fraction_positive: Optional[float] = None
    fraction_negative: Optional[float] = None
    fraction_zero: Optional[float] = None


def row_stats(values) -> Stats:
    """``Stats`` of one value per row (array-like), with exact sums: independent of chunking and row order."""
    v = np.asarray(values, dtype=np.float64)
    if v.size == 0:
        return Stats(count=0, mean=None, std=None, min=None, max=None)
    mean = math.fsum(v.tolist()) / v.size
    var = math.fsum(((v - mean) ** 2).tolist()) / (v.size - 1) if v.size > 1 else 0.0
    return Stats(
        count=int(v.size), mean=mean, std=math.sqrt(var), min=float(v.min()), max=float(v.max()),
        fraction_positive=float((v > 0).mean()), fraction_negative=float((v < 0).mean()),
        fraction_zero=float((v == 0).mean()),
    )


class Scores(_Model):
    score_total: Stats = Field(description="per-row sum of the assembled scores, before shaping")
    reward_total: Stats = Field(description="per-row sum of token_level_rewards, after shaping (R_i)")


class KLBatch(_Model):
    batch: Optional[str]
    rows: int
    kl: float = Field(description="mean over rows of the row-mean KL estimate on the original mask")
    coef: float = Field(description="coefficient applied to this batch")


class KL(_Model):
    enabled: bool
    penalty: str
    ctrl: str
    mean: Optional[float] = Field(None, description="verl's actor/reward_kl_penalty over the whole dataset")
    coef: float
    batches: list[KLBatch] = []


class ReportWarning(_Model):
    code: str
    message: str
    count: int
    rows: list[int] = Field(description="first few rows (0-based within their file)")
    where: list[str] = Field(description="the same rows as file:row")


class Timing(_Model):
    seconds: dict[str, float] = Field(description="per stage, summed over the passes; total: the passes, from the "
                                      "first to the report")
    tokens_per_second: float = Field(description="tokens over seconds.total")
    device: str
    wall_seconds: Optional[float] = Field(None, description="the whole call that wrote the output, from its start to "
                                          "the report: also the imports, reading ahead and the writer's commit "
                                          "(None for an in-memory compute)")


class Histogram(_Model):
    """Counts in ``len(counts)`` bins; bin ``i`` is ``[edges[i], edges[i+1])``, the last one closed."""

    edges: list[float]
    counts: list[int]

    @model_validator(mode="after")
    def _shape(self) -> "Histogram":
        if len(self.edges) != len(self.counts) + 1 or not self.counts:
            raise ValueError(f"a histogram needs len(edges) == len(counts) + 1 >= 2; got {len(self.edges)}, {len(self.counts)}")
        return self

    @property
    def total(self) -> int:
        return sum(self.counts)


class SplitPart(_Model):
    """The valid tokens of one part of the rows: counts, exact mean, and their advantage histogram."""

    label: str
    rows: int
    tokens: int = Field(description="valid tokens (response_mask 1 after rejection)")
    mean: Optional[float] = Field(description="mean advantage over the part's valid tokens")
    fraction_positive: Optional[float]
    counts: list[int] = Field(description="valid tokens per bin of distributions.advantages.edges")


class SignSplit(_Model):
    """Positive vs negative advantages: valid tokens, rows (by the sign of the row's advantage sum), mass (sum)."""

    tokens_positive: int
    tokens_negative: int
    tokens_zero: int
    rows_positive: int
    rows_negative: int
    rows_zero: int = Field(description="rows with valid tokens whose advantages sum to exactly 0")
    mass_positive: float = Field(description="sum of the positive advantages")
    mass_negative: float = Field(description="sum of the negative advantages")


class AdvantageSplits(_Model):
    outcome: str = Field(description="what by_outcome splits rows by: their uid group (group estimators) or the "
                                     "sign of their total reward R_i (the others)")
    by_outcome: list[SplitPart]
    by_length: list[SplitPart] = Field(description="rows by valid tokens, power-of-two buckets [2^k, 2^(k+1))")
    sign: SignSplit


class ReturnsVsValues(_Model):
    """Returns against the critic's values over valid tokens (estimators that read ``values``)."""

    value_edges: list[float]
    return_edges: list[float]
    counts: list[list[int]] = Field(description="valid tokens per (value bin, return bin)")
    mean_return: list[Optional[float]] = Field(description="per value bin, the mean return (from the 0.1% buckets)")
    explained_variance: Optional[float] = Field(description="1 - Var(returns - values) / Var(returns)")


class Distributions(_Model):
    """What the HTML report plots: histograms per row and per valid token, and the advantage splits."""

    actor_tokens: Histogram = Field(description="rows by actor tokens (response_mask 1 before rejection)")
    score_total: Optional[Histogram] = Field(description="rows by total score before shaping; None when equal to reward_total")
    reward_total: Histogram = Field(description="rows by total reward after shaping (R_i)")
    group_spread: Optional[Histogram] = Field(description="groups of 2+ rows by max - min of R_i; None without any")
    advantages: Optional[Histogram] = Field(description="valid tokens by advantage; None without valid tokens")
    returns: Optional[Histogram] = Field(description="valid tokens by return; None when returns are the advantages")
    advantage_splits: Optional[AdvantageSplits] = Field(description="None without valid tokens")
    returns_vs_values: Optional[ReturnsVsValues] = Field(description="None for estimators without values")


class Report(_Model, WithTables):
    """Everything rladv measured in one run; ``warnings`` carry stable codes (docs/contract.md §4)."""

    rladv_version: str
    verdict: Verdict = Field(description="the share of actor tokens, rows and groups that carry learning signal, and "
                             "why the rest does not (docs/debugging.md)")
    inputs: Inputs
    output: Optional[str]
    config: dict[str, Any]
    tokens: Tokens
    groups: Groups
    scores: Scores
    kl: KL
    rollout_rejection: dict[str, Any]
    dead_signal: dict[str, Any] = Field(
        description="actor tokens whose advantage is exactly 0, by cause (rejected, all_equal_group, singleton, other)"
    )
    whitening: Optional[list[dict[str, Any]]] = Field(
        None, description="per batch: valid tokens, mean and unbiased variance (float32) of the raw advantages"
    )
    overlong: Optional[dict[str, Any]] = Field(None, description="DAPO overlong shaping: rows penalised, penalties")
    tool_rewards: Optional[dict[str, Any]] = Field(
        None, description="the tool_rewards column: rows with tool calls, calls, each such row's sum, whether they "
        "were added to the score (--tool-reward-coef) and, for group estimators, all-equal groups whose rows' tool "
        "rewards differ")
    sessions: Optional[dict[str, Any]] = Field(None, description="multi-output agent sessions and how they were used")
    replay: Optional[dict[str, Any]] = Field(
        None, description="the input's own token_level_rewards, rollout_is_weights, advantages and returns (a trainer "
        "dump or an earlier rladv output) against this run's: per column the rows and positions that differ beyond "
        "atol + rtol·|rladv|, the largest difference and where, whether the runs agree and the first stage that differs")
    advantages: Stats
    returns: Stats
    distributions: Distributions
    gradient: Optional[Gradient] = Field(
        None, description="what each token weighs in the trainer's loss (--loss-agg-mode; docs/weights.md): the "
        "gradient mass by cause, sign, length, group and turn, and its hazards")
    warnings: list[ReportWarning]
    timing: Timing

    def to_json(self) -> str:
        return self.model_dump_json(indent=2) + "\n"

    def warning_codes(self) -> list[str]:
        return [w.code for w in self.warnings]


def _fmt(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:.4g}"


def tool_rewards_line(t: dict[str, Any]) -> str:
    """The report's ``tool_rewards`` section in one line."""
    s = t["sum_per_row"]
    line = f"{t['rows_with_calls']} row(s) with {t['calls']} call(s)"
    if s["count"]:
        line += f", sum per row mean {_fmt(s['mean'])} (min {_fmt(s['min'])}, max {_fmt(s['max'])})"
    line += (f"; added to the score x {_fmt(t['coef'])}" if t["added"]
             else "; not added to the score (as in verl; --tool-reward-coef adds them)")
    if t.get("all_equal_groups_with_differing_tool_rewards"):
        line += f"; {t['all_equal_groups_with_differing_tool_rewards']} all-equal group(s) whose tool rewards differ"
    return line


def example_command(paths: list[str], cfg, *, row: Optional[int] = None, uid: object = None) -> str:
    """The command that shows dataset row ``row`` (``rladv explain --row``) or group ``uid`` (``rladv inspect
    --uid``) with the run's settings ``cfg`` (a ``Config``; only those that differ from the defaults and have an
    effect: a verl YAML sets ``lam`` for grpo too)."""
    from ..config.flags import command_flags

    files = " ".join(shlex.quote(p) for p in paths)
    args = " ".join(shlex.quote(a) for a in command_flags(cfg.changed()))
    what = f"explain {files} --estimator {cfg.estimator} --row {row}" if uid is None else (
        f"inspect {files} --estimator {cfg.estimator} --uid {shlex.quote(str(uid))}")
    return f"rladv {what}" + (f" {args}" if args else "")


def explain_command(report: Report, row: int) -> str:
    """The ``rladv explain`` line that derives dataset row ``row`` with the report's settings."""
    from ..config.settings import Config

    run = Config(**{k: v for k, v in report.config.items() if k in Config.model_fields})
    return example_command(report.inputs.paths, run, row=row)


TERMINAL_BATCHES = 6  # per-batch rollout-correction columns the terminal shows (the JSON and the page: all)


def _rejection_table(rr: dict[str, Any]):
    """The rollout-correction metrics: one column, or with ``--batch-key`` one column per batch."""
    from .terminal import Table

    value = lambda v: _fmt(v) if isinstance(v, (int, float)) else str(v)  # noqa: E731
    per_batch = rr.get("batches") if isinstance(rr.get("batches"), dict) else None
    if per_batch is None:
        t = Table(title="rollout correction", show_header=False, box=None)
        for k, v in rr.items():
            t.add_row(k, value(v))
        return t
    names = list(per_batch)
    shown = names[:TERMINAL_BATCHES]
    more = f"; first {len(shown)} of {len(names)} batches, the JSON report has all" if len(names) > len(shown) else ""
    t = Table(title=f"rollout correction per batch{more}", header_style="bold", box=None)
    for col in ("", *shown):
        t.add_column(col, justify="right" if col else "left")
    keys: list[str] = []
    for metrics in per_batch.values():
        keys += [k for k in metrics if k not in keys]
    for k in keys:
        t.add_row(k, *("-" if k not in per_batch[n] else value(per_batch[n][k]) for n in shown))
    return t


def replay_title(r: dict[str, Any]) -> str:
    tol = r["tolerance"]
    verdict = ("they agree" if r["agree"] else f"first difference: {r['first_difference']}" if r["first_difference"]
               else "nothing to compare")
    return (f"replay: the input's own columns against this run's ({verdict}; |input - rladv| <= "
            f"{tol['atol']:g} + {tol['rtol']:g}·|rladv|)")


def replay_rows(r: dict[str, Any]) -> list[tuple[str, str]]:
    """The report's ``replay`` section as (column, finding) lines, in stage order."""
    lines = []
    for name, c in r["columns"].items():
        largest = _fmt(c["max_abs_diff"])
        if c["agree"]:
            lines.append((name, f"agree over {c['positions']} positions of {c['rows_compared']} rows (max |Δ| {largest})"))
            continue
        text = f"differ in {c['differing_rows']} row(s): {c['differing_positions']} of {c['positions']} positions"
        if c["non_finite_positions"]:
            nf = c["first_non_finite"]
            text += f"; {c['non_finite_positions']} NaN or infinite, first at {nf['where']} position {nf['position']}"
        if c["worst"]:
            w = c["worst"]
            kind = "finite " if c["non_finite_positions"] else ""
            text += (f"; max {kind}|Δ| {largest} at {w['where']} position {w['position']} "
                     f"(input {_fmt(w['input'])}, rladv {_fmt(w['rladv'])})")
        if c["length_mismatch_rows"]:
            text += f"; {c['length_mismatch_rows']} row(s) whose list length is not the response's"
        lines.append((name, text))
    lines += [(name, f"not compared: {why}") for name, why in r["not_compared"].items()]
    return lines


def render(report: Report, console) -> None:
    """Print the report with rich: inputs, tokens, groups, scores, KL, advantages, warnings, timing."""
    from .terminal import Table
    from rich.text import Text

    r = report
    console.print(
        f"[bold]rladv {r.rladv_version}[/bold]  estimator [cyan]{r.config['estimator']}[/cyan]  "
        f"{r.inputs.rows} rows, {r.inputs.tokens} tokens from {len(r.inputs.paths)} file(s)"
        + filter_line(r.inputs.filter) + (f" -> {r.output}" if r.output else "")
    )
    if r.inputs.sequence_level:
        console.print("[dim]sequence-level data (a score per row, no response_mask): each row is one position "
                      "holding its score[/dim]")
    if r.config.get("score_column_ignored"):
        console.print(f"[dim]scores from {r.config['score_column']}; the dataset's {r.config['score_column_ignored']} "
                      "column is not read (the contract takes one of the two)[/dim]")
    render_verdict(r.verdict, console)
    if r.gradient is not None:
        render_gradient(r.gradient, console)
    t = Table(title="tokens and groups", show_header=False, box=None, pad_edge=False)
    t.add_row("actor / observation / padding", f"{r.tokens.actor} / {r.tokens.observation} / {r.tokens.padding}")
    t.add_row("rejected / used", f"{r.tokens.rejected} / {r.tokens.used}")
    sizes = ", ".join(f"{k}x{v}" for k, v in r.groups.sizes.items()) or "-"
    key = r.config.get("batch_key")
    batches = f"{r.groups.batches} batch(es)" + (f" (--batch-key {key})" if key else "")
    t.add_row("groups (size x count)", f"{r.groups.count} ({sizes}) in {batches}, by {r.groups.formed_by}")
    t.add_row("singletons / all-equal", f"{r.groups.singletons} / {r.groups.all_equal}")
    if r.kl.enabled:
        t.add_row("KL", f"{r.kl.penalty}, mean {_fmt(r.kl.mean)}, coef {_fmt(r.kl.coef)} ({r.kl.ctrl})")
    console.print(t)
    s = Table(title="values (per row: totals; per valid token: advantage, return)", header_style="bold")
    for col in ("", "mean", "std", "min", "max", "+", "-", "0"):
        s.add_column(col, justify="right" if col else "left")
    for name, st in (
        (f"{r.config.get('score_column', 'score')}/row", r.scores.score_total),
        ("reward/row", r.scores.reward_total),
        ("advantage", r.advantages),
        ("return", r.returns),
    ):
        s.add_row(
            name, _fmt(st.mean), _fmt(st.std), _fmt(st.min), _fmt(st.max),
            _fmt(st.fraction_positive), _fmt(st.fraction_negative), _fmt(st.fraction_zero),
        )
    console.print(s)
    for title, section in (("overlong shaping", r.overlong), ("sessions", r.sessions)):
        if section:
            console.print(f"[bold]{title}[/bold]: " + ", ".join(f"{k} {_fmt(v) if isinstance(v, float) else v}"
                                                                for k, v in section.items()))
    if r.tool_rewards:
        console.print(f"[bold]tool rewards[/bold]: {tool_rewards_line(r.tool_rewards)}")
    if r.replay:
        rp = Table(title=replay_title(r.replay), title_justify="left", show_header=False, box=None)
        for name, text in replay_rows(r.replay):
            rp.add_row(name, text)
        if r.replay["hint"]:
            rp.add_row("->", r.replay["hint"])
            worst = r.replay["columns"][r.replay["first_difference"]]["worst"]
            if worst:
                rp.add_row("->", f"that row, token by token: {explain_command(r, worst['dataset_row'])}")
        console.print(rp)
    if r.rollout_rejection and (r.config.get("rollout_rs") or r.config.get("rollout_is")):
        console.print(_rejection_table(r.rollout_rejection))
    elif r.rollout_rejection:
        console.print("[dim]off-policy metrics (rollout_log_probs vs old_log_probs) are in the JSON report and the "
                      "HTML page; --rollout-rs or --rollout-is shows them here[/dim]")
    if r.warnings:
        w = Table(title="warnings", header_style="bold")
        for col in ("code", "count", "rows", "what it means"):
            w.add_column(col)
        one_file = len(r.inputs.paths) == 1
        for item in r.warnings:  # rows within the one file, else file:row
            rows = item.rows[:3] if one_file else item.where[:3]
            w.add_row(f"[yellow]{item.code}[/yellow]", str(item.count), Text(", ".join(str(x) for x in rows)), item.message)
        console.print(w)
    else:
        console.print("[green]no warnings[/green]")
    secs = ", ".join(f"{k} {v:.3f}s" for k, v in r.timing.seconds.items() if k != "total")
    wall = r.timing.wall_seconds
    total = r.timing.seconds.get("total", 0.0)
    run = (f"; passes {total:.3f}s of a {wall:.3f}s run (the rest: start-up, reading ahead, the report); "
           f"{r.tokens.total / wall:,.0f} tokens/s over the run" if wall else
           f"; passes {total:.3f}s; {r.timing.tokens_per_second:,.0f} tokens/s")
    console.print(f"[dim]{secs}{run} on {r.timing.device}[/dim]")
