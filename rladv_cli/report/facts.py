"""The per-row facts both commands compute, declared once: ``rladv compute`` computes them in the array
namespace (numpy on the CPU, torch on CUDA; docs/arrays.md) and keeps them in numpy
(``report.diagnostics.RowTable``), ``rladv inspect`` in numpy (``diagnose.scan.RowScalars``), under these names
and with these meanings, so a check reads the same fact by the same name in either (docs/debugging.md). Each
command keeps its own arithmetic; a test runs both on one file and compares them."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class Fact:
    """One value per row: its ``name``, its kind and what it is. Kinds: ``count`` (a whole number; compute may
    hold it as float64), ``float``, ``bool``, ``id`` (an integer label)."""

    name: str
    kind: Literal["count", "float", "bool", "id"]
    meaning: str


ROW_FACTS: dict[str, Fact] = {f.name: f for f in (
    Fact("length", "count", "positions in the row"),
    Fact("actor", "count", "actor tokens: positions of the mask before rollout rejection (loss_mask when the file has "
         "it, else response_mask)"),
    Fact("used", "count", "positions with response_mask 1: the tokens the estimator uses"),
    Fact("padding", "count", "positions with attention_mask 0"),
    Fact("score_total", "float", "the sum of the row's assembled scores, before shaping"),
    Fact("reward_total", "float", "the row's total reward R after shaping"),
    Fact("kl_row", "float", "the mean KL estimate over the row's actor tokens"),
    Fact("kl_raises_reward", "bool", "the row's KL term (coefficient times the sum of its estimates) is negative"),
    Fact("kl_flips_sign", "bool", "the score total is not 0 and the shaped total has another sign"),
    Fact("credit_reset_at_mask", "bool", "a reward reaches earlier actor tokens only across a mask-0 position"),
    Fact("tool_reward_sum", "float", "the sum of the row's tool_rewards"),
    Fact("tool_calls", "count", "entries in the row's tool_rewards"),
    Fact("group_id", "id", "the row's group, numbered densely across the dataset"),
    Fact("batch_id", "id", "the row's batch (--batch-key value), numbered densely"),
    Fact("adv_count", "count", "the advantages' count over the used tokens"),
    Fact("adv_sum", "float", "their sum (float64)"),
    Fact("adv_m2", "float", "the sum of their squared deviations from the row's mean"),
    Fact("adv_min", "float", "the smallest (inf without used tokens)"),
    Fact("adv_max", "float", "the largest (-inf without used tokens)"),
    Fact("adv_positive", "count", "used tokens with an advantage above 0"),
    Fact("adv_negative", "count", "used tokens with an advantage below 0"),
    Fact("adv_zero", "count", "used tokens whose advantage is exactly 0"),
    Fact("w_abs", "float", "the row's gradient mass: the sum of |token_weight| over its used tokens"),
)}
