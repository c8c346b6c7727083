"""Writes tests/data/slime_rollouts/{0,1}.pt with slime's own code: the debug rollout data
``--save-debug-rollout-data`` saves (slime/ray/rollout.py ``RolloutManager.generate`` calls
``save_debug_rollout_data(self.args.save_debug_rollout_data, data, rollout_id=..., evaluation=False)``). Run it
with slime's source on the path, e.g. from its mirror:

    mkdir -p /tmp/slime_src && git -C /work/.mirror/THUDM+slime/repo archive HEAD slime | tar -x -C /tmp/slime_src
    SLIME_SRC=/tmp/slime_src python tests/data/make_slime_rollouts.py

(slime 624b824a898ab0ec1fcb4d373004c7f3852bf515). What runs is slime's:

* ``RolloutDataSource.get_samples`` (slime/rollout/data_source.py) copies each prompt's ``Sample``
  ``n_samples_per_prompt`` times and numbers them (``group_index`` per prompt, ``index`` per sample, both
  running on across rollouts). It is called unbound on an object holding only the attributes it reads (the
  dataset's samples, the counters, ``n_samples_per_prompt``): ``__init__`` loads a tokenizer and a dataset.
* ``Sample.append_response_tokens`` (slime/utils/types.py) appends the generated tokens as
  ``sglang_rollout.generate`` does (``trainable=True`` with their log-probs and SGLang's ``meta_info``, whose
  ``finish_reason`` sets the status), and a tool's observation as a multi-turn generate function does
  (``trainable=False``: ``loss_mask`` 0, log-prob 0.0); the prompt's token ids are ``tokens`` first, as
  ``generate`` sets them. It keeps ``loss_mask`` and ``rollout_log_probs`` response-long.
* ``save_debug_rollout_data`` (slime/observability/rollout_data_utils.py) writes the file:
  ``torch.save({"rollout_id": rollout_id, "samples": [sample.to_dict() for sample in data]}, path)``.

Modules the imported ones pull in but these functions do not use (httpx, transformers) are empty stubs in
``sys.modules``. The rollouts: 2 prompts x 4 samples each (the dataset's 3 prompts: rollout 1 wraps around to the
first), one multi-turn sample (rollout 0, group 1, sample 3: a tool observation between two generated turns),
one ``remove_sample`` (rollout 1), one truncated sample and a group with equal rewards (rollout 1). Token ids
stand in for a tokenizer's; log-probs are multiples of 1/64.
"""
from __future__ import annotations

import os
import random
import sys
import types
from pathlib import Path

# stub_modules.py is beside this file; the regeneration tests run its text with -c, from the repository root
sys.path.insert(0, str(Path(__file__).resolve().parent if "__file__" in globals() else Path("tests/data").resolve()))
from stub_modules import install_stubs  # noqa: E402

SRC = Path(os.environ.get("SLIME_SRC", "/tmp/slime_src"))
HERE = Path(__file__).resolve().parent / "slime_rollouts"
STUBS = ("httpx", "transformers")


install_stubs(STUBS)
sys.path.insert(0, str(SRC))
from slime.observability.rollout_data_utils import save_debug_rollout_data  # noqa: E402
from slime.rollout.data_source import RolloutDataSource  # noqa: E402
from slime.utils.types import Sample  # noqa: E402

PROMPTS = [("What is 2+2?", [151644, 872, 3838, 374, 220, 17, 10, 17], "4"),
           ("Name a prime above 10.", [151644, 872, 7535, 264, 10250], "11"),
           ("Spell 'cat' backwards.", [151644, 872, 41710, 8251], "tac")]
REWARDS = {0: [[1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 0.0, 0.5]], 1: [[1.0, 0.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0]]}
STOP, LENGTH = {"finish_reason": {"type": "stop"}}, {"finish_reason": {"type": "length"}}


def _generated(rng: random.Random, n: int) -> tuple[list[int], list[float]]:
    return [rng.randint(100, 150000) for _ in range(n)], [-rng.randint(1, 160) / 64 for _ in range(n)]


def rollout(source: types.SimpleNamespace, rollout_id: int) -> list:
    rng = random.Random(rollout_id)
    groups = RolloutDataSource.get_samples(source, 2)
    for g, group in enumerate(groups):
        for s, sample in enumerate(group):
            sample.tokens = list(PROMPTS[[p[0] for p in PROMPTS].index(sample.prompt)][1])
            tokens, logp = _generated(rng, rng.randint(3, 7))
            truncated = (rollout_id, g, s) == (1, 1, 0)
            sample.append_response_tokens(None, tokens=tokens, log_probs=logp, trainable=True,
                                          meta_info=LENGTH if truncated else STOP, text=f" answer {s}")
            if (rollout_id, g, s) == (0, 1, 3):  # multi-turn: a tool's observation, then a second turn
                sample.append_response_tokens(None, tokens=_generated(rng, 2)[0], trainable=False,
                                              text=" <tool>observation</tool>")
                tokens, logp = _generated(rng, 2)
                sample.append_response_tokens(None, tokens=tokens, log_probs=logp, trainable=True, meta_info=STOP,
                                              text=" final answer")
            sample.reward = REWARDS[rollout_id][g][s]
            sample.remove_sample = (rollout_id, g, s) == (1, 0, 1)
    return [sample for group in groups for sample in group]


class _Dataset(list):
    """slime's ``Dataset`` as ``get_samples`` reads it: ``len()`` and ``samples``."""

    @property
    def samples(self):
        return self


if __name__ == "__main__":
    os.makedirs(HERE, exist_ok=True)
    dataset = _Dataset(Sample(prompt=p, label=label, metadata={"source": "arith"}) for p, _, label in PROMPTS)
    source = types.SimpleNamespace(dataset=dataset, sample_offset=0, epoch_id=0, sample_group_index=0,
                                   sample_index=0, args=types.SimpleNamespace(n_samples_per_prompt=4,
                                                                              rollout_shuffle=False))
    for rollout_id in (0, 1):
        save_debug_rollout_data(str(HERE / "{rollout_id}.pt"), rollout(source, rollout_id), rollout_id=rollout_id,
                                evaluation=False)
