"""Settings and the command line agree: the flags rladv prints for a run (the report's example commands,
``--export``'s command.txt, compare's explain lines: ``command_flags(cfg.changed())``) read back as that run's
settings, for every setting."""
from __future__ import annotations

import pytest
import typer.main

from rladv_cli.cli import app
from rladv_cli.config.resolve import settings_from_flags
from rladv_cli.config.settings import RUN_ONLY, Config, command_flags

COMPUTE = typer.main.get_command(app).commands["compute"]
RUNS = [
    ("grpo", {"norm_adv_by_std": False, "epsilon": 1e-4, "kl_coef": 0.05, "kl_penalty": "low_var_kl", "kl_ctrl": "adaptive",
              "kl_target": 0.2, "kl_horizon": 500, "batch_key": "step"}),
    ("grpo", {"convention": "nemo_rl", "leave_one_out": False}),
    ("grpo", {"convention": "trl", "scale_rewards": "batch", "group_size": 4}),
    ("gae", {"gamma": 0.99, "lam": 0.95, "rollout_rs": "token_k1", "rollout_rs_threshold": "0.5_2.0",
             "rollout_is": "token", "rollout_is_threshold": "3.0", "rollout_is_batch_normalize": True}),
    ("reinforce_plus_plus", {"rpp_mask_mode": "reset", "overlong_buffer_len": 4, "overlong_penalty_factor": 0.5,
                             "max_resp_len": 64, "tool_reward_coef": 0.5}),
    ("gdpo", {"reward_components": ("a", "b"), "reward_weights": (1.0, 2.0)}),
    ("grpo_norm", {"mean_level": "batch", "std_level": "none"}),
    ("pkpo", {"k": 3}),
    ("vapo", {"vapo_alpha": 0.1, "value_lam": 0.9}),
    ("grpo", {"reward_scale": 2.0, "reward_bias": 0.5, "reward_clip": 1.0, "adv_clip": 3.0,
              "stop_properly_penalty_coef": 0.5}),
    ("grpo", {"loss_agg_mode": "seq-mean-token-sum-norm", "mini_batch_size": 8, "micro_batch_size": 4,
              "loss_scale_factor": 100.0}),
    ("grpo", {"convention": "trl", "loss_agg_mode": "cispo", "epsilon_high": 0.3}),
    ("grpo", {"where": "step >= 1", "pad_width": 64, "columns": {"uid": "prompt_id"}}),
    ("grpo", {"convention": "nemo_rl", "adv_clip_low": -2.0, "adv_clip_high": 5.0}),
]


@pytest.mark.parametrize("estimator, settings", RUNS, ids=[f"{e}-{'-'.join(s)}"[:60] for e, s in RUNS])
def test_printed_flags_read_back_as_the_run(estimator, settings):
    run = Config(estimator=estimator, **settings)
    assert set(run.changed()) == set(settings), "a setting of the case has no effect: choose another estimator"
    ctx = COMPUTE.make_context("compute", ["x.parquet", "--estimator", estimator, *command_flags(run.changed())])
    back = Config(**{**settings_from_flags(ctx.params), "estimator": estimator})
    assert back.model_dump() == run.model_dump()


def test_every_setting_is_read_back_by_some_case():
    """A new setting needs a case above, so that its printed flag is checked too."""
    covered = {name for _, settings in RUNS for name in settings}
    assert set(Config.model_fields) - covered == {"estimator", *RUN_ONLY}
