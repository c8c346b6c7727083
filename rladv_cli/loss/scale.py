"""The per-row scale ``c_i`` of each loss aggregation rule (``modes.LossMode.rule``), from per-row facts.

Every rule is a pure function of numpy arrays ``(B,)`` in dataset order: ``c_i`` in float32, so that
``token_weight = A_t · ρ_t · m_t · c_i`` (docs/weights.md), computed in the order of the trainer's backward pass
where it matters for rounding, and the terms ``c_i`` was made of (for ``rladv explain`` and the report).
Mini-batches are ``--mini-batch-size`` consecutive rows of a step in dataset order (default: the whole step),
micro-batches ``--micro-batch-size`` consecutive rows of a mini-batch (default: one per mini-batch).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from ..config.flags import named
from ..errors import ComputeError
from .modes import LossMode

F32 = np.float32


@dataclass(frozen=True)
class RowFacts:
    """What the rules read, per row ``(B,)``: ``step`` dense step id; ``loss_tokens`` actor tokens before rollout
    rejection (``loss_mask``); ``tokens`` after it (``response_mask``); ``width`` response positions without
    padding; ``prompt`` dense group id (None without groups); ``step_names`` and ``locate`` (dataset row ->
    "file: row N") for messages."""

    step: np.ndarray
    loss_tokens: np.ndarray
    tokens: np.ndarray
    width: np.ndarray
    prompt: Optional[np.ndarray] = None
    step_names: tuple[str, ...] = ()
    locate: Callable[[int], str] = lambda row: f"row {row}"


@dataclass(frozen=True)
class Settings:
    """The knobs: ``mini`` rows per mini-batch (None: the step), ``micro`` rows per micro-batch (None: the
    mini-batch), ``factor`` (``--loss-scale-factor``), ``epsilon_high`` (TRL's, default its epsilon 0.2)."""

    mini: Optional[int] = None
    micro: Optional[int] = None
    factor: Optional[float] = None
    epsilon_high: Optional[float] = None


@dataclass(frozen=True)
class Split:
    """Each row's ``mini`` and ``micro`` batch (dense ids in dataset order), the rows of each (``mini_rows``,
    ``micro_rows``, per id), and per row the micro-batches of its mini-batch (``accumulation``, TRL's
    gradient_accumulation_steps) and of its step (``per_step``, TRL's steps_per_generation)."""

    mini: np.ndarray
    micro: np.ndarray
    mini_rows: np.ndarray
    micro_rows: np.ndarray
    accumulation: np.ndarray
    per_step: np.ndarray
    step_rows: np.ndarray  # (B,) rows of the row's step


def split(facts: RowFacts, settings: Settings) -> Split:
    """Cut every step into mini-batches of ``settings.mini`` rows and those into micro-batches of ``settings.micro``
    rows, in dataset order; a step whose rows do not divide evenly stops the run (the trainers assert it)."""
    step = facts.step.astype(np.int64)
    n_steps = int(step.max()) + 1 if step.size else 0
    counts = np.bincount(step, minlength=n_steps)
    order = np.argsort(step, kind="stable")
    ordinal = np.empty_like(step)
    ordinal[order] = np.arange(step.size) - np.repeat(np.cumsum(counts) - counts, counts)
    mini_size = np.full(n_steps, settings.mini) if settings.mini is not None else counts
    for s in range(n_steps):
        _check_divides(int(counts[s]), int(mini_size[s]), "mini_batch_size", "rows", facts, s)
        if settings.micro is not None:
            _check_divides(int(mini_size[s]), settings.micro, "micro_batch_size", "rows of a mini-batch", facts, s)
    micro_size = np.full(n_steps, settings.micro) if settings.micro is not None else mini_size
    size_of_row, micro_of_row = mini_size[step], micro_size[step]
    mini = _dense(step, ordinal // np.maximum(size_of_row, 1))
    micro = _dense(step, ordinal // np.maximum(micro_of_row, 1))
    accumulation = size_of_row // np.maximum(micro_of_row, 1)
    return Split(mini=mini, micro=micro, mini_rows=np.bincount(mini), micro_rows=np.bincount(micro),
                 accumulation=accumulation, per_step=counts[step] // np.maximum(micro_of_row, 1),
                 step_rows=counts[step])


def _check_divides(total: int, size: int, setting: str, what: str, facts: RowFacts, s: int) -> None:
    if size > 0 and total % size:
        name = facts.step_names[s] if s < len(facts.step_names) and facts.step_names[s] else ""
        where = f"the batch {name}" if name else "the dataset"
        raise ComputeError(f"{named(setting, size)}: {where} has {total} {what}, not a multiple of {size} (the "
                           "trainer cuts each step into equal batches in dataset order)")


def _dense(step: np.ndarray, index: np.ndarray) -> np.ndarray:
    """Dense ids of ``(step, index)`` pairs in order of first appearance."""
    key = step * (int(index.max()) + 1 if index.size else 1) + index
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    rank = np.empty(first.size, dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(first.size)
    return rank[inverse.reshape(-1)]


def _sum(values: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Per-row sum of ``values`` over the rows sharing the row's id."""
    return np.bincount(ids, weights=values.astype(np.float64))[ids] if ids.size else np.zeros(0)


def _max(values: np.ndarray, ids: np.ndarray) -> np.ndarray:
    out = np.zeros(int(ids.max()) + 1 if ids.size else 0)
    np.maximum.at(out, ids, values.astype(np.float64))
    return out[ids]


def _inv(x) -> np.ndarray:
    """``1 / x`` in float32, 0 where ``x`` is 0 (a mini-batch without tokens has no loss to weigh)."""
    x = np.asarray(x, dtype=F32)
    with np.errstate(divide="ignore"):
        return np.where(x != 0, F32(1) / x, F32(0)).astype(F32)


Terms = dict[str, np.ndarray]
Rule = Callable[[RowFacts, Split, Settings, LossMode], tuple[np.ndarray, Terms]]


def _configured_rows(sp: Split, st: Settings) -> np.ndarray:
    """G: the rows a mini-batch is configured to hold (``--mini-batch-size``, else the step's rows)."""
    return np.full(sp.mini.size, st.mini, dtype=np.int64) if st.mini is not None else sp.step_rows


def _width(f: RowFacts, sp: Split, st: Settings, mode: LossMode) -> tuple[np.ndarray, str]:
    """F: ``--loss-scale-factor``, the mode's default, or (verl) the micro-batch's padded width."""
    if st.factor is not None:
        return np.full(sp.mini.size, st.factor, dtype=np.float64), "F (--loss-scale-factor)"
    if mode.factor_default is not None:
        return np.full(sp.mini.size, mode.factor_default, dtype=np.float64), f"F ({mode.factor} default)"
    return _max(f.width, sp.micro), "F (the micro-batch's padded width)"


def verl_token_mean(f, sp, st, mode):
    t0 = _sum(f.loss_tokens, sp.mini)
    return _inv(t0), {"T0 (loss_mask tokens of the mini-batch)": t0}


def verl_token_sum(f, sp, st, mode):
    return np.ones(f.step.size, dtype=F32), {}


def verl_seq_mean_token_sum(f, sp, st, mode):
    g = _configured_rows(sp, st)
    return _inv(g), {"G (rows per mini-batch)": g}


def verl_seq_mean_token_sum_norm(f, sp, st, mode):
    g = _configured_rows(sp, st)
    width, name = _width(f, sp, st, mode)
    return (_inv(width) / g.astype(F32)).astype(F32), {"G (rows per mini-batch)": g, name: width}


def verl_seq_mean_token_mean(f, sp, st, mode):
    g = _configured_rows(sp, st)
    u = f.tokens.astype(F32) + F32(1e-8)
    return (_inv(g) / u).astype(F32), {"G (rows per mini-batch)": g, "u (the row's tokens)": f.tokens}


def _trl_common(sp: Split) -> Terms:
    return {"GA (micro-batches per mini-batch)": sp.accumulation}


def trl_dapo(f, sp, st, mode, gate: float = 1.0):
    step_tokens = np.maximum(_sum(f.tokens, f.step.astype(np.int64)), 1)
    normalizer = step_tokens.astype(F32) * sp.accumulation.astype(F32) / sp.per_step.astype(F32)
    terms = {"T (actor tokens of the step)": step_tokens, **_trl_common(sp),
             "S (micro-batches per step)": sp.per_step}
    return (F32(gate) * _inv(normalizer)).astype(F32), terms


def trl_cispo(f, sp, st, mode):
    eps_high = 0.2 if st.epsilon_high is None else st.epsilon_high
    c, terms = trl_dapo(f, sp, st, mode, gate=min(1.0, eps_high))
    return c, {**terms, "min(1, epsilon_high)": np.full(f.step.size, min(1.0, eps_high))}


def trl_grpo(f, sp, st, mode):
    b = sp.micro_rows[sp.micro]
    c = _inv(sp.accumulation) / b.astype(F32) / np.maximum(f.tokens, 1).astype(F32)
    return c.astype(F32), {**_trl_common(sp), "B (rows of the micro-batch)": b, "u (the row's tokens)": f.tokens}


def trl_bnpo(f, sp, st, mode):
    t = np.maximum(_sum(f.tokens, sp.micro), 1)
    return (_inv(sp.accumulation) / t.astype(F32)).astype(F32), {**_trl_common(sp),
                                                                 "T (actor tokens of the micro-batch)": t}


def trl_dr_grpo(f, sp, st, mode):
    b = sp.micro_rows[sp.micro]
    width, name = _width(f, sp, st, mode)
    c = _inv(sp.accumulation) / (b * width).astype(F32)
    return c.astype(F32), {**_trl_common(sp), "B (rows of the micro-batch)": b, name: width}


def trl_luspo(f, sp, st, mode):
    b = sp.micro_rows[sp.micro]
    return (_inv(sp.accumulation) / b.astype(F32)).astype(F32), {**_trl_common(sp), "B (rows of the micro-batch)": b}


def openrlhf_token_mean(f, sp, st, mode):
    t = _sum(f.tokens, sp.mini)
    gas = sp.accumulation.astype(F32)
    # batch_num_tokens = T / gas, DeepSpeed's 1 / gas on the loss: the two cancel up to rounding
    c = np.where(t > 0, _inv(gas) / (t.astype(F32) / gas), F32(0))
    return c.astype(F32), {"T (actor tokens of the mini-batch)": t}


def openrlhf_seq_mean_token_mean(f, sp, st, mode):
    s = _sum((f.tokens > 0).astype(np.float64), sp.mini)
    gas = sp.accumulation.astype(F32)
    outer = np.where(s > 0, _inv(gas) / (s.astype(F32) / gas), F32(0))
    c = outer / (f.tokens.astype(F32) + F32(1e-8))
    return c.astype(F32), {"S (rows with actor tokens in the mini-batch)": s, "u (the row's tokens)": f.tokens}


def nemo_token_level(f, sp, st, mode):
    t = _sum(f.tokens, sp.mini)
    return (F32(1) / (t.astype(F32) + F32(1e-8))).astype(F32), {"T (actor tokens of the mini-batch)": t}


def nemo_sequence_level(f, sp, st, mode):
    g = sp.mini_rows[sp.mini]
    outer = F32(1) / (g.astype(F32) + F32(1e-8))
    c = outer / (f.tokens.astype(F32) + F32(1e-8))
    return c.astype(F32), {"G (rows of the mini-batch)": g, "u (the row's tokens)": f.tokens}


def skyrl_token_mean(f, sp, st, mode):
    t = np.maximum(_sum(f.tokens, sp.mini), 1)
    return _inv(t), {"T (actor tokens of the mini-batch)": t}


def skyrl_token_mean_legacy(f, sp, st, mode):
    t = np.maximum(_sum(f.tokens, sp.micro), 1)
    return (_inv(t) / sp.accumulation.astype(F32)).astype(F32), {"T (actor tokens of the micro-batch)": t,
                                                                 "n (micro-batches per mini-batch)": sp.accumulation}


def skyrl_sequence_mean(f, sp, st, mode):
    g = sp.mini_rows[sp.mini]
    c = F32(1) / (g * np.maximum(f.tokens, 1)).astype(F32)
    return c.astype(F32), {"G (rows of the mini-batch)": g, "u (the row's tokens)": f.tokens}


def skyrl_seq_mean_token_sum_norm(f, sp, st, mode):
    g = sp.mini_rows[sp.mini]
    width, name = _width(f, sp, st, mode)
    return _inv(g * width), {"G (rows of the mini-batch)": g, name: width}


def skyrl_prompt_mean(f, sp, st, mode):
    """SkyRL's prompt boundaries are runs of one uid in the step's order (it asserts each uid is one run); a
    mini-batch counts the prompts that start in it, over its own rows only, so the rows of a prompt that started
    in an earlier mini-batch weigh 0."""
    if f.prompt is None:
        raise ComputeError(f"{named('loss_agg_mode', 'prompt_mean')}: SkyRL's prompt boundaries are runs of one "
                           "uid; the dataset has no uid column")
    step, prompt = f.step.astype(np.int64), f.prompt.astype(np.int64)
    starts = np.ones(step.size, dtype=bool)
    starts[1:] = (prompt[1:] != prompt[:-1]) | (step[1:] != step[:-1])
    run = np.cumsum(starts) - 1
    seen: set[int] = set()
    for row in np.flatnonzero(starts).tolist():
        if int(prompt[row]) in seen:
            raise ComputeError(f"{named('loss_agg_mode', 'prompt_mean')}: {f.locate(row)}: its uid appears again "
                               "after other uids; SkyRL requires each prompt's samples to be consecutive rows")
        seen.add(int(prompt[row]))
    first_row = np.flatnonzero(starts)[run]
    covered = sp.mini[first_row] == sp.mini
    piece = _dense(sp.mini, run)  # a prompt's rows inside one mini-batch
    t_p = np.maximum(_sum(np.where(covered, f.tokens, 0), piece), 1)
    p = _sum((starts & covered).astype(np.float64), sp.mini)
    c = np.where(covered, _inv(p * t_p), F32(0))  # p is 0 only in a mini-batch no prompt starts in
    return c.astype(F32), {"P (prompts starting in the mini-batch)": p, "T_p (the prompt's tokens in it)": t_p}


RULES: dict[str, Rule] = {fn.__name__: fn for fn in (
    verl_token_mean, verl_token_sum, verl_seq_mean_token_sum, verl_seq_mean_token_sum_norm, verl_seq_mean_token_mean,
    trl_dapo, trl_cispo, trl_grpo, trl_bnpo, trl_dr_grpo, trl_luspo, openrlhf_token_mean, openrlhf_seq_mean_token_mean,
    nemo_token_level, nemo_sequence_level, skyrl_token_mean, skyrl_token_mean_legacy, skyrl_sequence_mean,
    skyrl_seq_mean_token_sum_norm, skyrl_prompt_mean)}


@dataclass(frozen=True)
class Weighing:
    """A run's weighing: the ``mode``, each row's ``scale`` ``c_i (B,)`` float32, the mini- and micro-batches
    (``split``) and the ``terms`` ``c_i`` was made of (name -> ``(B,)``)."""

    mode: LossMode
    settings: Settings
    scale: np.ndarray
    split: Split
    terms: Terms


def weigh(mode: LossMode, facts: RowFacts, settings: Settings) -> Weighing:
    """``c_i`` of every row under ``mode``, with the batches and terms it was made of."""
    if mode.factor_required and settings.factor is None:
        raise ComputeError(f"{named('loss_agg_mode', mode.name)} needs {named('loss_scale_factor')} (the "
                           f"trainer's {mode.factor}, which it requires)")
    sp = split(facts, settings)
    c, terms = RULES[mode.rule](facts, sp, settings, mode)
    return Weighing(mode, settings, np.asarray(c, dtype=F32), sp, terms)
