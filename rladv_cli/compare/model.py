"""The result of ``rladv compare`` (pydantic; ``--json`` prints it) and its compact terminal rendering."""
from __future__ import annotations

from typing import Any, Optional

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from ..report.model import Inputs, Stats, filter_line
from ..report.verdict import Level, VerdictCause, pct


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RunSummary(_Model):
    """One run: its settings and what its own report says (the verdict's signal share and causes, the
    actor tokens whose advantage is exactly 0 by cause, the advantages' statistics, the warnings' codes)."""

    name: str
    column: str = Field(description="the -o column of its advantages: advantages__<slug>")
    estimator: str
    options: str = Field(description="the flags that give this run's numbers (estimator and the settings that "
                         "differ from their defaults and have an effect)")
    settings: dict[str, Any] = Field(description="those settings by Config field")
    level: Level = Field(description="its verdict's level")
    headline: str
    signal_share: float = Field(description="of the actor tokens, those that carry learning signal")
    signal_rows: int
    rows: int
    causes: list[VerdictCause] = Field(description="why the rest carries none, largest share first")
    dead_signal: dict[str, Any] = Field(description="actor tokens whose advantage is exactly 0, by cause")
    advantages: Stats = Field(description="over the tokens the estimator used")
    warnings: list[str] = Field(description="the codes of its report's warnings")
    seconds: float


class GroupDifference(_Model):
    """A uid group where the two runs differ most."""

    uid: Any
    batch: Optional[str] = Field(None, description="its --batch-key batch, when every run gives the same key")
    rows: int = Field(description="its rows with tokens valid in both runs")
    tokens: int = Field(description="its tokens valid in both runs")
    mean_abs_diff: float = Field(description="mean |a_A - a_B| over those tokens")
    row: int = Field(description="its row with the largest mean |a_A - a_B|, 0-based across the dataset (--row)")
    where: str = Field(description="the same row as file:row")
    explain: list[str] = Field(description="the rladv explain commands that derive that row under A, then B")


class PairSummary(_Model):
    """Runs ``a`` and ``b`` compared over the tokens valid (response_mask 1) in both."""

    a: str
    b: str
    tokens: int = Field(description="tokens valid in both runs")
    tokens_only_a: int = Field(description="valid in A only (rejected in B)")
    tokens_only_b: int = Field(description="valid in B only")
    correlation: Optional[float] = Field(description="Pearson's r of the token advantages; null when either run's "
                                         "are constant")
    scale: Optional[float] = Field(None, description="k when B = k·A on every token valid in both (B only rescales A); "
                                   "null otherwise")
    rows: int = Field(description="rows with valid tokens in both runs")
    sign_flips: int = Field(description="rows whose mean advantage is > 0 in one run and < 0 in the other")
    sign_flip_share: Optional[float] = Field(description="of those rows")
    weight_changed: int = Field(description="tokens with |a_B| > 2|a_A| or |a_A| > 2|a_B| (0 against non-zero "
                                "counts, 0 against 0 does not)")
    weight_changed_share: Optional[float] = Field(description="of the tokens valid in both")
    mean_abs_diff: Optional[float] = Field(description="mean |a_A - a_B| over the tokens valid in both")
    max_abs_diff: float
    groups: list[GroupDifference] = Field(description="the uid groups with the largest mean |a_A - a_B|, largest "
                                          "first (empty without uid)")
    _sample: tuple[np.ndarray, np.ndarray] = PrivateAttr(
        default_factory=lambda: (np.zeros(0, np.float32), np.zeros(0, np.float32)))

    def with_sample(self, a: np.ndarray, b: np.ndarray) -> "PairSummary":
        """This summary holding the scatter's sample of token advantages (outside the JSON)."""
        self._sample = (a, b)
        return self

    @property
    def sample(self) -> tuple[np.ndarray, np.ndarray]:
        """A deterministic sample of the pairs ``(a_A, a_B)`` of tokens valid in both, for the scatter."""
        return self._sample


class Comparison(_Model):
    """Every run over the same rows, each against each (pairs in the order the runs were given)."""

    rladv_version: str
    inputs: Inputs
    output: Optional[str] = Field(description="-o: the input rows with one <compared>__<slug> column per run")
    compared: str = Field("advantages", description="what the pairs compare: advantages, or token_weight when every "
                          "run gives --loss-agg-mode (docs/weights.md)")
    groups_by: Optional[str] = Field(description="what a group is: uid, or --batch-key and uid; null without uid")
    runs: list[RunSummary]
    pairs: list[PairSummary]
    seconds: float = Field(description="wall time of the runs and the comparison")
    spill_bytes: int = Field(description="bytes of the runs' advantages kept in temporary files meanwhile")

    def to_json(self) -> str:
        return self.model_dump_json(indent=2) + "\n"


_STYLE = {"ok": "green", "note": "cyan", "warn": "yellow", "fail": "bold red"}
TERMINAL_GROUPS = 3  # per pair; --json and --html have every one of the top groups


def _num(x: Optional[float], spec: str = ".3g") -> str:
    return "-" if x is None else format(x, spec)


def _share(x: Optional[float]) -> str:
    return "-" if x is None else pct(x)


def render(c: Comparison, console) -> None:
    """The comparison on a terminal: a table of the runs, one of the pairs, and the groups that differ most."""
    from rich.markup import escape
    from ..report.terminal import Table

    i = c.inputs
    written = f" -> {escape(c.output)}" if c.output else ""
    console.print(f"[bold]rladv compare[/bold]  {len(c.runs)} runs over {i.rows} rows, {i.tokens} tokens from "
                  f"{len(i.paths)} file(s)" + escape(filter_line(i.filter)) + written
                  + ("; compared on token_weight" if c.compared == "token_weight" else ""))
    runs = Table(title="runs", title_justify="left", header_style="bold", box=None)
    for col in ("run", "options", "verdict", "signal", "no signal: largest cause"):
        runs.add_column(col, justify="right" if col == "signal" else "left", overflow="fold")
    for r in c.runs:
        style = _STYLE[r.level]
        causes = "-" if not r.causes else f"{r.causes[0].code} {pct(r.causes[0].share)}" + (
            f" (+{len(r.causes) - 1} more)" if len(r.causes) > 1 else "")
        runs.add_row(escape(r.name), escape(r.options), f"[{style}]{r.level.upper()}[/{style}]",
                     f"[{style}]{pct(r.signal_share)}[/{style}]", causes)
    console.print(runs)
    pairs = Table(title="pairs, over the tokens valid in both", title_justify="left", header_style="bold", box=None)
    for col in ("A", "B", "tokens", "corr", "rows flipped", "weight >2x", "mean |A-B|"):
        pairs.add_column(col, justify="left" if col in ("A", "B") else "right")
    for p in c.pairs:
        pairs.add_row(escape(p.a), escape(p.b), f"{p.tokens:,}", _num(p.correlation, ".4f"), _share(p.sign_flip_share),
                      _share(p.weight_changed_share), _num(p.mean_abs_diff, ".4g"))
    console.print(pairs)
    for p in c.pairs:
        if p.scale is not None and p.correlation is not None:
            console.print(f"{escape(p.b)} = {p.scale:.6g} x {escape(p.a)} on every token valid in both: B rescales A")
    if c.groups_by is None:
        console.print("[dim]no uid column: no groups to rank[/dim]")
        return
    groups = Table(title=f"groups that differ most (mean |A-B| per {c.groups_by} group)", title_justify="left",
                   header_style="bold", box=None)
    for col in ("A vs B", "group", "rows", "tokens", "mean |A-B|", "row"):
        groups.add_column(col, justify="left" if col in ("A vs B", "group") else "right", overflow="fold")
    for p in c.pairs:
        for g in p.groups[:TERMINAL_GROUPS]:
            label = str(g.uid) if g.batch is None else f"{g.batch} {g.uid}"
            groups.add_row(escape(f"{p.a} vs {p.b}"), escape(label), str(g.rows), f"{g.tokens:,}",
                           f"{g.mean_abs_diff:.4g}", str(g.row))
    console.print(groups)
    console.print(f"[dim]the first {TERMINAL_GROUPS} of up to {max(len(p.groups) for p in c.pairs)} per pair; "
                  "--json and --html have them all[/dim]")
    top = next((p for p in c.pairs if p.groups), None)
    if top is not None:
        g = top.groups[0]
        console.print(f"[dim]row {g.row} ({escape(g.where)}) under {escape(top.a)}, then {escape(top.b)}:[/dim]")
        for command in g.explain:
            console.print(f"  {escape(command)}", soft_wrap=True, highlight=False)
