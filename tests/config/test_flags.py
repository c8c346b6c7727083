"""Settings and the command line agree: the flags rladv prints for a run (the report's example commands,
``--export``'s command.txt, compare's explain lines: ``command_flags(cfg.changed())``) read back as that run's
settings, for every setting."""
from __future__ import annotations

import pytest
import typer.main

from rladv_cli.cli import app
from rladv_cli.config.resolve import settings_from_flags
from rladv_cli.config.flags import command_flags
from rladv_cli.config.settings import RUN_ONLY, Config

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


# ------------------------------------------------------------------ one declaration: Config's fields
def test_every_option_of_compute_is_built_from_its_config_field():
    """Each setting is declared once, as a ``Config`` field with a ``Flag``: compute's option carries the field's
    flag, default and description (its help), and every field but the estimator (an option of its own, before
    --config) has one."""
    from rladv_cli.config.flags import flags, option_name

    options = {p.name: p for p in COMPUTE.params}
    assert set(Config.model_fields) - set(flags()) == {"estimator"}
    for name, flag in flags().items():
        field, param = Config.model_fields[name], options[name]
        assert option_name(name) in param.opts, name
        assert param.help == field.description + ".", name
        typed_default = field.default if flag.parse is None or field.default is None else param.default
        assert param.default == typed_default, name
        if field.annotation is bool:
            assert param.secondary_opts == [f"--no-{option_name(name)[2:]}"], name


def test_the_estimators_params_are_generated_from_config():
    from dataclasses import fields

    from rladv_cli.config.settings import PARAMS, Params

    assert [f.name for f in fields(Params)] == list(PARAMS)
    assert all(f.default == Config.model_fields[f.name].default for f in fields(Params))
    run = Config(estimator="gae", gamma=0.9, lam=0.8)
    assert (run.params().gamma, run.params().lam) == (0.9, 0.8) and run.params() == Params(gamma=0.9, lam=0.8)


# ------------------------------------------------------------------ each reader reads the names it gave
@pytest.mark.parametrize("settings, api, cli", [
    ({"estimator": "grpo", "kl_coef": 0.1, "kl_ctrl": "adaptive", "kl_target": 0.0},
     "kl_target must not be 0", "--kl-target must not be 0"),
    ({"estimator": "grpo", "adv_clip_low": 2.0, "adv_clip_high": 1.0},
     "adv_clip_low=2 is above adv_clip_high=1", "--adv-clip-low 2 is above --adv-clip-high 1"),
    ({"estimator": "grpo", "convention": "trl", "kl_coef": 0.1},
     "kl_coef: TRL puts KL in the loss", "--kl-coef: TRL puts KL in the loss"),
    ({"estimator": "grpo", "gamma": 1.5}, "gamma: Input should be less than or equal to 1",
     "--gamma: Input should be less than or equal to 1"),
    ({"estimator": "grpoo"}, "estimator: unknown estimator 'grpoo'", "--estimator: unknown estimator 'grpoo'"),
])
def test_an_error_names_a_setting_as_its_reader_gave_it(tmp_path, settings, api, cli):
    """A Python caller reads the keyword it passed (``kl_target``), the command line the flag it typed
    (``--kl-target``): the same check, the same message otherwise."""
    import shutil
    from pathlib import Path

    from typer.testing import CliRunner

    import rladv_cli
    from rladv_cli.errors import ConfigError

    data = shutil.copy(Path(__file__).parents[2] / "sample_data" / "groups.parquet", tmp_path / "groups.parquet")
    with pytest.raises(ConfigError) as err:
        rladv_cli.compute_file(data, **settings)
    assert str(err.value).startswith(api), str(err.value)
    result = CliRunner().invoke(app, ["compute", str(data), *command_flags(settings)])
    assert result.exit_code == 2 and result.output.startswith(f"Error: {cli}"), result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["groups.parquet"]  # no output either way


def test_an_output_error_names_the_output_as_its_reader_gave_it(tmp_path):
    """``output=`` and ``report_path=`` to a Python caller, ``-o`` and ``--report`` on the command line."""
    import shutil
    from pathlib import Path

    from typer.testing import CliRunner

    import rladv_cli
    from rladv_cli.errors import OutputError

    data = shutil.copy(Path(__file__).parents[2] / "sample_data" / "groups.parquet", tmp_path / "groups.parquet")
    with pytest.raises(OutputError, match=r"^output='.*groups.parquet' is one of the inputs"):
        rladv_cli.compute_file(data, estimator="grpo", output=data)
    with pytest.raises(OutputError, match=r"^report_path='-': this file is not written to stdout"):
        rladv_cli.compute_file(data, estimator="grpo", output=tmp_path / "o.parquet", report_path="-")
    result = CliRunner().invoke(app, ["compute", str(data), "--estimator", "grpo", "-o", str(data)])
    assert result.exit_code == 2 and result.output.startswith(f"Error: -o {data} is one of the inputs"), result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["groups.parquet"]


def test_keywords_over_a_config_are_validated_as_one_config():
    """``compute(frame, config, gamma=5.0)`` is refused as ``Config(gamma=5.0)`` is (the keywords were copied into
    the config without a check)."""
    import pyarrow as pa

    import rladv_cli
    from rladv_cli.errors import ConfigError

    table = pa.table({"uid": ["a", "a"], "response_mask": [[1], [1]], "rm_scores": [[1.0], [0.0]]})
    with pytest.raises(ConfigError, match="^gamma: Input should be less than or equal to 1"):
        rladv_cli.compute(table, Config(estimator="grpo"), gamma=5.0)
    with pytest.raises(ConfigError, match="needs max_resp_len"):
        rladv_cli.compute(table, Config(estimator="grpo"), overlong_buffer_len=4)
    out, _ = rladv_cli.compute(table, Config(estimator="grpo"), norm_adv_by_std=False)
    assert out["advantages"].to_pylist() == [[0.5], [-0.5]]
