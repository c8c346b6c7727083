"""The mask/group debugger for "the reward looks fine but the model does not learn" (docs/debugging.md).

``inspect`` streams a dataset chunk by chunk with pyarrow/numpy (no torch; only the columns it needs; per row
and per group it keeps a few scalars, never tokens) and returns an ``Inspection``: the verdict (``signal.py``),
docs/contract.md §5's object (``rows``, ``tokens``, ``groups``, ``columns``, ``checks``) plus ``layout``, ``scores``, ``masks``, ``kl``,
``advantages`` and ``dead_signal``. ``--row`` and ``--uid`` (one trajectory token by token, one uid group member
by member, computed through ``rladv_cli.compute``) live in ``views.py``.

Rows: ``rows`` are 0-based within their file, ``where`` gives file:row and ``dataset_rows`` the same rows 0-based
across all files in the order they are read, the numbering ``--row`` takes.

Actor tokens are the mask as read before rollout rejection, as ``rladv compute`` calls them (its m0): ``loss_mask``
when the file has one (an rladv output's original mask; its ``response_mask`` is the mask after rejection),
else ``response_mask``. ``tokens`` counts them as compute's report does (``rejected``: ``loss_mask`` 1,
``response_mask`` 0; ``used``: ``response_mask`` 1), and the layout, KL shaping, ``score_on_masked_position``
and ``row_without_actor_tokens`` use them, as compute does; advantages and ``credit_reset_at_mask`` use
``response_mask``, the mask the estimator saw. So on an rladv output inspect gives compute's numbers.

Checks, in the debugging order of docs/debugging.md (``step``); every check is listed with ``pass`` when the data
allows checking it, ``rows`` are the first five rows. Each code's step, message, pass line, severity and the
estimators it can affect are declared once in the catalogue of checks (``report.checks``), which compute's report
words its warnings from too; the hazard checks are computed in ``hazards.py``. When ``estimator`` is given, a check
whose condition cannot affect it keeps its ``count`` but has status ``pass`` and says why. Each row is checked
once: an invalid row (a validation error, or a null / wrong-length / non-finite ``token_level_rewards`` or
``advantages``, a null ``session_id``) is left out of every other statistic and check (it is still counted in
``rows``). ``group_size_mismatch`` counts batches, as compute's report does (one without ``batch_key``), with the
first rows of the groups off the size (``expected_n``, else the batch's most common size, ties -> the larger;
with ``session_id`` and an estimator that folds sessions, the number of distinct sessions).

Reward basis (``groups.basis``): the KL-shaped reward ``s − β·kld`` when ``kl_coef`` != 0 and both log-prob
columns exist (computed here in numpy from the scores, docs/semantics.md §4, ``kld`` on the actor tokens; on an rladv
output made with the same coefficient this is its ``token_level_rewards``, and another coefficient asks
"what if"); else ``token_level_rewards`` when the file has it (a ``rladv compute`` output); else the scores.
Row totals are float64 sums of the float32 values, so an all-equal decision can differ from ``rladv compute``'s
float32 totals in rounding edge cases only.

A dataset that cannot be opened raises ``InputError`` (so does one without a usable ``response_mask``);
bad rows never stop ``inspect``.
"""
from __future__ import annotations

import math
import os
from collections import Counter
from typing import Any, Mapping, Optional, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..contract import validation
from ..contract.labels import Labels, uid_merges
from ..errors import ConfigError
from ..estimators.registry import DEFAULT_GROUP_ESTIMATOR, Estimator, get_estimator
from ..io.read import RowSource
from ..io import frames
from ..io.write import SideFiles, check_side_outputs, signals_deferred
from ..report.checks import group_size_words
from ..report.distributions import histogram
from ..report.model import row_filter, row_stats
from ..report.tables import write_tables
from ..report.verdict import group_min_max
from .findings import (CAUSES, Advantages, Cause, Checklist, DeadSignal, Dist, Groups, Inspection, KLSummary, Layout,
                       LossVsResponse, Masks, RowDistributions, Scores, TokenCounts)
from .scan import Plan, RowScalars, invalid_rows, plan_of, scan_chunk
from . import hazards
from .signal import checklist_flags, checklist_verdict

PathLike = str | os.PathLike


def _dist(v: np.ndarray) -> Dist:
    if v.size == 0:
        return Dist(mean=None, min=None, max=None)
    return Dist(mean=math.fsum(v.astype(np.float64)) / v.size, min=float(v.min()), max=float(v.max()))


def inspect(inputs: Sequence[PathLike] | PathLike, *, expected_n: Optional[int] = None, kl_coef: float = 0.0,
            kl_penalty: str = "kl", estimator: Optional[str] = None, chunk_rows: int = 8192,
            html_path: Optional[PathLike] = None, columns: Optional[Mapping[str, str]] = None,
            batch_key: Optional[str] = None, epsilon: float = 1e-6, norm_adv_by_std: bool = True,
            groups_path: Optional[PathLike] = None, rows_path: Optional[PathLike] = None,
            where: Optional[str] = None, thresholds: Optional[Mapping[str, tuple]] = None) -> Inspection:
    """Stream a dataset (file, files or folder) and check it in the debugging order of docs/debugging.md; no torch.

    ``expected_n``: rows each uid group should have (verl's ``rollout.n``); ``kl_coef`` / ``kl_penalty``: check
    KL reward shaping as ``rladv compute`` would apply it; ``estimator``: word messages and statuses for it and
    require its columns; ``html_path``: also write the findings there as a self-contained HTML page; ``columns``:
    the files' names of contract columns (``Config.columns``); ``batch_key``: the column whose values are training
    steps (groups never cross them; the verdict is given per step, as it is per file for several files without
    it); ``epsilon`` / ``norm_adv_by_std``: grpo's settings, for ``epsilon_dominated_std``; ``groups_path`` /
    ``rows_path``: also write the tables behind the verdict there as Parquet (``report.tables``; the page and the
    tables appear together or not at all); ``where``: only the rows this SQL predicate keeps (``io.frames``,
    held in memory); ``thresholds``: the verdict's levels per check over the defaults (``Config.thresholds``,
    docs/debugging.md). ``inputs`` may also be a frame (``io.frames``). Memory: one chunk of
    ``chunk_rows`` rows plus a few scalars per row and per group.
    Raises ``InputError`` when the dataset cannot be read, ``ConfigError`` for bad arguments.
    """
    est = None if estimator is None else get_estimator(estimator)
    if chunk_rows <= 0:
        raise ConfigError(f"--chunk-rows must be > 0, got {chunk_rows}")
    if expected_n is not None and expected_n < 1:
        raise ConfigError(f"--expected-n must be >= 1, got {expected_n}")
    from ..config.settings import KL_MODES, batch_column, resolve_batch_key

    if kl_penalty.removesuffix("+") not in KL_MODES:
        raise ConfigError(f"--kl-penalty: '{kl_penalty}' is not a KL estimate verl implements; choose one of {', '.join(KL_MODES)}")
    if batch_key is not None and not batch_key.strip():
        raise ConfigError(f"--batch-key {batch_key!r} names no column")
    ds = frames.open_rows(inputs, columns, where)
    check_side_outputs(None, ds.paths, {"--html": html_path, "--groups-out": groups_path, "--rows-out": rows_path})
    batch_key = batch_column(resolve_batch_key(batch_key, ds.columns))  # the data's step column unless given
    if batch_key is not None and batch_key not in ds.columns:
        validation.check_schema(ds.paths[0], ds.schema, {batch_key: "--batch-key names it"})
    plan, bad_columns = plan_of(ds, kl_coef, batch_key)
    rows = RowScalars()
    labels = Labels(batch_key)
    sessions: set[tuple[int, Any]] = set()
    bad_rows: list[tuple[int, str]] = []  # (dataset row, message)
    for chunk in ds.chunks(plan.columns, chunk_rows):
        t = chunk.table
        bad = invalid_rows(t, chunk.path, chunk.start)
        if bad:
            bad_rows += [(chunk.first_row + i, msg) for i, msg in bad]
            keep = np.ones(t.num_rows, dtype=bool)
            keep[[i for i, _ in bad]] = False
            t = t.filter(pa.array(keep))
            drow = chunk.first_row + np.flatnonzero(keep)
        else:
            drow = chunk.first_row + np.arange(t.num_rows)
        if t.num_rows == 0:
            continue
        cols = scan_chunk(t, plan, kl_coef, kl_penalty)
        batch = labels.batch_ids(t, chunk.path, chunk.start)
        cols["batch_id"] = batch  # all 0 without --batch-key: the dataset is one batch
        cols["file"], cols["file_row"] = np.full(t.num_rows, chunk.file_index), chunk.start + drow - chunk.first_row
        cols["step"] = batch if batch_key is not None else np.full(t.num_rows, chunk.file_index)
        if plan.uid:
            gids = labels.group_ids(t, batch, chunk.path, chunk.start)
            cols["group_id"] = gids
            if plan.session:
                enc = pc.dictionary_encode(t["session_id"]).combine_chunks()
                values = enc.dictionary.to_pylist()
                codes = enc.indices.to_numpy(zero_copy_only=False)
                sessions.update(zip(gids.tolist(), (values[c] for c in codes.tolist())))
        rows.add(drow=drow, **cols)
    if batch_key is not None:  # the steps in key order
        rank, steps = labels.step_ranks()
        rows.replace("step", rank[rows["step"].astype(np.int64)])
    else:
        steps = list(ds.paths)
    result = _summarise(ds, plan, est, rows, labels, sessions, bad_rows, bad_columns, expected_n, kl_coef, kl_penalty,
                        steps, columns, (epsilon, norm_adv_by_std), thresholds)
    with SideFiles() as side:
        write_tables(side, result, (groups_path, rows_path))
        if html_path is not None:
            from .html import render_inspection_html

            side.write(html_path, render_inspection_html(result))
        with signals_deferred():
            side.commit()
    return result


# ==================================================================================== summary and checks
def std_epsilon(est: Optional[Estimator], epsilon: float, norm_adv_by_std: bool) -> Optional[float]:
    """The epsilon ``est`` adds to its group std before dividing; without an estimator, the default group
    estimator's."""
    return (est or get_estimator(DEFAULT_GROUP_ESTIMATOR)).std_epsilon(epsilon, norm_adv_by_std)


def _flagged(rows: RowScalars, name: str) -> np.ndarray:
    return rows["drow"][rows[name].astype(bool)] if name in rows else np.zeros(0, dtype=np.int64)


def _summarise(ds: RowSource, plan: Plan, est: Optional[Estimator], rows: RowScalars, labels: Labels,
               sessions: set, bad_rows: list, bad_columns: list[str], expected_n: Optional[int],
               kl_coef: float, kl_penalty: str, steps: list[str], columns: Optional[Mapping[str, str]],
               std_rule: tuple[float, bool], thresholds: Optional[Mapping[str, tuple]] = None) -> Inspection:
    checks = Checklist(ds.locate, est)
    name = est.name if est else None
    # ---- step 0: the data contract
    checks.add("invalid_rows", len(bad_rows), [r for r, _ in bad_rows], n=len(bad_rows),
               first=bad_rows[0][1] if bad_rows else "")
    checks.add("invalid_columns", len(bad_columns), [], problems=bad_columns)
    missing = []
    if plan.score is None:
        missing.append("rm_scores or score (a dataset needs one; score checks skipped)")
    if est is not None:
        names = set(ds.columns)
        missing += [c for c in validation.required_columns(names, est.reads) if c not in names and c not in ("rm_scores", "score")]
    if kl_coef != 0.0 and not {"old_log_probs", "ref_log_prob"} <= set(ds.columns):
        missing.append("old_log_probs and ref_log_prob (needed for --kl-coef; KL checks skipped)")
    checks.add("missing_columns", len(missing), [], missing=missing, also=f" and {name}" if name else "")

    length, actor, used, padding = rows["length"], rows["actor"], rows["used"], rows["padding"]
    total_tokens, actor_tokens, pad_tokens = int(length.sum()), int(actor.sum()), int(padding.sum())
    used_tokens = int(used.sum())
    rejected_tokens = int(rows["loss_only"].sum()) if plan.loss else 0
    scored = plan.score is not None
    # ---- step 1: are the score totals what you expect?
    if plan.score == "rm_scores":
        fl = _flagged(rows, "non_terminal")
        checks.add("non_terminal_score", fl.size, fl, n=fl.size)
    # ---- step 2: KL shaping
    kl = None
    if plan.kl:
        raises, flips = _flagged(rows, "kl_raises_reward"), _flagged(rows, "kl_flips_sign")
        checks.add("kl_raises_reward", raises.size, raises, n=raises.size, penalty=kl_penalty)
        checks.add("kl_flips_sign", flips.size, flips, n=flips.size, coef=kl_coef)
        kl_row = rows["kl_row"]
        kl = KLSummary(penalty=kl_penalty, coef=kl_coef, mean=float(math.fsum(kl_row) / kl_row.size) if kl_row.size else None,
                       rows_raises_reward=int(raises.size), rows_flips_sign=int(flips.size))
    # ---- step 3: masks
    # actor tokens: the mask before rollout rejection (an rladv output's loss_mask), as compute's checks use
    actor_mask = "loss_mask" if plan.loss else "response_mask"
    grouped = plan.uid and (est is None or est.groups)  # rows enter a group's baseline
    if scored:
        fl = rows["drow"][(rows["score_on_observation"] + rows["score_on_padding"]) > 0]
        checks.add("score_on_masked_position", fl.size, fl, n=fl.size, mask=actor_mask, est=est)
    without = rows["drow"][actor == 0]
    checks.add("row_without_actor_tokens", without.size, without, n=without.size, mask=actor_mask, grouped=grouped)
    if scored:
        hazards.empty_response_score(checks, rows)
    fully_rejected = rows["drow"][(actor > 0) & (used == 0)]
    if plan.loss:
        checks.add("row_fully_rejected", fully_rejected.size, fully_rejected, n=fully_rejected.size, grouped=grouped)
        fl = rows["drow"][rows["loss_only"] > 0]
        checks.add("loss_mask_differs", fl.size, fl, n=fl.size, tokens=int(rows["loss_only"].sum()))
    # ---- steps 4-5: groups
    groups = Groups(count=0, sizes={}, singletons=0, all_equal=0, expected_n=expected_n, basis=plan.basis)
    group_flags: dict[str, np.ndarray] = {}
    if not plan.uid and not (est is not None and est.groups):  # a group estimator: missing_columns fails
        checks.add("no_groups", 1, [])
    if plan.uid:
        groups, group_flags = _group_checks(checks, plan, est, rows, labels, sessions, expected_n, steps, std_rule)
    # ---- step 6: advantages
    adv, dead = None, None
    if plan.advantages:
        adv, dead = _advantage_summary(checks, plan, rows, group_flags)
    # ---- step 7: REINFORCE++ credit
    if scored:
        fl = _flagged(rows, "credit_reset_at_mask")
        checks.add("credit_reset_at_mask", fl.size, fl, n=fl.size)

    scores = None
    if scored:
        scores = Scores(
            column=plan.score, score_total=row_stats(rows["score_total"]), reward_total=row_stats(rows["reward_total"]),
            reward_basis=plan.basis,
            rows_score_on_masked_position=int(((rows["score_on_observation"] + rows["score_on_padding"]) > 0).sum()),
            tokens_score_on_observation=int(rows["score_on_observation"].sum()),
            tokens_score_on_padding=int(rows["score_on_padding"].sum()),
            rows_non_terminal_score=int(rows["non_terminal"].sum()) if "non_terminal" in rows else 0,
            tool_rewards=row_stats(rows["tool_reward_sum"][rows["tool_calls"] > 0]) if plan.tools else None,
        )
    masks = Masks(
        has_loss_mask=plan.loss, has_attention_mask=plan.attention,
        loss_vs_response=LossVsResponse(
            rows=int((rows["loss_only"] > 0).sum()), loss_only_tokens=int(rows["loss_only"].sum()),
        ) if plan.loss else None,
        padding_tokens=pad_tokens, loss_on_padding_tokens=int(rows["loss_on_padding"].sum()) if plan.loss else 0,
        rows_without_actor_tokens=int(without.size), rows_fully_rejected=int(fully_rejected.size),
    )
    layout = Layout(length=_dist(length), turns=_dist(rows["turns"]), observation_spans=_dist(rows["observation_spans"]),
                    rows_ending_in_observation=int(rows["ends_in_observation"].astype(bool).sum()),
                    rows_with_padding=int((padding > 0).sum()))
    checks.items.sort(key=lambda c: c.step)  # stable: the order above within a step
    uids = {g: uid for (_, uid), g in labels.groups.items()}
    flags = checklist_flags(est, kl_coef, kl_penalty, columns, labels.batch_key,
                            ds.filter.where if ds.filter is not None else None)
    verdict, (group_table, row_table) = checklist_verdict(
        rows, plan, est, uids, group_flags, checks.items, ds.paths, steps, flags, std_epsilon(est, *std_rule),
        thresholds, (labels.batch_key, labels.batch_values()) if labels.batch_key is not None else None)
    return Inspection(
        verdict=verdict,
        rows=ds.num_rows,
        tokens=TokenCounts(total=total_tokens, actor=actor_tokens, observation=total_tokens - actor_tokens - pad_tokens,
                           padding=pad_tokens, rejected=rejected_tokens, used=used_tokens),
        groups=groups, columns={f.name: str(f.type) for f in ds.schema}, checks=checks.items, paths=list(ds.paths), skipped=list(ds.skipped),
        filter=row_filter(ds),
        estimator=name, invalid_rows=len(bad_rows), layout=layout, scores=scores,
        masks=masks, kl=kl, advantages=adv, dead_signal=dead,
        distributions=RowDistributions(
            length=histogram(length, integer=True), actor_tokens=histogram(actor, integer=True),
            turns=histogram(rows["turns"], integer=True),
            score_total=histogram(rows["score_total"]) if scored else None,
            reward_total=histogram(rows["reward_total"]) if scored and plan.basis != "score" else None,
        ),
    ).with_tables(group_table, row_table)


def _group_checks(checks: Checklist, plan: Plan, est: Optional[Estimator], rows: RowScalars, labels: Labels,
                  sessions: set, expected_n: Optional[int], steps: list[str],
                  std_rule: tuple[float, bool]) -> tuple[Groups, dict[str, np.ndarray]]:
    """Steps 4-5: group sizes, singletons, uid merges, all-equal groups and the group hazards; per-group flags
    for the dead signal and the verdict."""
    gid, drow = rows["group_id"].astype(np.int64), rows["drow"].astype(np.int64)
    G = len(labels.groups)
    size = np.bincount(gid, minlength=G)
    first = np.full(G, np.iinfo(np.int64).max)
    np.minimum.at(first, gid, drow)
    present = size > 0  # groups whose rows were all invalid have no valid member
    uses_groups = est is None or est.groups

    session_sizes = None
    size_for_n = size
    if plan.session:
        per_group = np.bincount(np.array([g for g, _ in sessions], dtype=np.int64), minlength=G)
        session_sizes = {str(k): int(v) for k, v in sorted(Counter(per_group[present].tolist()).items())}
        if est is not None and est.folds_sessions:
            size_for_n = per_group
    group_batch = np.zeros(G, dtype=np.int64)
    group_batch[gid] = rows["batch_id"].astype(np.int64)
    reference = np.full(G, expected_n if expected_n is not None else 0)
    batches_off = 0
    for b in np.unique(group_batch[present]):  # each batch's most common size (ties: the larger), or --expected-n
        in_b = present & (group_batch == b)
        here = Counter(size_for_n[in_b].tolist())
        if expected_n is None:
            reference[in_b] = max(here, key=lambda s: (here[s], s))
        batches_off += bool((size_for_n[in_b] != reference[in_b]).any())
    mismatch = present & (size_for_n != reference)
    unit = "sessions" if size_for_n is not size else "rows"
    off = int(mismatch.sum())
    common = int(reference[present][0]) if present.any() and np.unique(reference[present]).size == 1 else None
    # count: batches whose groups differ in size, as rladv compute's report counts (one batch without
    # --batch-key); the rows are the first rows of the groups off the reference size
    checks.add("group_size_mismatch", batches_off, np.sort(first[mismatch]), off=off, groups=int(present.sum()),
               batches=batches_off, size=group_size_words(common, unit, expected_n),
               sizes=Counter(size_for_n[present].tolist()), unit=unit, expected=expected_n is not None,
               folding=plan.session)
    view = hazards.GroupView(gid=gid, size=size, first=first, present=present, uses_groups=uses_groups)
    hazards.batch_multiple(checks, rows, view, steps)
    hazards.prompts_per_uid(checks, plan, rows, view)
    if labels.batch_key is None:  # the steps are the files
        hazards.files_per_uid(checks, rows, view, len(steps))
    single = present & (size == 1)
    checks.add("singleton_group", int(single.sum()), np.sort(first[single]), groups=int(single.sum()), est=est)
    uids = [u for (_, u) in labels.groups]
    merges = uid_merges(uids)
    merged_gids = [i for (_, u), i in labels.groups.items() if present[i] and any(u in m for m in merges)]
    checks.add("uid_merge_grpo_vectorized", len(merges), np.sort(first[merged_gids]) if merged_gids else [],
               merges=merges)
    if plan.session:
        uid_of = {g: u for (_, u), g in labels.groups.items()}
        joined = labels.session_key_collisions(sessions)
        joined_gids = sorted({g for pairs in joined for g, _ in pairs})
        checks.add("session_key_collision", len(joined), np.sort(first[joined_gids]) if joined_gids else [],
                   collisions=joined, uids=uid_of)

    flags: dict[str, np.ndarray] = {"singleton": single}
    all_equal_scores = 0
    all_equal = np.zeros(G, dtype=bool)
    if plan.score is not None:
        def equal(total: np.ndarray) -> np.ndarray:
            lo, hi = group_min_max(total, gid, G)
            return (size > 1) & (lo == hi)

        eq_scores = equal(rows["score_total"])
        all_equal = equal(rows["reward_total"]) if plan.basis != "score" else eq_scores
        all_equal_scores = int(eq_scores.sum())
        multi, tied = int((present & (size > 1)).sum()), int(all_equal.sum())
        lo = group_min_max(rows["reward_total"], gid, G)[0]
        top = float(rows["reward_total"].max()) if tied else 0.0
        checks.add("all_equal_group", tied, np.sort(first[all_equal]), groups=tied, basis=plan.basis,
                   before_shaping=None if plan.basis == "score" else all_equal_scores, multi=multi,
                   all_zero=int((all_equal & (lo == 0)).sum()), all_top=int((all_equal & (lo == top) & (top > 0)).sum()))
        if plan.tools:
            differ = all_equal & ~equal(rows["tool_reward_sum"])
            checks.add("tool_rewards_not_in_score", int(differ.sum()), np.sort(first[differ]), groups=int(differ.sum()),
                       basis=plan.basis)
        epsilon, norm = std_rule
        hazards.epsilon_std(checks, rows, view, std_epsilon(est, epsilon, norm), epsilon)
        hazards.kl_only(checks, plan, rows, view, eq_scores, all_equal)
        flags["score_equal"] = eq_scores
    flags["all_equal_group"] = all_equal
    groups = Groups(
        count=int(present.sum()), sizes={str(k): int(v) for k, v in sorted(Counter(size[present].tolist()).items())},
        singletons=int(single.sum()), all_equal=int(all_equal.sum()), expected_n=expected_n,
        all_equal_scores=all_equal_scores, size_mismatch=off, basis=plan.basis, session_sizes=session_sizes,
    )
    flags["group_id"] = gid
    return groups, flags


def _advantage_summary(checks: Checklist, plan: Plan, rows: RowScalars,
                       group_flags: dict[str, np.ndarray]) -> tuple[Advantages, DeadSignal]:
    """Step 6: advantages over response_mask 1 tokens; non-zero values off the mask; the dead signal by cause."""
    count, total, m2 = rows["adv_count"], rows["adv_sum"], rows["adv_m2"]
    n = int(count.sum())
    masked_nz = rows["adv_masked_nonzero"]
    fl = rows["drow"][masked_nz > 0]
    checks.add("advantage_on_masked_position", fl.size, fl, n=fl.size, tokens=int(masked_nz.sum()))
    off_mask = dict(masked_nonzero_tokens=int(masked_nz.sum()), masked_nonzero_rows=int(fl.size))
    if n == 0:
        adv = Advantages(count=0, mean=None, std=None, min=None, max=None, **off_mask)
    else:
        mean = math.fsum(total) / n
        with np.errstate(invalid="ignore", divide="ignore"):
            row_mean = np.where(count > 0, total / np.maximum(count, 1), 0.0)
        M2 = math.fsum(m2) + math.fsum(count * (row_mean - mean) ** 2)
        pos, neg = int(rows["adv_positive"].sum()), int(rows["adv_negative"].sum())
        adv = Advantages(
            count=n, mean=mean, std=math.sqrt(M2 / (n - 1)) if n > 1 else 0.0,
            min=float(rows["adv_min"][count > 0].min()), max=float(rows["adv_max"][count > 0].max()),
            fraction_positive=pos / n, fraction_negative=neg / n, fraction_zero=(n - pos - neg) / n, **off_mask,
        )
    base, live = rows["actor"], rows["adv_zero"]
    by = dict.fromkeys(CAUSES, 0)
    by["rejected"] = int(rows["dead_rejected"].sum())
    if group_flags:
        gid = group_flags["group_id"]
        eq = group_flags["all_equal_group"][gid]
        single = group_flags["singleton"][gid] & ~eq
        by["all_equal_group"] = int(live[eq].sum())
        by["singleton"] = int(live[single].sum())
        by["other"] = int(live[~eq & ~single].sum())
    else:
        by["other"] = int(live.sum())
    n_base = int(base.sum())
    zero = sum(by.values())
    share = (lambda k: k / n_base if n_base else 0.0)
    dead = DeadSignal(base="loss_mask" if plan.loss else "response_mask", actor_tokens=n_base, zero_tokens=zero,
                      share=share(zero), by_cause={k: Cause(tokens=v, share=share(v)) for k, v in by.items()})
    return adv, dead


