"""What ``rladv inspect`` finds (docs/contract.md §5): the checklist's entries (built by ``Checklist`` from the
catalogue of checks) and the dataset's layout, groups, scores, masks, KL, advantages and dead signal as pydantic
models (``Inspection``, what ``--json`` prints), and their rendering on a terminal."""
from __future__ import annotations

from typing import Callable, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

from ..estimators.registry import Estimator
from ..report.checks import CHECKS, STEP_TITLES
from ..report.model import Histogram, RowFilter, Stats, filter_line
from ..report.tables import WithTables
from ..report.verdict import Verdict, render_verdict

Status = Literal["pass", "warn", "fail"]
CAUSES = ("rejected", "all_equal_group", "singleton", "other")  # rladv compute's dead_signal causes, in its order
FIRST_ROWS = 5


# ==================================================================================== models
class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Check(_Model):
    """One entry of the checklist; ``code`` is a docs/contract.md §4 warning code or one of inspect's own."""

    code: str
    status: Status
    message: str
    count: int
    rows: list[int] = Field(description="first few rows flagged (0-based within their file)")
    where: list[str] = Field(default_factory=list, description="the same rows as file:row")
    dataset_rows: list[int] = Field(default_factory=list, description="the same rows 0-based across all files, "
                                    "in the order they are read: what --row takes")
    step: int = Field(description="step of the debugging order (docs/debugging.md) this check belongs to")


class Checklist:
    """Builds the checklist's entries from the catalogue of checks (``report.checks``: a code's step, message, pass
    line, severity, and whether it matters for the estimator ``est``); rows given as dataset rows are shown 0-based
    within their file (``locate``)."""

    def __init__(self, locate: Callable[[int], tuple[str, int]], est: Optional[Estimator]):
        self.locate, self.est = locate, est
        self.items: list[Check] = []

    def add(self, code: str, count: int, rows, /, *, relevant: Optional[bool] = None, **figures) -> None:
        """The check ``code`` flagging ``count`` (its unit) at dataset ``rows``; ``figures``: what its message and
        pass line read; ``relevant`` overrides whether it matters for the estimator."""
        check = CHECKS[code]
        first = [int(r) for r in list(rows)[:FIRST_ROWS]]
        where = [self.locate(r) for r in first]
        if count == 0:
            status, message = "pass", check.pass_line(**figures)
        elif check.applies(self.est) if relevant is None else relevant:
            status, message = check.severity, check.message(**figures)
        else:
            status, message = "pass", f"{check.message(**figures)} ({check.applies.why_not(self.est)})"
        self.items.append(Check(code=code, status=status, message=message, count=int(count), rows=[w[1] for w in where],
                                where=[f"{p}:{r}" for p, r in where], dataset_rows=first, step=check.step))


class TokenCounts(_Model):
    """As ``rladv compute``'s report counts them: actor tokens are the mask as read before rollout rejection
    (``loss_mask`` when the file has it, e.g. an rladv output; else ``response_mask``)."""

    total: int
    actor: int = Field(description="positions with loss_mask 1 when present, else response_mask 1")
    observation: int = Field(description="total - actor - padding: tool observations")
    padding: int = Field(description="attention_mask 0")
    rejected: int = Field(description="actor tokens with response_mask 0: removed by rollout rejection (0 without loss_mask)")
    used: int = Field(description="positions with response_mask 1: the tokens an estimator trains on")


class Groups(_Model):
    count: int
    sizes: dict[str, int] = Field(description="group size (rows) -> number of groups")
    singletons: int
    all_equal: int = Field(description="groups of 2+ rows whose total rewards (reward basis) are all equal")
    expected_n: Optional[int] = None
    all_equal_scores: int = Field(0, description="groups of 2+ rows whose score totals (before shaping) are equal")
    size_mismatch: int = Field(0, description="groups whose size differs from expected_n, or without it from the most "
                               "common size (sessions for an estimator that folds them)")
    basis: str = Field("score", description="what all_equal compares: score, kl_shaped or token_level_rewards")
    session_sizes: Optional[dict[str, int]] = Field(
        None, description="with a session_id column: distinct sessions per uid -> number of groups")


class Dist(_Model):
    """Mean / min / max of one value per row."""

    mean: Optional[float]
    min: Optional[float]
    max: Optional[float]


class Layout(_Model):
    """Rows as read, before rollout rejection: actor tokens are ``loss_mask`` 1 when present, else ``response_mask`` 1."""

    length: Dist = Field(description="positions per row")
    turns: Dist = Field(description="assistant turns per row: spans of actor tokens")
    observation_spans: Dist = Field(description="tool-observation spans per row (not actor tokens, not padding)")
    rows_ending_in_observation: int = Field(description="rows whose last non-padding position is not an actor token")
    rows_with_padding: int


class Scores(_Model):
    column: Optional[str] = Field(description="rm_scores (token-level) or score (scalar), None when absent")
    score_total: Stats = Field(description="per-row sum of the assembled scores")
    reward_total: Stats = Field(description="per-row sum of the reward basis (equal to score_total without shaping)")
    reward_basis: str
    rows_score_on_masked_position: int
    tokens_score_on_observation: int
    tokens_score_on_padding: int
    rows_non_terminal_score: int
    tool_rewards: Optional[Stats] = Field(None, description="per row with tool calls, the sum of its tool_rewards "
                                          "(None without the column); rladv compute adds them only with --tool-reward-coef")


class LossVsResponse(_Model):
    """``response_mask`` against ``loss_mask``, the mask before rollout rejection (a ``response_mask`` 1 under a
    ``loss_mask`` 0 breaks the contract: its row is an invalid row)."""

    rows: int = Field(description="rows where response_mask drops loss_mask tokens")
    loss_only_tokens: int = Field(description="loss_mask 1, response_mask 0 (rejected by rollout correction?)")


class Masks(_Model):
    has_loss_mask: bool
    has_attention_mask: bool
    loss_vs_response: Optional[LossVsResponse]
    padding_tokens: int
    loss_on_padding_tokens: int = Field(0, description="loss_mask 1 where attention_mask is 0")
    rows_without_actor_tokens: int = Field(description="rows without an actor token (loss_mask 1 when present, else response_mask 1)")
    rows_fully_rejected: int = Field(0, description="rows with actor tokens but no response_mask 1: all rejected")


class KLSummary(_Model):
    penalty: str
    coef: float
    mean: Optional[float] = Field(description="verl's actor/reward_kl_penalty: mean over rows of the row-mean estimate "
                                  "over the actor tokens (the mask before rejection, as KL shaping uses)")
    rows_raises_reward: int
    rows_flips_sign: int


class Advantages(Stats):
    """``advantages`` over response_mask 1 tokens, plus non-zero values where response_mask is 0."""

    masked_nonzero_tokens: int = 0
    masked_nonzero_rows: int = 0


class Cause(_Model):
    tokens: int
    share: float = Field(description="of all actor tokens")


class DeadSignal(_Model):
    base: str = Field(description="what counts as an actor token: loss_mask 1 when present, else response_mask 1")
    actor_tokens: int
    zero_tokens: int = Field(description="actor tokens whose advantage is exactly 0")
    share: float
    by_cause: dict[str, Cause] = Field(description="rladv compute's causes: rejected (response_mask 0), then the "
                                       "used tokens in all-equal groups, in singleton groups, and the other ones")


class RowDistributions(_Model):
    """Per-row histograms for ``inspect --html`` (None when no valid row has the value)."""

    length: Optional[Histogram] = Field(description="rows by positions")
    actor_tokens: Optional[Histogram] = Field(description="rows by actor tokens (loss_mask 1 when present, else response_mask 1)")
    turns: Optional[Histogram] = Field(description="rows by assistant turns")
    score_total: Optional[Histogram] = Field(description="rows by total score")
    reward_total: Optional[Histogram] = Field(description="rows by total reward on the reward basis; None when it is the score")


class Inspection(_Model, WithTables):
    """What ``rladv inspect --json`` prints: the verdict, docs/contract.md §5's keys, then inspect's own sections."""

    verdict: Verdict
    rows: int
    tokens: TokenCounts
    groups: Groups
    columns: dict[str, str]
    checks: list[Check]
    paths: list[str]
    skipped: list[str] = Field(default_factory=list, description="rladv outputs (an earlier run's DATASET.adv.parquet, ...) that a folder or pattern held beside the data, left out; name one to read it")
    filter: Optional[RowFilter] = Field(description="the --where that chose the rows (rows: those it kept)")
    estimator: Optional[str]
    invalid_rows: int
    layout: Layout
    scores: Optional[Scores]
    masks: Masks
    kl: Optional[KLSummary]
    advantages: Optional[Advantages]
    dead_signal: Optional[DeadSignal]
    distributions: RowDistributions

    def to_json(self) -> str:
        return self.model_dump_json(indent=2) + "\n"

    @property
    def status(self) -> Status:
        """The worst status of any check."""
        order = {"pass": 0, "warn": 1, "fail": 2}
        return max((c.status for c in self.checks), key=order.__getitem__, default="pass")

    def check(self, code: str) -> Optional[Check]:
        return next((c for c in self.checks if c.code == code), None)


# ==================================================================================== rendering
_STATUS_STYLE = {"pass": "[green]PASS[/green]", "warn": "[yellow]WARN[/yellow]", "fail": "[bold red]FAIL[/bold red]"}


def _fmt(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:.6g}"


def _pct(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:.1%}"


def render_inspection(ins: Inspection, console, show_all: bool = False) -> None:
    """Print an ``Inspection`` with rich: the verdict, inputs, layout, groups, scores, masks, advantages, then
    the checklist (status, code, count, first rows) in the debugging order; passing checks in one line unless
    ``show_all``."""
    from rich.markup import escape
    from ..report.terminal import Table

    console.print(
        f"[bold]rladv inspect[/bold]  {ins.rows} rows ({ins.invalid_rows} invalid) from {len(ins.paths)} file(s)"
        + escape(filter_line(ins.filter))
        + (f"  estimator [cyan]{ins.estimator}[/cyan]" if ins.estimator else "")
    )
    render_verdict(ins.verdict, console)
    t = Table(title="layout", show_header=False, box=None, pad_edge=False)
    tk = ins.tokens
    t.add_row("tokens actor / observation / padding", f"{tk.actor} / {tk.observation} / {tk.padding} (of {tk.total})"
              + (f"; {tk.rejected} actor token(s) rejected, {tk.used} used" if tk.rejected else ""))
    lay = ins.layout
    t.add_row("length per row mean / max", f"{_fmt(lay.length.mean)} / {_fmt(lay.length.max)}")
    t.add_row("assistant turns per row mean / max", f"{_fmt(lay.turns.mean)} / {_fmt(lay.turns.max)}")
    t.add_row("observation spans per row mean / max", f"{_fmt(lay.observation_spans.mean)} / {_fmt(lay.observation_spans.max)}")
    t.add_row("rows ending in an observation", str(lay.rows_ending_in_observation))
    t.add_row("rows with padding", str(lay.rows_with_padding))
    g = ins.groups
    sizes = ", ".join(f"{k}x{v}" for k, v in g.sizes.items()) or "-"
    t.add_row("groups (size x count)", f"{g.count} ({sizes})" + (f", expected n={g.expected_n}" if g.expected_n else ""))
    if g.session_sizes is not None:
        t.add_row("sessions per uid (size x count)", ", ".join(f"{k}x{v}" for k, v in g.session_sizes.items()))
    t.add_row("singletons / all-equal", f"{g.singletons} / {g.all_equal} (basis: {g.basis})")
    m = ins.masks
    if m.loss_vs_response is not None:
        lv = m.loss_vs_response
        t.add_row("loss_mask vs response_mask", f"{lv.rows} rows differ: {lv.loss_only_tokens} loss-only tokens")
    if ins.kl is not None:
        t.add_row("KL", f"{ins.kl.penalty}, coef {_fmt(ins.kl.coef)}, mean estimate {_fmt(ins.kl.mean)}")
    console.print(t)
    if ins.scores is not None or ins.advantages is not None:
        s = Table(title="values (+ - 0: shares)", header_style="bold")
        for col in ("", "count", "mean", "std", "min", "max", "+", "-", "0"):
            s.add_column(col, justify="right" if col else "left", no_wrap=not col)
        entries = []
        if ins.scores is not None:
            entries.append((f"{ins.scores.column} / row", ins.scores.score_total))
            if ins.scores.reward_basis != "score":
                entries.append(("reward / row", ins.scores.reward_total))
            if ins.scores.tool_rewards is not None:
                entries.append(("tool_rewards / row with calls", ins.scores.tool_rewards))
        if ins.advantages is not None:
            entries.append(("advantage / token", ins.advantages))
        for label, st in entries:
            s.add_row(label, str(st.count), _fmt(st.mean), _fmt(st.std), _fmt(st.min), _fmt(st.max),
                      *(_pct(f) for f in (st.fraction_positive, st.fraction_negative, st.fraction_zero)))
        console.print(s)
    one_file = len(ins.paths) == 1
    shown = [c for c in ins.checks if show_all or c.status != "pass"]
    passing = [c.code for c in ins.checks if c.status == "pass"]
    if not show_all and passing:
        console.print(f"[green]{len(passing)} check(s) pass[/green]: {', '.join(passing)} (--all lists them)")
    if not shown:
        return
    c = Table(title="checks, in the debugging order (docs/debugging.md)" + (f" (rows of {ins.paths[0]})" if one_file else ""),
              header_style="bold")
    for col in ("status", "code", "count", "first rows", "message"):
        c.add_column(col, overflow="fold", no_wrap=col in ("status", "count"))
    step = None
    for item in shown:
        if item.step != step:
            step = item.step
            c.add_row("", f"[bold]{step}. {STEP_TITLES.get(step, '')}[/bold]", "", "", "")
        rows = ", ".join(str(r) for r in item.rows) if one_file else ", ".join(
            f"{w} (row {d})" for w, d in zip(item.where[:3], item.dataset_rows))
        c.add_row(_STATUS_STYLE[item.status], item.code, str(item.count), rows, item.message)
    console.print(c)
