"""Optional: rladv's ``token_weight`` against the gradient of the trainers' own loss code (docs/weights.md).

For every ``--loss-agg-mode`` of TRL 1.16.0, OpenRLHF 0.11.2, NeMo-RL 0.6.0 (7ea279a) and SkyRL 0.3.0, on random
ragged batches (tool-observation spans of mask 0, rows without actor tokens, random mini-batch and micro-batch
sizes that divide evenly), the trainer's loss runs on a leaf ``logp`` equal to the old log-probs (ratio 1),
micro-batch by micro-batch of each mini-batch, with the normalisers its training loop computes, each micro-batch's
loss backpropagated as gradient accumulation does. ``-logp.grad`` must equal rladv's ``token_weight`` on the actor
tokens, and both are 0 on the others. The trainer is fed rladv's own ``advantages``: only the aggregation is under
test here (tests/against_peers/test_peers_differential.py tests the advantages).

The trainers' modules are loaded from their released source with stubs for their heavy imports (``peers.py``);
the methods that cannot be imported alone (TRL's ``GRPOTrainer._compute_loss``, SkyRL's
``RayPPOTrainer._normalize_advantages``) run as their own source on a fake ``self``. Skipped without the source:

    bash tests/data/fetch_peers.sh DIR
    RLADV_PEER_SRC=DIR .venv/bin/python -m pytest -n 0 -m peers tests/against_peers/test_peers_token_weight.py
"""
from __future__ import annotations

import ast
import math
import textwrap
import types
from collections import defaultdict
from dataclasses import dataclass
from typing import List, Optional, Tuple

import numpy as np
import pyarrow as pa
import pytest
import torch

import rladv_cli
from peers import SOURCE, code_between, function_source, load
from rladv_cli.loss.modes import AGGREGATIONS

pytestmark = pytest.mark.peers
SEEDS = range(16)
ATOL, RTOL = 1e-6, 1e-4  # ATOL relative to the largest weight of the batch
ns = types.SimpleNamespace


# ------------------------------------------------------------------ batches and rladv's weights
@dataclass
class Batch:
    """Random rows: ``table`` for rladv, and the trainer's padded tensors (rows, width): ``mask`` (actor tokens),
    ``present`` (response positions, padding 0), ``old`` (old log-probs); ``uids`` consecutive runs; ``mini``
    and ``micro`` rows per mini- and micro-batch (both divide evenly)."""

    table: pa.Table
    mask: torch.Tensor
    present: torch.Tensor
    old: torch.Tensor
    uids: list
    mini: int
    micro: int

    @property
    def rows(self) -> int:
        return self.mask.shape[0]

    def mini_batches(self):
        return [range(s, s + self.mini) for s in range(0, self.rows, self.mini)]

    def micro_batches(self, mini: range):
        return [slice(s, s + self.micro) for s in range(mini.start, mini.stop, self.micro)]


def divisor(rng, n: int) -> int:
    return int(rng.choice([d for d in range(1, n + 1) if n % d == 0]))


def make_batch(rng, group_size: Optional[int] = None, *, tokens_in_every_mini_batch: bool = False) -> Batch:
    """Groups of ``group_size`` consecutive rows (else uid runs of 1 to 5 rows); responses of 1 to 30 positions with
    up to 3 observation spans of mask 0; a tenth of the rows without actor tokens (``tokens_in_every_mini_batch``:
    but never a whole mini-batch); scores 0/1 or spread; mini- and micro-batch sizes random divisors."""
    if group_size is not None:
        rows = group_size * int(rng.integers(1, 9))
        uids = [f"p{i // group_size}" for i in range(rows)]
    else:
        rows = int(rng.integers(2, 33))
        uids, k = [], 0
        while len(uids) < rows:
            uids += [f"p{k}"] * int(rng.integers(1, 6))
            k += 1
        uids = uids[:rows]
    mini = divisor(rng, rows)
    micro = divisor(rng, mini)
    masks = []
    for _ in range(rows):
        L = int(rng.integers(1, 31))
        m = np.ones(L, dtype=np.int8)
        for _ in range(int(rng.integers(0, 4))):
            a = int(rng.integers(0, L))
            m[a:a + int(rng.integers(1, 6))] = 0
        if rng.random() < 0.1:
            m[:] = 0
        masks.append(m)
    if tokens_in_every_mini_batch:
        for s in range(0, rows, mini):
            if not any(m.any() for m in masks[s:s + mini]):
                masks[s][0] = 1
    score = np.where(rng.random(rows) < 0.5, rng.choice([0.0, 1.0], rows), rng.normal(0.5, 0.7, rows))
    table = pa.table({"uid": uids, "response_mask": pa.array([m.tolist() for m in masks], pa.list_(pa.int8())),
                      "score": pa.array(score.astype(np.float32))})
    width = max(len(m) for m in masks)
    mask, present = torch.zeros(rows, width), torch.zeros(rows, width)
    for i, m in enumerate(masks):
        mask[i, :len(m)] = torch.from_numpy(m.astype(np.float32))
        present[i, :len(m)] = 1
    old = torch.from_numpy(rng.normal(-1.0, 0.6, (rows, width)).astype(np.float32)).clamp(max=-1e-3) * present
    return Batch(table, mask, present, old, uids, mini, micro)


def padded(column: pa.ChunkedArray, width: int) -> torch.Tensor:
    rows = column.to_pylist()
    out = torch.zeros(len(rows), width)
    for i, r in enumerate(rows):
        out[i, :len(r)] = torch.tensor(r, dtype=torch.float32)
    return out


def rladv(batch: Batch, convention: str, estimator: str, mode: str, **knobs) -> Tuple[torch.Tensor, torch.Tensor]:
    """rladv's ``(advantages, token_weight)``, padded: the mini-batch size always given, the micro-batch size only
    where the mode reads it (rladv refuses it elsewhere: there the trainer's micro-batches must not matter)."""
    reads = AGGREGATIONS[convention].modes[mode].reads
    micro = batch.micro if "micro_batch_size" in reads else None
    out, _ = rladv_cli.compute(batch.table, convention=convention, estimator=estimator, loss_agg_mode=mode,
                               mini_batch_size=batch.mini, micro_batch_size=micro, device="cpu",
                               **{k: v for k, v in knobs.items() if v is not None})
    width = batch.mask.shape[1]
    return padded(out["advantages"], width), padded(out["token_weight"], width)


def assert_weights_match(token_weight: torch.Tensor, grad: torch.Tensor, batch: Batch, what: str) -> None:
    """``token_weight`` is ``-grad`` on the actor tokens (atol relative to the largest weight), and both are 0 on
    the other positions."""
    theirs, on = -grad, batch.mask > 0
    scale = float(theirs[on].abs().max()) if on.any() else 0.0
    what = f"{what}: mini {batch.mini}, micro {batch.micro}, rows {batch.rows}"
    torch.testing.assert_close(token_weight[on], theirs[on], atol=ATOL * max(scale, 1e-30), rtol=RTOL, msg=what)
    assert torch.all(token_weight[~on] == 0), what
    assert torch.all(theirs[~on] == 0), what


def method_source(relative: str, cls: str, method: str) -> str:
    """The source of ``cls.method`` in ``SOURCE/relative`` with its decorators, dedented to module level."""
    path = SOURCE / relative
    if not path.is_file():
        pytest.skip(f"{relative} not found under RLADV_PEER_SRC={SOURCE} (tests/data/fetch_peers.sh)")
    text = path.read_text()
    klass = next(n for n in ast.parse(text).body if isinstance(n, ast.ClassDef) and n.name == cls)
    node = next(n for n in klass.body if isinstance(n, ast.FunctionDef) and n.name == method)
    first = min([d.lineno for d in node.decorator_list] + [node.lineno])
    return textwrap.dedent("\n".join(text.splitlines()[first - 1:node.end_lineno]))


def field_defaults(relative: str, cls: str) -> dict:
    """The literal defaults of the dataclass fields ``name: T = field(default=...)`` of ``cls``."""
    tree = ast.parse((SOURCE / relative).read_text())
    klass = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls)
    out = {}
    for node in klass.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.value, ast.Call):
            for kw in node.value.keywords:
                if kw.arg == "default":
                    try:
                        out[node.target.id] = ast.literal_eval(kw.value)
                    except ValueError:
                        pass
    return out


# ------------------------------------------------------------------ TRL 1.16.0
TRL = "trl/trainer/grpo_trainer.py"


@pytest.fixture(scope="module")
def trl():
    """``GRPOTrainer``'s ``_compute_loss`` and ``get_gamma_weights`` as methods of a class of their own, the lines
    of ``_generate_and_score_completions`` that count ``num_items_in_batch``, and ``GRPOConfig``'s defaults."""
    namespace = {"torch": torch, "math": math}
    for name in ("nanmin", "nanmax"):
        exec(function_source("trl/trainer/utils.py", name), namespace)
    for name in ("_compute_loss", "get_gamma_weights"):
        exec(method_source(TRL, "GRPOTrainer", name), namespace)
    cls = type("GRPOTrainerLoss", (), {"_compute_loss": namespace["_compute_loss"],
                                       "get_gamma_weights": namespace["get_gamma_weights"]})
    count = code_between(TRL, "_generate_and_score_completions", "loss_mask = completion_mask if tool_mask",
                         "num_items_in_batch = ")
    return ns(cls=cls, count=count, defaults=field_defaults("trl/trainer/grpo_config.py", "GRPOConfig"))


class _Accelerator:
    """One process: gather and reduce return their input."""
    num_processes, sync_gradients = 1, True

    def gather(self, x):
        return x

    gather_for_metrics = gather

    def reduce(self, x, reduction="sum"):
        return x


def trl_trainer(trl, loss_type: str, ga: int, steps_per_generation: int, **overrides):
    """A ``GRPOTrainer`` as its ``__init__`` sets the attributes ``_compute_loss`` reads, from ``GRPOConfig``'s
    defaults (beta 0, token-level ratios, no vLLM, no entropy mask or bonus) and ``overrides``; in training
    mode with ``ga`` accumulation steps. ``logps`` is what the model's forward returns."""
    args = ns(**{**trl.defaults, "loss_type": loss_type, "steps_per_generation": steps_per_generation,
                 "gradient_accumulation_steps": ga, **overrides})
    self = object.__new__(trl.cls)
    self.__dict__.update(
        args=args, loss_type=args.loss_type, beta=args.beta, epsilon_low=args.epsilon,
        epsilon_high=args.epsilon_high if args.epsilon_high is not None else args.epsilon,
        max_completion_length=args.max_completion_length, importance_sampling_level=args.importance_sampling_level,
        off_policy_mask_threshold=args.off_policy_mask_threshold, top_entropy_quantile=args.top_entropy_quantile,
        use_vllm=args.use_vllm, vllm_importance_sampling_correction=args.vllm_importance_sampling_correction,
        entropy_coef=args.entropy_coef, use_adaptive_entropy=args.use_adaptive_entropy,
        _entropy_bonus_enabled=args.entropy_coef != 0.0 or args.use_adaptive_entropy, aux_loss_enabled=False,
        model=ns(training=True), accelerator=_Accelerator(), current_gradient_accumulation_steps=ga,
        _metrics={"train": defaultdict(list), "eval": defaultdict(list)}, logps=None)
    self._get_per_token_logps_and_entropies = (
        lambda model, input_ids, attention_mask, logits_to_keep, **kw: (self.logps, torch.zeros_like(self.logps), None))
    return self


def trl_gradient(trl, batch: Batch, loss_type: str, advantages: torch.Tensor, **overrides) -> torch.Tensor:
    """The gradient of TRL's loss over one generation batch (the step): ``rows / micro`` calls of
    ``_compute_loss`` (``steps_per_generation``), ``mini / micro`` per optimizer step (gradient accumulation),
    each on ``per_device_train_batch_size = micro`` rows; the observation spans as ``tool_mask``; ``advantages``
    one per row."""
    count = {"completion_mask": batch.present.long(), "tool_mask": batch.mask.long(),
             "self": ns(accelerator=_Accelerator())}
    exec(trl.count, count)  # TRL's own lines: num_items_in_batch, the step's actor tokens
    trainer = trl_trainer(trl, loss_type, batch.mini // batch.micro, batch.rows // batch.micro, **overrides)
    logp = batch.old.clone().requires_grad_()
    for mini in batch.mini_batches():
        for s in batch.micro_batches(mini):
            trainer.logps = logp[s]
            rows, width = trainer.logps.shape
            inputs = {"prompt_ids": torch.zeros(rows, 1, dtype=torch.long),
                      "prompt_mask": torch.ones(rows, 1, dtype=torch.long),
                      "completion_ids": torch.zeros(rows, width, dtype=torch.long),
                      "completion_mask": batch.present[s].long(), "tool_mask": batch.mask[s].long(),
                      "advantages": advantages[s], "old_per_token_logps": batch.old[s],
                      "num_items_in_batch": count["num_items_in_batch"]}
            trainer._compute_loss(trainer.model, inputs).backward()
    return logp.grad


TRL_CASES = [(mode, None) for mode in AGGREGATIONS["trl"].modes] + [("cispo", 5.0)]


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("mode, epsilon_high", TRL_CASES,
                         ids=[m if e is None else f"{m}-epsilon_high{e:g}" for m, e in TRL_CASES])
def test_trl_token_weight_is_minus_the_gradient_of_compute_loss(trl, seed, mode, epsilon_high):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 5))
    batch = make_batch(rng, n)
    factor = float(rng.integers(16, 1025)) if mode == "dr_grpo" and seed % 2 else None  # else TRL's 512
    adv, weight = rladv(batch, "trl", "grpo", mode, group_size=n, loss_scale_factor=factor, epsilon_high=epsilon_high)
    # TRL's advantage is one number per completion: the row's value on its actor tokens (0 for a row without any)
    first = torch.where(batch.mask.any(1), batch.mask.argmax(1), 0)
    per_row = adv.gather(1, first[:, None])[:, 0] * batch.mask.any(1)
    overrides = {"epsilon_high": epsilon_high}
    if factor is not None:
        overrides["max_completion_length"] = int(factor)
    grad = trl_gradient(trl, batch, mode, per_row, **overrides)
    assert_weights_match(weight, grad, batch, f"trl {mode} seed {seed}")


# ------------------------------------------------------------------ OpenRLHF 0.11.2
@pytest.fixture(scope="module")
def openrlhf():
    load("openrlhf/models/utils.py", "openrlhf.models.utils", stubs=("deepspeed",))
    return ns(loss=load("openrlhf/models/loss.py", "openrlhf.models.loss"),
              loss_utils=load("openrlhf/utils/loss_utils.py", "openrlhf.utils.loss_utils"))


def openrlhf_gradient(openrlhf, batch: Batch, mode: str, advantages: torch.Tensor) -> torch.Tensor:
    """``PPOActor.ppo_train``'s loop: the micro-batches (``micro_train_batch_size`` rows) through
    ``iter_grad_accum_global_norm`` with ``accumulated_gradient`` = micro-batches per optimizer step, each
    ``actor_loss_fn(..., **loss_batch_info)`` backpropagated by DeepSpeed, which divides it by that number."""
    gas = batch.mini // batch.micro
    loss_fn = openrlhf.loss.PolicyLoss(clip_eps_low=0.2, clip_eps_high=0.2, dual_clip=None,
                                       token_level_loss=mode == "token-mean", policy_loss_type="ppo")
    logp = batch.old.clone().requires_grad_()
    experiences = [ns(rows=s, action_mask=batch.mask[s].bool())
                   for mini in batch.mini_batches() for s in batch.micro_batches(mini)]
    for experience, info in openrlhf.loss_utils.iter_grad_accum_global_norm(
            iter(experiences), ns(), gas, lambda e: e.action_mask):
        s = experience.rows
        loss, *_ = loss_fn(logp[s], batch.old[s], advantages[s], action_mask=experience.action_mask,
                           rollout_log_probs=None, **info)
        (loss / gas).backward()  # DeepSpeedEngine.backward: scale_wrt_gas
    return logp.grad


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("mode", list(AGGREGATIONS["openrlhf"].modes))
def test_openrlhf_token_weight_is_minus_the_gradient_of_policy_loss(openrlhf, seed, mode):
    """Groups of 2 to 4 (group_norm's std of one sample is NaN); a mini-batch without actor tokens is left out:
    OpenRLHF divides by its 0 tokens (NaN gradients)."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 5))
    batch = make_batch(rng, n, tokens_in_every_mini_batch=True)
    adv, weight = rladv(batch, "openrlhf", "group_norm", mode, group_size=n)
    assert_weights_match(weight, openrlhf_gradient(openrlhf, batch, mode, adv), batch, f"openrlhf {mode} seed {seed}")


# ------------------------------------------------------------------ NeMo-RL 0.6.0 (7ea279a)
@pytest.fixture(scope="module")
def nemo_rl():
    """``ClippedPGLossFn`` and the lines of ``process_global_batch`` (models/automodel/data.py) that count the
    global batch's valid sequences and tokens."""
    load("nemo_rl/algorithms/utils.py", "nemo_rl.algorithms.utils", stubs=(
        "transformers", "nemo_rl.data.chat_templates", "nemo_rl.models.policy", "nemo_rl.utils.fastokens",
        "nemo_rl.utils.logger"))
    load("nemo_rl/algorithms/loss/interfaces.py", "nemo_rl.algorithms.loss.interfaces",
         stubs=("nemo_rl.distributed.batched_data_dict",))
    module = load("nemo_rl/algorithms/loss/loss_functions.py", "nemo_rl.algorithms.loss.loss_functions", stubs=(
        "nemo_rl.algorithms.x_token.loss_utils", "nemo_rl.distributed.batched_data_dict",
        "nemo_rl.distributed.model_utils", "nemo_rl.models.dtensor.parallelize"))
    count = code_between("nemo_rl/models/automodel/data.py", "process_global_batch", "local_valid_seqs = ", ")")
    return ns(loss=module, count=count)


def nemo_rl_gradient(nemo_rl, batch: Batch, mode: str, advantages: torch.Tensor) -> torch.Tensor:
    """``DTensorPolicyWorkerV2.train``: per global batch (``train_global_batch_size`` rows) the valid sequences and
    tokens of ``process_global_batch`` (one rank: the all-reduce is the identity), then per micro-batch
    (``train_micro_batch_size`` rows) the loss with them, backpropagated times dp_size · cp_size = 1. The data is
    laid out as NeMo-RL's: a leading prompt position, ``token_mask[:, 1:]`` the response tokens, every row's
    ``sample_mask`` 1; ``next_token_logprobs`` are the response positions."""
    def prompt_first(x):
        return torch.cat([torch.zeros(x.shape[0], 1), x], dim=1)

    data = {"input_ids": prompt_first(batch.present).long(), "token_mask": prompt_first(batch.mask),
            "sample_mask": torch.ones(batch.rows), "advantages": prompt_first(advantages),
            "prev_logprobs": prompt_first(batch.old), "generation_logprobs": prompt_first(batch.old)}
    cfg = nemo_rl.loss.ClippedPGLossConfig(token_level_loss=mode == "token_level", reference_policy_kl_penalty=0.0)
    loss_fn = nemo_rl.loss.ClippedPGLossFn(cfg)
    logp = batch.old.clone().requires_grad_()
    for mini in batch.mini_batches():
        counted = {"torch": torch, "batch": {k: v[mini.start:mini.stop] for k, v in data.items()}}
        exec(nemo_rl.count, counted)
        for s in batch.micro_batches(mini):
            loss, _ = loss_fn(next_token_logprobs=logp[s], data={k: v[s] for k, v in data.items()},
                              global_valid_seqs=counted["local_valid_seqs"],
                              global_valid_toks=counted["local_valid_toks"])
            (loss * 1 * 1).backward()
    return logp.grad


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("mode", list(AGGREGATIONS["nemo_rl"].modes))
def test_nemo_rl_token_weight_is_minus_the_gradient_of_clipped_pg_loss(nemo_rl, seed, mode):
    batch = make_batch(np.random.default_rng(seed))
    adv, weight = rladv(batch, "nemo_rl", "grpo", mode)
    assert_weights_match(weight, nemo_rl_gradient(nemo_rl, batch, mode, adv), batch, f"nemo_rl {mode} seed {seed}")


# ------------------------------------------------------------------ SkyRL 0.3.0
SKYRL = "skyrl/backends/skyrl_train/utils"


@pytest.fixture(scope="module")
def skyrl():
    """``ppo_policy_loss`` and ``apply_loss_reduction_to_advantages_minibatch`` (with SkyRL's own ``torch_utils``
    and ``off_policy_correction_utils``), ``compute_prompt_boundaries``, and ``RayPPOTrainer._normalize_advantages``
    as a method of a class of its own."""
    load(f"{SKYRL}/torch_utils.py", "skyrl.backends.skyrl_train.utils.torch_utils", stubs=("jaxtyping",))
    load(f"{SKYRL}/off_policy_correction_utils.py", "skyrl.backends.skyrl_train.utils.off_policy_correction_utils",
         stubs=("omegaconf",))
    ppo = load(f"{SKYRL}/ppo_utils.py", "skyrl_ppo_utils_loss",
               stubs=("ray", "jaxtyping", "loguru", "skyrl.train.config"), ray={"is_initialized": lambda: False})
    namespace = {"torch": torch, "List": List, "Tuple": Tuple, "Optional": Optional,
                 "TrainingInputBatch": object, "apply_loss_reduction_to_advantages_minibatch":
                     ppo.apply_loss_reduction_to_advantages_minibatch}
    exec(function_source("skyrl/train/dataset/preprocess.py", "compute_prompt_boundaries"), namespace)
    exec(method_source("skyrl/train/trainer.py", "RayPPOTrainer", "_normalize_advantages"), namespace)
    trainer = type("RayPPOTrainerNormalize", (), {"_normalize_advantages": namespace["_normalize_advantages"]})
    return ns(ppo=ppo, prompt_boundaries=namespace["compute_prompt_boundaries"], trainer=trainer)


class _TrainingBatch(dict):
    """``TrainingInputBatch`` as ``_normalize_advantages`` uses it: tensors by name, a row slice by ``[a:b]``."""

    def __getitem__(self, key):
        if isinstance(key, slice):
            return _TrainingBatch({k: v[key] for k, v in self.items()})
        return super().__getitem__(key)


def skyrl_gradient(skyrl, batch: Batch, mode: str, advantages: torch.Tensor, max_seq_len) -> torch.Tensor:
    """``RayPPOTrainer``: ``_normalize_advantages`` over the mini-batches (``mini`` consecutive rows) with the
    prompt boundaries of ``compute_prompt_boundaries(uids)``; then each mini-batch's micro-batches
    (``micro_train_batch_size_per_gpu``) through ``ppo_policy_loss`` (its sum reduction), backpropagated times
    dp_size = 1 (the KL loss off)."""
    algorithm = ns(advantage_batch_normalize=False, loss_reduction=mode, max_seq_len=max_seq_len,
                   policy_loss_type="regular", eps_clip_low=0.2, eps_clip_high=0.2, clip_ratio_c=3.0,
                   off_policy_correction=None)
    trainer = object.__new__(skyrl.trainer)
    trainer.cfg = ns(trainer=ns(algorithm=algorithm, micro_train_batch_size_per_gpu=batch.micro))
    data = _TrainingBatch(advantages=advantages.clone(), response_mask=batch.present, loss_mask=batch.mask)
    boundaries = [(m.start, m.stop) for m in batch.mini_batches()]
    data = trainer._normalize_advantages(data, boundaries, skyrl.prompt_boundaries(batch.uids))
    logp = batch.old.clone().requires_grad_()
    for mini in batch.mini_batches():
        for s in batch.micro_batches(mini):
            loss, _ = skyrl.ppo.ppo_policy_loss(logp[s], batch.old[s], data["advantages"][s], algorithm,
                                                loss_mask=batch.mask[s], rollout_logprobs=None)
            (loss * 1).backward()
    return logp.grad


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("mode", list(AGGREGATIONS["skyrl"].modes))
def test_skyrl_token_weight_is_minus_the_gradient_of_reduced_ppo_loss(skyrl, seed, mode):
    rng = np.random.default_rng(seed)
    batch = make_batch(rng)
    max_seq_len = int(rng.integers(16, 4097)) if mode == "seq_mean_token_sum_norm" else None
    adv, weight = rladv(batch, "skyrl", "grpo", mode,
                        loss_scale_factor=None if max_seq_len is None else float(max_seq_len))
    grad = skyrl_gradient(skyrl, batch, mode, adv, max_seq_len)
    assert_weights_match(weight, grad, batch, f"skyrl {mode} seed {seed}")
