"""One trajectory or one uid group of a dataset, as ``rladv compute`` computes it (``rladv inspect --row/--uid``).

``row_view`` shows one row token by token (spans, masks, scores, rewards, values, advantages, returns) and
``group_view`` one uid group member by member (totals, group mean/std, advantages, and why). ``export_group``
writes a group as a reproducer folder. Advantages come from ``rladv_cli.compute`` run on the rows they depend
on (``scope_of``): the row, its uid group, or the whole dataset; rows run without the rest of their batch are
padded to the batch's longest response (``pad_widths``), so their totals round as in the whole run.

Rows: ``row`` is 0-based within its file, ``dataset_row`` 0-based across all files in the order they are read
(what ``--row`` takes). A failing computation is reported in the view's ``error``, not raised.
"""
from __future__ import annotations

import math
import os
from typing import Literal, Optional, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel, ConfigDict, Field

from ..contract import validation
from ..contract.columns import array_of, assemble_scores, flat_values, list_offsets, score_positions
from ..config.settings import Config, batch_column, on_columns
from ..contract.labels import Labels
from ..errors import ConfigError, InputError, RladvError
from ..estimators.conventions import DEFAULT
from ..estimators.registry import DEFAULT_GROUP_ESTIMATOR, Estimator, with_check
from ..io.frames import open_rows
from ..io.read import Origin, RowSource, TableSource
from ..report.checks import masked_score_fate

PathLike = str | os.PathLike


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _fmt(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:.6g}"


class Span(_Model):
    kind: Literal["assistant", "observation", "padding", "rejected"]
    start: int
    end: int = Field(description="exclusive")


class RowView(_Model):
    """One trajectory, token by token; lists are per position (None when the column is absent/not computed)."""

    path: str
    row: int = Field(description="0-based within its file")
    dataset_row: int = Field(description="0-based across all files in the order they are read: what --row takes")
    uid: Optional[str]
    estimator: Optional[str]
    source: str = Field(description="where rewards/advantages come from: 'file' or 'compute (scope)'")
    length: int
    token_id: Optional[list[int]]
    response_mask: list[int]
    loss_mask: Optional[list[int]]
    attention_mask: Optional[list[int]]
    score: Optional[list[float]]
    reward: Optional[list[float]]
    value: Optional[list[float]]
    advantage: Optional[list[float]]
    returns: Optional[list[float]]
    spans: list[Span]
    score_total: Optional[float]
    reward_total: Optional[float]
    tool_rewards: Optional[list[float]] = Field(None, description="the row's tool_rewards, one per tool call (None "
                                                "without the column or for a null list)")
    notes: list[str]
    error: Optional[str] = None


class Reason(_Model):
    code: str
    message: str


class GroupMember(_Model):
    path: str
    row: int = Field(description="0-based within its file")
    dataset_row: int = Field(description="0-based across all files: what --row takes")
    batch: Optional[str]
    length: int
    actor_tokens: int
    rejected_tokens: int
    score_total: Optional[float]
    reward_total: Optional[float]
    advantage: Optional[float] = Field(description="advantage on the row's first response_mask 1 token")
    advantage_min: Optional[float]
    advantage_max: Optional[float]


class GroupStat(_Model):
    batch: Optional[str]
    size: int
    mean: Optional[float] = Field(description="mean of the members' total rewards")
    std: Optional[float] = Field(description="Bessel std of the total rewards (None for one row)")
    all_equal: bool
    singleton: bool


class GroupView(_Model):
    uid: str
    estimator: str
    scope: str = Field(description="rows compute ran on: group (the uid's rows), dataset (whole), or row")
    formula: str
    members: list[GroupMember]
    groups: list[GroupStat] = Field(description="one per batch (one entry without --batch-key)")
    why: list[Reason]
    error: Optional[str] = None


def scope_of(est: Estimator, settings: dict) -> str:
    """Rows an estimator needs, with these settings (``Config`` fields), to give one row its exact advantage:
    the row, its group, or the whole dataset (batch whitening or a batch-wide scale; an adaptive KL coefficient
    stepped batch by batch; rollout correction, whose batch statistics and checks take every row; token weights,
    whose denominators take the row's mini-batch)."""
    adaptive_kl = settings.get("kl_coef") and settings.get("kl_ctrl") == "adaptive" and batch_column(settings.get("batch_key"))
    if est.whiten or est.batch_wide or adaptive_kl or settings.get("rollout_rs") or settings.get("rollout_is"):
        return "dataset"
    if est.row_advantage or settings.get("convention", DEFAULT) != DEFAULT:  # a trainer's own groups and matrices
        return "dataset"
    if settings.get("loss_agg_mode"):  # a token's weight depends on its whole mini-batch
        return "dataset"
    return "group" if est.groups else "row"


def read_all(ds: RowSource) -> pa.Table:
    """The whole dataset as one table (for estimators and settings whose rows depend on every row)."""
    tables = [c.table for c in ds.chunks(None, 65536)]
    return pa.concat_tables(tables) if tables else ds.schema.empty_table()


def read_rows(ds: RowSource, keep) -> tuple[pa.Table, np.ndarray]:
    """Rows for which ``keep(chunk_table) -> (B,) bool`` holds, and their dataset-wide indices, in order."""
    parts, index = [], []
    for c in ds.chunks(None, 8192):
        sel = np.asarray(keep(c), dtype=bool)
        if sel.any():
            parts.append(c.table.filter(pa.array(sel)))
            index.append(c.first_row + np.flatnonzero(sel))
    if not parts:
        return ds.schema.empty_table(), np.zeros(0, dtype=np.int64)
    return pa.concat_tables(parts), np.concatenate(index)


def read_row(ds: RowSource, row: int) -> pa.Table:
    """Dataset row ``row`` as a one-row table (reading stops at its chunk)."""
    for c in ds.chunks(None, 8192):
        if c.first_row <= row < c.first_row + c.table.num_rows:
            return c.table.slice(row - c.first_row, 1)
    raise ConfigError(f"--row {row}: the dataset has {ds.num_rows} rows (0-based)")


def uid_equals(table: pa.Table, uid: str) -> np.ndarray:
    """``(B,) bool``: the rows whose uid, as a string, is ``uid`` (a null uid is no match)."""
    as_str = pc.cast(table["uid"], pa.string())
    return pc.fill_null(pc.equal(as_str, pa.scalar(str(uid), pa.string())), False).to_numpy(zero_copy_only=False)


def group_rows(ds: RowSource, uid: str) -> tuple[pa.Table, np.ndarray]:
    """The rows of uid group ``uid`` and their dataset-wide indices; errors when there is no such group."""
    if "uid" not in ds.columns:
        raise InputError(ds.paths[0], "missing; --uid needs a uid column", column="uid")
    table, index = read_rows(ds, lambda c: uid_equals(c.table, uid))
    if table.num_rows == 0:
        raise ConfigError(f"--uid {uid}: no row has this uid")
    return table, index


def origin_of(ds: RowSource, index: np.ndarray) -> Origin:
    """Where the dataset rows ``index`` (dataset-wide, ``(K,)``) live: each one's file and row within it."""
    file_index, file_row = ds.row_origins()
    return Origin(tuple(ds.paths), file_index[index], file_row[index])


def pad_widths(ds: RowSource, batch_key: Optional[str]) -> Optional[dict]:
    """Each batch's longest response in the dataset (batch key value, None without one -> length), for
    ``compute(pad_widths=...)`` on rows taken out of it; None where the columns for it are missing (``compute``
    then says what is)."""
    if "response_mask" not in ds.columns or (batch_key is not None and batch_key not in ds.columns):
        return None
    labels, widths = Labels(batch_key), np.zeros(0, dtype=np.int64)
    for c in ds.chunks(["response_mask", *([batch_key] if batch_key else [])], 65536):
        ids = labels.batch_ids(c.table, c.path, c.start)
        widths = np.pad(widths, (0, len(labels.batches) - widths.size))
        np.maximum.at(widths, ids, pc.list_value_length(c.table["response_mask"]).fill_null(0).to_numpy())
    return {value: int(widths[i]) for value, i in labels.batches.items()}


def compute_rows(ds: RowSource, est: Estimator, target: np.ndarray, uid: Optional[str], settings: dict):
    """Run ``compute`` with ``settings`` (``Config`` fields) on the rows ``est`` needs for the dataset rows
    ``target`` (sorted indices); returns ``(output rows of target, report, scope)``. Group-local estimators run
    on the uid's rows only and row-local ones on ``target``, padded to their batches' longest responses in the
    dataset (``pad_widths``), so they round as in a run over it; the others on the whole dataset (in memory)
    (``scope_of``). An error names the files and their rows, as ``rladv compute`` would."""
    from ..pipeline.driver import run_in_memory

    scope = scope_of(est, settings)
    if scope == "dataset":
        table, index, widths = read_all(ds), np.arange(ds.num_rows), None
    else:
        if scope == "group" and uid is not None:
            table, index = read_rows(ds, lambda c: uid_equals(c.table, uid))
        else:
            table, index = read_rows(ds, lambda c: np.isin(c.first_row + np.arange(c.table.num_rows), target))
        widths = pad_widths(ds, batch_column(settings.get("batch_key")))
    source = TableSource(table, origin=origin_of(ds, index))  # messages name the files and their rows
    out, report = run_in_memory(source, Config(estimator=est.name, **settings), pad_widths=widths)
    return out.take(pa.array(np.searchsorted(index, target))), report, scope


def _list(table: pa.Table, name: str, i: int = 0):
    return table[name][i].as_py() if name in table.column_names else None


def _spans(m: list[int], loss: Optional[list[int]], att: Optional[list[int]]) -> list[Span]:
    kinds = []
    for t, mt in enumerate(m):
        if att is not None and att[t] == 0:
            kinds.append("padding")
        elif mt:
            kinds.append("assistant")
        elif loss is not None and loss[t]:
            kinds.append("rejected")
        else:
            kinds.append("observation")
    spans: list[Span] = []
    for t, k in enumerate(kinds):
        if spans and spans[-1].kind == k:
            spans[-1].end = t + 1
        else:
            spans.append(Span(kind=k, start=t, end=t + 1))
    return spans


def _row_scores(table: pa.Table, i: int) -> Optional[list[float]]:
    t = table.slice(i, 1)
    off = list_offsets(array_of(t["response_mask"]))
    pad = flat_values(t, "attention_mask", np.int8) == 0 if "attention_mask" in t.column_names else None
    column = "rm_scores" if "rm_scores" in t.column_names else "score" if "score" in t.column_names else None
    if column is None:
        return None
    position, _ = score_positions(off, None if pad is None else (~pad).astype(np.int8))
    return assemble_scores(t, off, position).astype(np.float64).tolist()


def row_view(inputs: Sequence[PathLike] | PathLike, row: int, *, estimator: Optional[str] = None,
             **settings) -> RowView:
    """Row ``row`` token by token: 0-based across all the files of ``inputs`` in the order they are read (files
    as given, a folder's or glob's sorted), so for a single file its row within the file. The view carries
    both numbers: ``dataset_row`` (``row`` here) and ``path``/``row`` (within that file).

    Without ``estimator`` rewards/advantages/returns are the file's own columns (an ``rladv compute`` output has
    them). With one, ``rladv_cli.compute`` runs with ``settings`` (``Config`` fields) on the rows that estimator
    needs: the row alone (e.g. ``remax``), its uid group (group estimators), or the whole dataset for whitened
    ones (``gae``, ``reinforce_plus_plus*``) and ``gpg``, whose numbers depend on every row of the batch, and
    where the settings tie rows together (``scope_of``). Rows run on their own are padded to their batch's
    longest response in the dataset, as the whole run pads them (``pad_widths``), so their totals round the
    same (docs/semantics.md §7.2). A failing computation is reported in ``error``, not raised.
    """
    est = None if estimator is None else Config(estimator=estimator, **settings).spec
    ds = open_rows(inputs, settings.get("columns"), settings.get("where"))
    settings = on_columns(settings, ds.columns)  # the data's step column is the batch key unless given
    if not 0 <= row < ds.num_rows:
        across = f" across its {len(ds.paths)} files" if len(ds.paths) > 1 else ""
        raise ConfigError(f"--row {row}: the dataset has {ds.num_rows} rows{across} (0-based)")
    table = read_row(ds, row)
    path, file_row = ds.locate(row)
    validation.check_chunk(table, path, file_row)
    uid = str(table["uid"][0].as_py()) if "uid" in table.column_names else None
    source, error, out = "file", None, None
    if est is not None:
        try:
            out, _, scope = compute_rows(ds, est, np.array([row]), uid, settings)
            source = f"compute ({scope})"
        except RladvError as err:
            error = str(err)
    src = out if out is not None else table
    m = _list(src, "response_mask")
    loss = _list(src, "loss_mask")
    att = _list(table, "attention_mask")
    score = _row_scores(table, 0)
    reward = _list(src, "token_level_rewards")
    advantage, returns = _list(src, "advantages"), _list(src, "returns")
    notes = []
    spans = _spans(m, loss, att)
    if score is not None:
        for t, v in enumerate(score):
            if v != 0 and not m[t]:
                kind = "padding" if att is not None and att[t] == 0 else "rejected" if loss and loss[t] else "observation"
                notes.append(f"score_on_masked_position: score {v:g} at position {t} ({kind}): "
                             f"{masked_score_fate(est)}")
    basis = reward if reward is not None else score
    if (estimator is None or estimator in with_check("credit_reset_at_mask")) and basis is not None \
            and _credit_cut(m, basis):
        notes.append("credit_reset_at_mask: a reward sits on an actor token after a response_mask 0 position that "
                     "follows an actor token; reinforce_plus_plus passes it back to the earlier tokens (carry, the "
                     "default, as verl 0.9.1), --rpp-mask-mode reset cuts it off there")
    if not any(m):
        notes.append("row_without_actor_tokens: no position has response_mask 1, so no token gets an advantage")
    tools = table["tool_rewards"][0].as_py() if "tool_rewards" in table.column_names else None
    if tools:
        notes.append(f"tool_rewards: {len(tools)} tool call(s), sum {math.fsum(tools):g}; in the score only if "
                     "rladv compute ran with --tool-reward-coef (verl never adds them)")
    if loss is not None and any(lt and not mt for lt, mt in zip(loss, m)):
        notes.append(f"{sum(1 for lt, mt in zip(loss, m) if lt and not mt)} assistant token(s) rejected "
                     "(loss_mask 1, response_mask 0): advantage 0, their reward still counts in R")
    return RowView(
        path=path, row=file_row, dataset_row=row, uid=uid, estimator=estimator, source=source, length=len(m),
        token_id=_list(table, "responses"), response_mask=[int(x) for x in m],
        loss_mask=None if loss is None else [int(x) for x in loss], attention_mask=att, score=score,
        reward=reward, value=_list(table, "values"), advantage=advantage, returns=returns, spans=spans,
        score_total=math.fsum(score) if score is not None else None,
        reward_total=math.fsum(reward) if reward is not None else None, tool_rewards=tools, notes=notes, error=error,
    )


def _credit_cut(m: list[int], reward: list[float]) -> bool:
    """One row: a non-zero reward on an actor token after a mask-0 position that has an actor token before it
    (what the two reinforce_plus_plus mask modes credit differently)."""
    seen_actor = cut = False
    for mt, r in zip(m, reward):
        cut = cut or (seen_actor and not mt)
        seen_actor = seen_actor or bool(mt)
        if cut and mt and r != 0:
            return True
    return False


_KIND_STYLE = {"assistant": "green", "observation": "cyan", "padding": "dim", "rejected": "red"}


def _num(values: Optional[list], t: int) -> str:
    if values is None:
        return ""
    v = values[t]
    return f"{v:.6g}" if isinstance(v, float) else str(v)


def render_row(view: RowView, console, *, max_tokens: int = 200) -> None:
    """Print a ``RowView`` as a table, one line per position, coloured by span (assistant green, observation
    cyan, rejected red, padding dim). Rows longer than ``max_tokens`` show the first and last tokens of each
    span and one summary line for the middle."""
    from ..report.terminal import Table

    v = view
    spans = ", ".join(f"{s.kind} {s.start}-{s.end - 1}" for s in v.spans[:12])
    spans += f" ({len(v.spans) - 12} more spans)" if len(v.spans) > 12 else ""
    # --row N counts across all files; where that differs from the row within its file, show both
    where = f"{v.path}:{v.row}" if v.dataset_row == v.row else f"row {v.dataset_row} of the dataset = {v.path}:{v.row}"
    console.print(f"[bold]{where}[/bold]" + (f"  uid {v.uid}" if v.uid is not None else "")
                  + f"  {v.length} positions: {spans}")
    console.print(f"score total {_fmt(v.score_total)}, reward total {_fmt(v.reward_total)}; values from {v.source}"
                  + (f" ({v.estimator})" if v.estimator else ""))
    if v.error:
        console.print(f"[bold red]compute failed:[/bold red] {v.error}")
    t = Table(header_style="bold")
    cols = [("pos", None), ("token", v.token_id), ("kind", None), ("resp", v.response_mask), ("loss", v.loss_mask),
            ("att", v.attention_mask), ("score", v.score), ("reward", v.reward), ("value", v.value),
            ("advantage", v.advantage), ("return", v.returns)]
    cols = [(n, vals) for n, vals in cols if n in ("pos", "kind") or vals is not None]
    for n, _ in cols:
        t.add_column(n, justify="left" if n == "kind" else "right", overflow="fold", no_wrap=n in ("kind", "pos"))

    def line(pos: int, kind: str) -> None:
        cells = [str(pos) if n == "pos" else kind if n == "kind" else _num(vals, pos) for n, vals in cols]
        t.add_row(*cells, style=_KIND_STYLE[kind])

    def summary(s: Span, a: int, b: int) -> None:
        """One line for positions ``a..b-1``: each column shows its range (or its one value) over them."""
        cells = []
        for n, vals in cols:
            if n == "pos":
                cells.append(f"{a}-{b - 1}")
            elif n == "kind":
                cells.append(f"{s.kind} x{b - a}")
            elif n == "token":
                cells.append("...")
            else:
                seg = vals[a:b]
                lo, hi = min(seg), max(seg)
                cells.append(_num([lo], 0) if lo == hi else f"{_num([lo], 0)}..{_num([hi], 0)}")
        t.add_row(*cells, style="italic " + _KIND_STYLE[s.kind])

    if v.length <= max_tokens:
        for s in v.spans:
            for pos in range(s.start, s.end):
                line(pos, s.kind)
    else:
        k = max_tokens // (2 * len(v.spans))
        for s in v.spans:
            if s.end - s.start <= max(2 * k + 1, 1):
                for pos in range(s.start, s.end):
                    line(pos, s.kind)
            elif k == 0:
                summary(s, s.start, s.end)
            else:
                for pos in range(s.start, s.start + k):
                    line(pos, s.kind)
                summary(s, s.start + k, s.end - k)
                for pos in range(s.end - k, s.end):
                    line(pos, s.kind)
    console.print(t)
    for note in v.notes:
        console.print(f"[yellow]note[/yellow] {note}")


def group_view(inputs: Sequence[PathLike] | PathLike, uid: str, *, estimator: str = DEFAULT_GROUP_ESTIMATOR,
               **settings) -> GroupView:
    """The rows of uid group ``uid``: each member's score and reward totals, the group mean/std, each member's
    advantage under ``estimator``, and why (singleton fallback, all-equal totals, rejected or empty rows still
    in the baseline, scores on masked positions).

    ``rladv_cli.compute`` runs with ``settings`` on the uid's rows only for group-local estimators (their
    numbers depend on the group alone); whitened estimators (``gae``, ``reinforce_plus_plus*``) and ``gpg``
    depend on the whole batch, so they run on the whole dataset (held in memory) and the members are taken
    from it (as for settings that tie rows together, ``scope_of``). A group run on its own is padded to its
    batch's longest response in the dataset (``pad_widths``), so its totals round as in the whole run
    (docs/semantics.md §7.2). With ``batch_key`` the uid's rows in different batches are
    different groups: ``groups`` has one entry per batch. A failing computation (e.g. ``grpo_passk`` on a
    singleton) is reported in ``error``, not raised.
    """
    cfg = Config(estimator=estimator, **settings)
    est = cfg.spec
    ds = open_rows(inputs, settings.get("columns"), settings.get("where"))
    settings = on_columns(settings, ds.columns)  # the data's step column is the batch key unless given
    table, index = group_rows(ds, uid)
    for i in range(table.num_rows):
        path, file_row = ds.locate(int(index[i]))
        validation.check_chunk(table.slice(i, 1), path, file_row)
    scope, error, out = scope_of(est, settings), None, None
    try:
        out, _, scope = compute_rows(ds, est, index, uid, settings)
    except RladvError as err:
        error = str(err)
    batch_key = batch_column(settings.get("batch_key"))
    members: list[GroupMember] = []
    totals: list[Optional[float]] = []
    for i in range(table.num_rows):
        path, file_row = ds.locate(int(index[i]))
        score = _row_scores(table, i)
        src = out.slice(i, 1) if out is not None else table.slice(i, 1)
        m = _list(src, "response_mask")
        loss = _list(src, "loss_mask")
        reward = _list(src, "token_level_rewards")
        adv = _list(src, "advantages")
        reward_total = math.fsum(reward) if reward is not None else (math.fsum(score) if score is not None else None)
        totals.append(reward_total)
        actor_adv = [a for a, mt in zip(adv, m) if mt] if adv is not None else []
        members.append(GroupMember(
            path=path, row=file_row, dataset_row=int(index[i]),
            batch=None if batch_key not in table.column_names else f"{batch_key}={table[batch_key][i].as_py()}",
            length=len(m), actor_tokens=int(sum(m)),
            rejected_tokens=sum(1 for lt, mt in zip(loss, m) if lt and not mt) if loss is not None else 0,
            score_total=math.fsum(score) if score is not None else None, reward_total=reward_total,
            advantage=actor_adv[0] if actor_adv else None,
            advantage_min=min(actor_adv) if actor_adv else None, advantage_max=max(actor_adv) if actor_adv else None,
        ))
    stats: list[GroupStat] = []
    for b in dict.fromkeys(mb.batch for mb in members):
        vals = [t for mb, t in zip(members, totals) if mb.batch == b and t is not None]
        n = sum(1 for mb in members if mb.batch == b)
        mean = math.fsum(vals) / len(vals) if vals else None
        std = math.sqrt(math.fsum((x - mean) ** 2 for x in vals) / (len(vals) - 1)) if len(vals) > 1 else None
        stats.append(GroupStat(batch=b, size=n, mean=mean, std=std, all_equal=len(vals) > 1 and len(set(vals)) == 1,
                               singleton=n == 1))
    return GroupView(uid=str(uid), estimator=est.name, scope=scope, formula=f"{est.summary_for(cfg.params())}; baseline: {est.baseline}",
                     members=members, groups=stats, why=_why(est, members, stats, table, out), error=error)


def _why(est: Estimator, members: list[GroupMember], stats: list[GroupStat], table: pa.Table,
         out: Optional[pa.Table]) -> list[Reason]:
    why: list[Reason] = []
    if not est.groups:
        why.append(Reason(code="no_groups", message=f"{est.name} does not use groups; advantages come from "
                          f"{est.baseline}"))
    for g in stats:
        where = f" ({g.batch})" if g.batch else ""
        if g.singleton:
            why.append(Reason(code="singleton_group", message=f"one row{where}: no group baseline; {est.name}: "
                              f"{est.singleton or 'no group fallback'}"))
        elif g.all_equal:
            why.append(Reason(code="all_equal_group", message=f"every member{where} has total {g.mean:.6g}: R - mean = 0, "
                              "no learning signal (float32 rounding can leave tiny non-zero advantages)"))
        elif g.mean is not None:
            why.append(Reason(code="group_stats", message=f"{g.size} rows{where}: mean {g.mean:.6g}, std {_fmt(g.std)}; "
                              f"a member above the mean gets a positive advantage"))
    for mb in members:
        where = f"{mb.path}:{mb.row}"
        if mb.actor_tokens == 0 and mb.rejected_tokens:
            why.append(Reason(code="row_fully_rejected", message=f"{where}: every actor token rejected; its reward "
                              f"{_fmt(mb.reward_total)} still moves the group baseline"))
        elif mb.rejected_tokens:
            why.append(Reason(code="rejected_in_group_baseline", message=f"{where}: {mb.rejected_tokens} rejected "
                              f"token(s); its full reward {_fmt(mb.reward_total)} still counts in the baseline"))
        elif mb.actor_tokens == 0:
            why.append(Reason(code="row_without_actor_tokens", message=f"{where}: no actor token, so no advantage; "
                              "its reward still enters the group statistics"))
    for i, mb in enumerate(members):
        score = _row_scores(table, i)
        src = out.slice(i, 1) if out is not None else table.slice(i, 1)
        m = _list(src, "response_mask")
        if score is not None and any(v != 0 and not mt for v, mt in zip(score, m)):
            why.append(Reason(code="score_on_masked_position", message=f"{mb.path}:{mb.row}: the score sits on a "
                              "response_mask 0 position; group estimators still count it in R"))
    return why


def render_group(view: GroupView, console) -> None:
    """Print a ``GroupView``: the estimator's formula, group statistics, one line per member, and the reasons."""
    from ..report.terminal import Table

    v = view
    console.print(f"[bold]uid {v.uid}[/bold]  estimator [cyan]{v.estimator}[/cyan] (computed on: {v.scope})")
    console.print(f"[dim]{v.formula}[/dim]")
    for g in v.groups:
        console.print(("" if g.batch is None else f"{g.batch}: ") + f"{g.size} row(s), mean {_fmt(g.mean)}, "
                      f"std {_fmt(g.std)}" + (", all equal" if g.all_equal else "") + (", singleton" if g.singleton else ""))
    if v.error:
        console.print(f"[bold red]compute failed:[/bold red] {v.error}")
    paths = {mb.path for mb in v.members}
    batches = any(mb.batch for mb in v.members)
    shifted = any(mb.dataset_row != mb.row for mb in v.members)  # not the dataset's first file: --row N differs
    t = Table(header_style="bold underline", title=f"rows of {next(iter(paths))}" if len(paths) == 1 else None,
              box=None, pad_edge=False)  # no rules: 80 columns hold the row's numbers
    cols = ["row"] + (["batch"] if batches else []) + ["actor", "rejected", "score total", "reward total", "advantage",
                                                       "adv min..max"]
    for col in cols:
        t.add_column(col, justify="left" if col in ("row", "batch") else "right", overflow="fold")
    for mb in v.members:
        span = "" if mb.advantage_min is None else (
            f"{mb.advantage_min:.6g}" if mb.advantage_min == mb.advantage_max else f"{mb.advantage_min:.6g}..{mb.advantage_max:.6g}")
        style = "red" if mb.advantage is None else "green" if mb.advantage > 0 else "yellow" if mb.advantage < 0 else "dim"
        cells = [(str(mb.row) if len(paths) == 1 else f"{mb.path}:{mb.row}")
                 + (f" (row {mb.dataset_row})" if shifted else "")] + ([mb.batch or ""] if batches else [])
        cells += [str(mb.actor_tokens), str(mb.rejected_tokens), _fmt(mb.score_total), _fmt(mb.reward_total),
                  _fmt(mb.advantage), span]
        t.add_row(*cells, style=style)
    console.print(t)
    for r in v.why:
        console.print(f"[yellow]{r.code}[/yellow] {r.message}")
