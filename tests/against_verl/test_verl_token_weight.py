"""Optional: rladv's ``token_weight`` against the gradient of verl 0.9.1's own actor loss, by autograd.

``token_weight_t`` is ``-dL/d log pi(a_t)`` at the old policy (ratio 1), ``L`` the loss verl's optimizer step
minimises for the mini-batch holding the row (docs/weights.md). Here ``L`` is verl's: on random ragged batches
(uid groups, tool-observation spans of mask 0, rows without actor tokens, ``attention_mask`` padding suffixes and
empty responses, one or two ``--batch-key`` steps with interleaved rows, random mini/micro sizes that divide the
steps), rladv runs with ``--loss-agg-mode`` (each of verl's 5 modes, ``--loss-scale-factor`` or not), with and
without rollout rejection (``token_k1``, a threshold that rejects tokens; also ``token_k1,seq_mean_k1``, which
rejects whole rows) and rollout IS weights (``token``, also ``sequence``). Then verl's own loss code runs with
torch autograd on a leaf ``log_prob = old_log_probs.clone().requires_grad_()``, as the v1 engine runs it:

- the step becomes a ``TensorDict`` of jagged nested tensors, as verl 0.9.1's V1 trainer holds it (TransferQueue:
  ``response_to_nested``; the agent loop's ``loss_mask`` is the response mask before rollout rejection):
  ``prompts``, ``responses``, ``input_ids`` (prompt + response, padding excluded), ``response_mask`` (rladv's
  output, after rejection), ``loss_mask`` (rladv's, before), ``old_log_probs``, ``advantages`` (rladv's) and
  ``rollout_is_weights`` (rladv's: the IS computation is tested in ``test_verl_pipeline_differential.py``);
- ``engine_workers.train_mini_batch``'s path: ``global_batch_size`` = the configured rows per mini-batch,
  ``tensordict_utils.make_iterator`` (no shuffle) cuts the mini-batches; for each,
  ``FSDPEngine.forward_backward_batch``'s ``batch_num_tokens = data["loss_mask"].sum()``, ``dp_size = 1``, and
  ``engine.utils.prepare_micro_batches`` (``use_dynamic_bsz`` off, ``micro_batch_size_per_gpu``);
- for every micro-batch, ``losses.ppo_loss`` itself (``partial(ppo_loss, config=actor_config)``, the worker's loss
  function) with a model output as the engine's ``forward_step`` hands it: ``log_probs`` a jagged nested tensor
  over prompt + response whose response slice (``no_padding_2_padding``: shifted by one) is the leaf; ppo_loss
  sets ``config.global_batch_info``, pads with ``to_padded_tensor()`` to the micro-batch's longest response, and
  calls ``compute_policy_loss_vanilla`` -> ``agg_loss``; each micro-batch loss is backwarded (accumulation).

Compared: ``-log_prob.grad`` against rladv's ``token_weight`` on the positions rladv's ``response_mask`` keeps
(rtol 1e-5, atol 1e-6 x the largest weight of the case); elsewhere ``token_weight`` is exactly 0 (and so is the
gradient). The ``ActorConfig`` is verl's own dataclass (``strategy="fsdp"``, ``rollout_n=1``; clip ratios,
``policy_loss.loss_mode="vanilla"`` and the rest at verl's defaults), as the worker builds it from the YAML.

Runs only where verl is importable (``python -m pytest -m verl``); the default test run skips it.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np
import pyarrow as pa
import pytest

import rladv_cli

pytestmark = pytest.mark.verl
core_algos = pytest.importorskip("verl.trainer.ppo.core_algos")
losses = pytest.importorskip("verl.workers.utils.losses")
with warnings.catch_warnings():  # the engine package warns about every optional backend it cannot import
    warnings.simplefilter("ignore")
    engine_utils = pytest.importorskip("verl.workers.engine.utils")
import torch  # noqa: E402
from tensordict import TensorDict  # noqa: E402
from verl.utils import tensordict_utils as tu  # noqa: E402
from verl.workers.config import ActorConfig  # noqa: E402

MODES = ("token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")
# rollout correction: rejection (token level; token + whole rows), IS weights, both
CORRECTIONS = ("none", "rs", "rs_rows", "is", "rs+is")
SEEDS = range(6)


# ------------------------------------------------------------------------------------------------ the data

@dataclass
class Case:
    """One drawn dataset, rladv's settings, and what verl's side needs besides rladv's output."""

    table: pa.Table
    options: dict[str, Any]       # rladv_cli.compute settings besides estimator and device
    steps: list[list[int]]        # the rows of each training step, in dataset order
    widths: list[int]             # each row's response positions without padding (the nested length in verl)
    prompts: list[int]            # each row's prompt length (verl asserts > 0)
    mini: list[int]               # configured rows per mini-batch of each step (G)
    micro: list[int]              # rows per micro-batch of each step
    forced_rejection: bool = False  # an actor token was drawn far from its rollout log-prob


def draw_case(seed: int, mode: str, correction: str) -> Case:
    rng = np.random.default_rng([seed, MODES.index(mode), CORRECTIONS.index(correction)])
    n_steps = 2 if rng.random() < 0.3 else 1
    padded = rng.random() < 0.5
    max_len = int(rng.choice([5, 12, 30]))
    micro = int(rng.integers(1, 4))
    per_mini = int(rng.integers(1, 4))            # micro-batches per mini-batch
    mini = micro * per_mini
    give_mini = rng.random() < 0.75               # else a mini-batch is the whole step (G = the step's rows)
    give_micro = rng.random() < 0.8               # else one micro-batch per mini-batch
    unit = mini if give_mini else (micro if give_micro else 1)  # the steps' rows: whole mini-batches, 6 rows or more
    rows_of_step = [unit * max(int(rng.integers(1, 5)), -(-6 // unit)) for _ in range(n_steps)]
    step_of_row = rng.permutation(np.repeat(np.arange(n_steps), rows_of_step))  # interleaved steps
    B = len(step_of_row)

    cols: dict[str, list] = {k: [] for k in ("uid", "response_mask", "attention_mask", "score", "old_log_probs",
                                             "rollout_log_probs", "step")}
    widths = []
    forced = False
    group_of_row = rng.integers(0, max(B // 3, 1), B)  # uid groups: random sizes, singletons too
    for i in range(B):
        L = int(rng.integers(1, max_len + 1))
        n = L
        if padded and rng.random() < 0.4:
            n = int(rng.integers(0 if rng.random() < 0.1 else 1, L + 1))  # 0: an empty response
        m = np.zeros(L, dtype=np.int8)
        m[:n] = 1
        for _ in range(int(rng.integers(0, 3)) if n >= 4 else 0):  # tool-observation spans inside the response
            a = int(rng.integers(0, n))
            m[a:min(a + int(rng.integers(1, n // 2 + 1)), n)] = 0
        if rng.random() < 0.15:  # ends in a tool observation
            m[max(n - int(rng.integers(1, 3)), 0):n] = 0
        if rng.random() < 0.06:
            m[:] = 0  # no actor token at all
        old = np.minimum(rng.normal(-1.0, 0.6, L), -1e-3).astype(np.float32)
        cols["uid"].append(f"p{int(group_of_row[i])}")
        cols["response_mask"].append(m.tolist())
        cols["attention_mask"].append([1] * n + [0] * (L - n))
        cols["score"].append(float(rng.normal(0.3, 1.0)))
        cols["old_log_probs"].append(old.tolist())
        cols["rollout_log_probs"].append((old + rng.normal(0, 0.12, L)).astype(np.float32).tolist())
        cols["step"].append(int(step_of_row[i]) + 3)
        widths.append(n)

    steps = [[i for i in range(B) if step_of_row[i] == s] for s in range(n_steps)]
    for rows in steps:  # verl's rollout correction refuses a batch without actor tokens (so does rladv)
        if not any(any(cols["response_mask"][i]) for i in rows):
            i = rows[0]
            cols["response_mask"][i][0] = cols["attention_mask"][i][0] = 1
            widths[i] = max(widths[i], 1)
        if correction.startswith("rs") and sum(sum(cols["response_mask"][i]) for i in rows) >= 3:
            # one actor token of the step far from its rollout log-prob: rejected (leaving the others, as verl's IS
            # and rejection metrics refuse a batch without any weight or token left)
            forced = True
            i = next(i for i in rows if any(cols["response_mask"][i]))
            j = cols["response_mask"][i].index(1)
            cols["rollout_log_probs"][i][j] = cols["old_log_probs"][i][j] + 1.0
    table = {
        "uid": pa.array(cols["uid"], pa.string()),
        "response_mask": pa.array(cols["response_mask"], pa.list_(pa.int8())),
        "score": pa.array(cols["score"], pa.float64()),
        "old_log_probs": pa.array(cols["old_log_probs"], pa.list_(pa.float32())),
        "step": pa.array(cols["step"], pa.int64()),
    }
    if padded:
        table["attention_mask"] = pa.array(cols["attention_mask"], pa.list_(pa.int8()))
    options: dict[str, Any] = {"loss_agg_mode": mode}
    if n_steps > 1:
        options["batch_key"] = "step"
    if give_mini:
        options["mini_batch_size"] = mini
    if give_micro:
        options["micro_batch_size"] = micro
    if mode == "seq-mean-token-sum-norm" and rng.random() < 0.5:
        options["loss_scale_factor"] = float(rng.choice([1.0, 3.0, 7.5, 64.0]))
    if correction != "none":
        table["rollout_log_probs"] = pa.array(cols["rollout_log_probs"], pa.list_(pa.float32()))
    if correction.startswith("rs"):
        hi = rng.uniform(1.1, 1.3)  # |old - rollout| ~ 0.12: rejects 3% to 45% of the tokens
        k1 = f"{hi:.3f}" if rng.random() < 0.5 else f"{rng.uniform(1 / hi, 0.97):.3f}_{hi:.3f}"
        if correction == "rs_rows":
            options["rollout_rs"], options["rollout_rs_threshold"] = "token_k1,seq_mean_k1", f"{k1},1.15"
        else:
            options["rollout_rs"], options["rollout_rs_threshold"] = "token_k1", k1
    if correction.endswith("is"):
        options["rollout_is"] = "token" if correction == "is" or rng.random() < 0.6 else "sequence"
        options["rollout_is_threshold"] = str(rng.choice(["2.0", "1.3", "0.8_1.5"]))

    return Case(table=pa.table(table), options=options, steps=steps, widths=widths,
                prompts=rng.integers(1, 4, B).tolist(),
                mini=[mini if give_mini else len(rows) for rows in steps],
                micro=[micro if give_micro else (mini if give_mini else len(rows)) for rows in steps],
                forced_rejection=forced)


# ------------------------------------------------------------------------------------------------ verl's side

def nested(pieces: list[torch.Tensor]) -> torch.Tensor:
    return torch.nested.as_nested_tensor(pieces, layout=torch.jagged)


def verl_gradient(case: Case, out: pa.Table) -> tuple[list[np.ndarray], list[dict]]:
    """``-d L / d log_prob`` per row (over the table's positions), L verl's loss of every mini-batch of every step
    as the v1 engine computes and backwards it; and the ``global_batch_info`` of every micro-batch call."""
    lengths = [len(m) for m in case.table["response_mask"].to_pylist()]
    offsets = np.concatenate([[0], np.cumsum(lengths)]).tolist()
    old = torch.tensor(np.concatenate([np.asarray(r, np.float32) for r in case.table["old_log_probs"].to_pylist()]))
    log_prob = old.clone().requires_grad_()  # the leaf: the policy being trained, at the old policy

    def response(column: str, i: int, dtype) -> torch.Tensor:
        return torch.tensor(out[column][i].as_py()[:case.widths[i]], dtype=dtype)

    infos = []
    for rows, G, micro in zip(case.steps, case.mini, case.micro):
        td = TensorDict({
            "prompts": nested([torch.full((case.prompts[i],), 7, dtype=torch.int64) for i in rows]),
            "responses": nested([torch.full((case.widths[i],), 9, dtype=torch.int64) for i in rows]),
            "input_ids": nested([torch.full((case.prompts[i] + case.widths[i],), 9, dtype=torch.int64)
                                 for i in rows]),
            "response_mask": nested([response("response_mask", i, torch.int64) for i in rows]),
            "loss_mask": nested([response("loss_mask", i, torch.int64) for i in rows]),
            "old_log_probs": nested([old[offsets[i]:offsets[i] + case.widths[i]] for i in rows]),
            "advantages": nested([response("advantages", i, torch.float32) for i in rows]),
            "row": torch.tensor(rows),
        }, batch_size=[len(rows)])
        if "rollout_is_weights" in out.column_names:
            td["rollout_is_weights"] = nested([response("rollout_is_weights", i, torch.float32) for i in rows])
        # ray_trainer / trainer_base _update_actor: global_batch_size = ppo_mini_batch_size * rollout.n
        tu.assign_non_tensor(td, global_batch_size=G)
        config = ActorConfig(strategy="fsdp", rollout_n=1, ppo_mini_batch_size=G, ppo_micro_batch_size_per_gpu=micro,
                             loss_agg_mode=case.options["loss_agg_mode"],
                             loss_scale_factor=case.options.get("loss_scale_factor"))
        loss_fn = lambda **kw: losses.ppo_loss(config=config, **kw)  # noqa: E731 (engine_workers: partial)
        # engine_workers.train_mini_batch: mini-batches in dataset order (actor.shuffle false)
        for mini_td in tu.make_iterator(td, mini_batch_size=G, epochs=1, seed=42,
                                        dataloader_kwargs={"shuffle": False}):
            # FSDPEngine.forward_backward_batch
            batch_num_tokens = mini_td["loss_mask"].sum()
            tu.assign_non_tensor(mini_td, batch_num_tokens=batch_num_tokens.item(), dp_size=1,
                                 use_dynamic_bsz=False, micro_batch_size_per_gpu=micro)
            micro_batches, _ = engine_utils.prepare_micro_batches(data=mini_td, dp_group=None,
                                                                   same_micro_num_in_dp=True)
            assert len(micro_batches) == G // micro
            for mb in micro_batches:
                # the engine's forward_step: log_probs over prompt + response, shifted by one (the log-prob of
                # token t+1 sits at position t); no_padding_2_padding takes values[end - resp - 1 : end - 1]
                pieces = []
                for i in mb["row"].tolist():
                    pieces += [torch.zeros(case.prompts[i] - 1), log_prob[offsets[i]:offsets[i] + case.widths[i]],
                               torch.zeros(1)]
                values = torch.cat(pieces)
                seq_offsets = torch.tensor([0] + np.cumsum([case.prompts[i] + case.widths[i]
                                                            for i in mb["row"].tolist()]).tolist())
                model_output = {"log_probs": torch.nested.nested_tensor_from_jagged(values, offsets=seq_offsets)}
                loss, _ = loss_fn(model_output=model_output, data=mb, dp_group=None)
                infos.append(dict(config.global_batch_info, rows=mb["row"].tolist()))
                loss.backward()
    grad = log_prob.grad if log_prob.grad is not None else torch.zeros_like(log_prob)
    weights = (-grad).numpy()
    return [weights[offsets[i]:offsets[i + 1]] for i in range(len(lengths))], infos


# ------------------------------------------------------------------------------------------------ the comparison

def check(case: Case) -> tuple[pa.Table, list[dict]]:
    out, _ = rladv_cli.compute(case.table, estimator="grpo", device="cpu", **case.options)
    want, infos = verl_gradient(case, out)
    got = [np.asarray(w, dtype=np.float32) for w in out["token_weight"].to_pylist()]
    masks = [np.asarray(m) for m in out["response_mask"].to_pylist()]
    scale = max((float(np.abs(w).max()) for w in want if w.size), default=0.0)
    for i, (g, w, m) in enumerate(zip(got, want, masks)):
        assert g.shape == w.shape == m.shape, f"row {i}: shapes {g.shape} {w.shape} {m.shape}"
        off = m == 0
        assert np.all(g[off] == 0), f"row {i}: token_weight {g[off]} where response_mask is 0"
        assert np.all(w[off] == 0), f"row {i}: verl's gradient {w[off]} where response_mask is 0"
    on = np.concatenate([m for m in masks]) == 1
    flat_got, flat_want = np.concatenate(got)[on], np.concatenate(want)[on]
    rows = np.concatenate([np.full(len(m), i) for i, m in enumerate(masks)])[on]
    close = np.isclose(flat_got, flat_want, rtol=1e-5, atol=1e-6 * scale)
    if not close.all():
        bad = np.flatnonzero(~close)[:8]
        pytest.fail(f"{case.options}: token_weight differs from verl's -dL/dlogpi at {int((~close).sum())} of "
                    f"{close.size} tokens, e.g. rows {rows[bad].tolist()}: rladv {flat_got[bad].tolist()}, "
                    f"verl {flat_want[bad].tolist()}")
    return out, infos


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("correction", CORRECTIONS)
@pytest.mark.parametrize("mode", MODES)
def test_token_weight_is_verls_gradient(mode, correction, seed):
    case = draw_case(seed, mode, correction)
    out, infos = check(case)
    loss_mask = np.concatenate([np.asarray(m) for m in out["loss_mask"].to_pylist()])
    response_mask = np.concatenate([np.asarray(m) for m in out["response_mask"].to_pylist()])
    if case.forced_rejection:  # not vacuous: the rejection rejected tokens
        assert (loss_mask > response_mask).any(), case.options
    assert all(info["dp_size"] == 1 for info in infos)
    weights = np.concatenate([np.asarray(w) for w in out["token_weight"].to_pylist()])
    assert (weights != 0).sum() >= 3, "a vacuous case: fewer than 3 tokens with a weight"


# ------------------------------------------------------------------------------------------------ directed cases

def small_case(mode: str, masks: list[list[int]], *, mini: int, micro: int, attention: Optional[list[list[int]]] = None,
               factor: Optional[float] = None, rs: Optional[tuple[str, str]] = None) -> Case:
    rng = np.random.default_rng(5)
    B = len(masks)
    old = [np.minimum(rng.normal(-1, 0.6, len(m)), -1e-3).astype(np.float32).tolist() for m in masks]
    table = {"uid": ["a", "b"] * (B // 2) + ["a"] * (B % 2),
             "response_mask": pa.array(masks, pa.list_(pa.int8())),
             "score": [float(x) for x in rng.normal(0, 1, B)],
             "old_log_probs": pa.array(old, pa.list_(pa.float32()))}
    widths = [len(m) for m in masks]
    if attention is not None:
        table["attention_mask"] = pa.array(attention, pa.list_(pa.int8()))
        widths = [sum(a) for a in attention]
    options: dict[str, Any] = {"loss_agg_mode": mode, "mini_batch_size": mini, "micro_batch_size": micro}
    if factor is not None:
        options["loss_scale_factor"] = factor
    if rs is not None:
        table["rollout_log_probs"] = pa.array([(np.asarray(o) + np.where(np.arange(len(o)) % 2, 0.5, 0.0))
                                               .astype(np.float32).tolist() for o in old], pa.list_(pa.float32()))
        options["rollout_rs"], options["rollout_rs_threshold"] = rs
    return Case(table=pa.table(table), options=options, steps=[list(range(B))], widths=widths, prompts=[2] * B,
                mini=[mini], micro=[micro])


def test_norm_mode_divides_by_the_micro_batchs_own_padded_width():
    """seq-mean-token-sum-norm without a factor: ``loss_mask.shape[-1]`` after ``to_padded_tensor()`` is each
    micro-batch's longest response (attention_mask padding excluded), not the step's: here 2 and 5."""
    masks = [[1, 1, 0, 0, 0], [1, 0, 0, 0, 0], [1, 1, 1, 1, 1], [1, 0, 1, 0, 0]]
    attention = [[1, 1, 0, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 1, 1], [1, 1, 1, 1, 0]]
    case = small_case("seq-mean-token-sum-norm", masks, mini=4, micro=2, attention=attention)
    out, infos = check(case)
    assert [info["loss_scale_factor"] for info in infos] == [None, None]
    w = out["token_weight"].to_pylist()
    a = out["advantages"].to_pylist()
    assert w[0][0] == pytest.approx(a[0][0] / (4 * 2), rel=1e-6)
    assert w[2][0] == pytest.approx(a[2][0] / (4 * 5), rel=1e-6)


def test_token_mean_counts_rejected_tokens_in_the_denominator():
    """token-mean: ``batch_num_tokens`` is the mini-batch's ``loss_mask`` sum, taken before rollout rejection."""
    masks = [[1, 1, 1, 1], [1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1]]
    case = small_case("token-mean", masks, mini=2, micro=1, rs=("token_k1", "1.2"))
    out, infos = check(case)
    loss_mask = [sum(m) for m in out["loss_mask"].to_pylist()]
    kept = [sum(m) for m in out["response_mask"].to_pylist()]
    assert sum(kept) < sum(loss_mask)  # the rejection rejected tokens
    assert [info["batch_num_tokens"] for info in infos] == [7, 7, 6, 6]
    assert [info["global_batch_size"] for info in infos] == [2, 2, 2, 2]
