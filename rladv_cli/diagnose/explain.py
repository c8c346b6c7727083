"""``rladv explain``: one row's advantage derived step by step, as the worked examples of docs/semantics.md do.

Each estimator's module gives its derivation (the registry's ``explain``): token-level estimators a per-token
table of the recursion with its constants, group estimators their group (members' totals, baseline, scale and
result). The final advantages always come from the same computation ``rladv compute`` runs; the intermediate
columns are recomputed with the plain recursion, for reading.
"""
from __future__ import annotations

import os
from typing import Optional, Sequence

import numpy as np
import pyarrow as pa
from pydantic import BaseModel, Field

from ..config.settings import Config, on_columns
from ..contract.validation import is_number_list
from ..errors import ConfigError
from ..io.frames import open_rows
from .views import GroupView, compute_rows, group_view, read_row, render_group

PathLike = str | os.PathLike


class WeightDerivation(BaseModel):
    """How the trainer's loss aggregation weighs the row's tokens (``--loss-agg-mode``; docs/weights.md)."""

    trainer: str
    option: str = Field(description="the trainer's setting that picks the mode")
    mode: str
    formula: str = Field(description="w_t = A_t · ρ_t · m_t · c_i, with the mode's c_i")
    mini_batch: int = Field(description="the row's mini-batch, numbered from 0 in dataset order")
    micro_batch: int
    terms: dict[str, float] = Field(description="what c_i is made of, for this row")
    scale: float = Field(description="c_i")
    token_weight: list[float] = Field(description="per position: w_t (0 off the mask)")


class Explanation(BaseModel):
    """The derivation of one row's advantages under one estimator."""

    estimator: str
    path: str
    row: int = Field(description="0-based within its file")
    uid: Optional[str]
    formula: list[str]
    constants: dict[str, float | str]
    columns: list[str] = Field(description="names of the per-token table's columns")
    tokens: list[list[Optional[float | str]]] = Field(description="per position, values in `columns` order")
    group: Optional[GroupView] = None
    advantages: list[float]
    response_mask: list[int] = Field(description="the mask the estimator used (after rollout rejection)")
    input_advantages: Optional[list[Optional[float]]] = Field(
        None, description="the row's own advantages in the input (a trainer dump, an earlier output), when it has them")
    weight: Optional[WeightDerivation] = Field(None, description="with --loss-agg-mode: what the row's tokens weigh")
    arithmetic: Optional[str] = Field(None, description="a group estimator's advantage of the row written out with its "
                                      "group's totals (estimators that declare it)")


def explain(inputs: Sequence[PathLike] | PathLike, row: int, estimator: str, **settings) -> Explanation:
    """Explain dataset row ``row`` (0-based; the row within the file for a single file) under ``estimator``.

    Computed on the CPU unless ``settings`` name a device: a row or a group is no work for a GPU, and the CPU's
    loops round as verl's do, which the recursion shown beside the advantages follows."""
    settings.setdefault("device", "cpu")
    cfg = Config(estimator=estimator, **settings)
    ds = open_rows(inputs, settings.get("columns"), settings.get("where"))
    settings = on_columns(settings, ds.columns)  # the data's step column is the batch key unless given
    cfg = cfg.for_columns(ds.columns)
    if not 0 <= row < ds.num_rows:
        raise ConfigError(f"--row {row}: the dataset has {ds.num_rows} rows (0-based)")
    est = cfg.spec
    one = read_row(ds, row)
    uid = str(one["uid"][0].as_py()) if "uid" in one.column_names else None
    mine, report, _ = compute_rows(ds, est, np.array([row]), uid, settings)
    path, local = ds.locate(row)
    base = dict(estimator=estimator, path=path, row=local, uid=uid, advantages=mine["advantages"][0].as_py(),
                response_mask=mine["response_mask"][0].as_py(), input_advantages=_given_advantages(one),
                weight=_weight(cfg, report, row, mine) if cfg.loss_mode is not None else None)
    whitening = {}
    if report.whitening:
        w = report.whitening[0] if len(report.whitening) == 1 else next(
            x for x in report.whitening if cfg.batch_column and x["batch"] == f"{cfg.batch_column}={one[cfg.batch_column][0].as_py()}")
        whitening = {"whitening mean": w["mean"], "whitening std": float(np.sqrt(w["var"] + 1e-8)), "batch tokens": w["tokens"]}
    derived = est.derivation()(est, _row_values(mine), cfg.params(), whitening)
    if derived.by_group:  # one advantage per row: explained by its group (a uid group, unless the convention's
        # trainer groups otherwise: then the formula and the row's advantage, computed over the whole dataset)
        view = group_view(ds.paths, uid, estimator=estimator, **settings) if cfg.conv.grouping == "uid" else None
        return Explanation(**base, formula=derived.formula, constants=derived.constants, columns=[], tokens=[],
                           group=view, arithmetic=_arithmetic(est, cfg, view, path, local,
                                                              {"session_id", "output_index"} <= set(one.column_names)))
    columns, tokens = list(derived.columns), [list(values) for values in derived.tokens]
    if base["weight"] is not None:
        columns.append("weight")
        for values, w in zip(tokens, base["weight"].token_weight):
            values.append(w)
    if base["input_advantages"] is not None:  # beside the advantage, for a replay's differing row
        columns.append("input's advantage")
        for values, given in zip(tokens, base["input_advantages"]):
            values.append(given)
    return Explanation(**base, formula=derived.formula, constants=derived.constants, columns=columns, tokens=tokens)


def _arithmetic(est, cfg: Config, view: Optional[GroupView], path: str, row: int, sessions: bool) -> Optional[str]:
    """The row's advantage written out with its group's reward totals (verl's rules, the group's rows in the
    row's batch, no multi-output ``sessions`` folded), for an estimator that declares how (``arithmetic``)."""
    written = est.row_arithmetic()
    if written is None or view is None or view.error or cfg.conv.name != "verl":
        return None
    me = next(m for m in view.members if m.path == path and m.row == row)
    mine = [m for m in view.members if m.batch == me.batch]
    if any(m.reward_total is None for m in mine) or (est.folds_sessions and sessions):
        return None
    totals = np.array([m.reward_total for m in mine], dtype=np.float64)
    return f"row {row}: {written(float(me.reward_total), totals, cfg.params())}"


def _weight(cfg: Config, report, row: int, out: pa.Table) -> WeightDerivation:
    """The row's weighing from the run's row table (``mini_batch``, ``weight_scale``, ``weight_terms``) and its
    output ``token_weight``."""
    facts = report.arrow_tables()[1].slice(row, 1).to_pylist()[0]
    agg = cfg.aggregation
    return WeightDerivation(trainer=agg.trainer, option=agg.option, mode=cfg.loss_mode.name,
                            formula=f"w_t = A_t · ρ_t · m_t · c_i, c_i = {cfg.loss_mode.formula}",
                            mini_batch=facts["mini_batch"], micro_batch=facts["micro_batch"],
                            terms={k: float(v) for k, v in (facts["weight_terms"] or {}).items()},
                            scale=facts["weight_scale"], token_weight=out["token_weight"][0].as_py())


def _row_values(row: pa.Table) -> dict[str, np.ndarray]:
    """The one output row's token columns a derivation reads, as float64 arrays (``values`` when present)."""
    names = ("response_mask", "token_level_rewards", "advantages", "returns", "values")
    return {name: np.asarray(row[name][0].as_py(), dtype=np.float64) for name in names if name in row.column_names}


def _given_advantages(row: pa.Table) -> Optional[list[Optional[float]]]:
    """The input row's own ``advantages``, when the column is a list of numbers of the row's length."""
    if "advantages" not in row.column_names:
        return None
    if not is_number_list(row.schema.field("advantages").type):
        return None
    values = row["advantages"][0].as_py()
    if values is None or len(values) != len(row["response_mask"][0].as_py()):
        return None
    return [None if v is None else float(v) for v in values]


def render_explanation(e: Explanation, console) -> None:
    """Print the derivation: formula, constants, then the per-token table or the group."""
    from ..report.terminal import Table

    console.print(f"[bold]{e.estimator}[/bold]  {e.path}:{e.row}" + (f"  uid {e.uid}" if e.uid else ""))
    for line in e.formula:
        console.print(f"  {line}")
    if e.constants:
        console.print("  " + ", ".join(f"{k} = {v:.6g}" if isinstance(v, float) else f"{k} = {v}"
                                       for k, v in e.constants.items()))
    if e.group is not None or not e.columns:
        if e.group is not None:
            render_group(e.group, console)
        if e.arithmetic is not None:
            console.print(e.arithmetic)
        console.print(f"row {e.row}: advantage {next((a for a in e.advantages if a), 0.0):.7g} on its actor tokens")
        if e.weight is not None:
            _render_weight(e, console)
        if e.input_advantages is not None:
            given = [v for v, m in zip(e.input_advantages, e.response_mask) if m]
            shown = f"{given[0]:.7g}" if given and len(set(given)) == 1 and given[0] is not None else ", ".join(
                "-" if v is None else f"{v:.7g}" for v in given)
            console.print(f"the input's advantage{'s' if len(set(given)) > 1 else ''} on those tokens: {shown or '-'}")
        return
    table = Table(header_style="bold underline", box=None, pad_edge=False)  # no rules: 80 columns hold 9 numbers
    for col in e.columns:
        table.add_column(col, justify="right")
    for values in e.tokens:
        table.add_row(*("" if v is None else f"{v:.6g}" if isinstance(v, float) else str(v) for v in values))
    console.print(table)
    if e.weight is not None:
        _render_weight(e, console)


def _render_weight(e: Explanation, console) -> None:
    """The weighing: the mode, the formula, the row's batches and terms, c_i, and the weights on its tokens."""
    w = e.weight
    console.print(f"[bold]token weight[/bold]  {w.trainer} {w.option}={w.mode}")
    console.print(f"  {w.formula}")
    terms = ", ".join(f"{k} = {v:.7g}" for k, v in w.terms.items())
    console.print(f"  mini-batch {w.mini_batch}, micro-batch {w.micro_batch}" + (f": {terms}" if terms else ""))
    on = sorted({round(x, 12) for x, m in zip(w.token_weight, e.response_mask) if m})
    shown = (f"{on[0]:.7g}" if len(on) == 1 else f"{len(on)} values from {on[0]:.7g} to {on[-1]:.7g}") if on else "-"
    console.print(f"row {e.row}: c_i = {w.scale:.7g}; token_weight on its actor tokens: {shown} "
                  f"(sum |w| {sum(abs(x) for x in w.token_weight):.7g})")
