"""The column contract of a rollout dataset (docs/contract.md §1, §3): names, Arrow kinds, roles.

``COLUMNS`` is the single source; the pydantic ``RolloutRow`` (``models``, and so ``schemas/rollout.schema.json``)
and the row-level Arrow checks in ``validation.py`` are both derived from it. This module imports no pydantic: a run
checks its rows with Arrow, and reading (a Ray worker's too) needs only these tables.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Kind = Literal["mask", "float_list", "int_list", "float", "label", "call_list", "flag"]


@dataclass(frozen=True)
class Column:
    """One contract column: ``kind`` fixes the accepted Arrow types; ``token_aligned`` lists share row lengths
    (a ``call_list`` holds one number per tool call: any length, null for none; a ``flag`` is one bool, or 0/1, per
    row)."""

    name: str
    kind: Kind
    description: str

    @property
    def token_aligned(self) -> bool:
        return self.kind in ("mask", "float_list", "int_list")


COLUMNS: dict[str, Column] = {
    c.name: c
    for c in (
        Column("uid", "label", "prompt-group id: rows with the same uid were sampled from the same prompt"),
        Column("response_mask", "mask", "1 = token sampled by the actor; 0 = tool observation or padding"),
        Column("responses", "int_list", "response token ids (assistant and tool-observation tokens)"),
        Column("attention_mask", "mask", "0 marks padding; padding may only be a suffix of the row"),
        Column("loss_mask", "mask", "the original assistant mask; defaults to response_mask as read"),
        Column("rm_scores", "float_list", "token-level scores from the reward manager"),
        Column("score", "float", "scalar outcome score, placed on the last non-padding position"),
        Column("old_log_probs", "float_list", "log-prob of each token under the policy before the update"),
        Column("ref_log_prob", "float_list", "log-prob under the frozen reference policy"),
        Column("rollout_log_probs", "float_list", "log-prob under the policy that generated the rollout"),
        Column("values", "float_list", "critic value at each response position"),
        Column("reward_baselines", "float", "reward of the greedy rollout for the same prompt (remax)"),
        Column("sum_pi_squared", "float_list", "sum over the vocabulary of pi(v)^2 at each position"),
        Column("tool_rewards", "call_list", "rewards the row's tool calls returned, one per call (null: none); "
               "added to the score only with --tool-reward-coef"),
        Column("truncated", "flag", "the generation was cut at the length limit (finish_reason length); read by "
               "--stop-properly-penalty-coef"),
        Column("is_last_step", "flag", "the row is the last step of its trajectory (SkyRL's step-wise training: a "
               "trajectory is the rows up to and including it, in file order); read under --convention skyrl"),
    )
}

# Columns rladv writes (docs/contract.md §3); response_mask and loss_mask are rewritten as int8 lists.
OUTPUT_COLUMNS: dict[str, str] = {
    "token_level_rewards": "scores after every shaping stage",
    "response_mask": "the mask the estimator used (input mask after rollout rejection), int8",
    "loss_mask": "the original assistant mask, int8 (added when absent)",
    "advantages": "the estimator's advantages; 0 wherever response_mask is 0",
    "returns": "the estimator's returns; 0 wherever response_mask is 0",
}
