"""``config.resolve``: a command's flags over a ``--config`` YAML, and the "has no effect" refusals, called as a
Python caller calls them (no typer)."""
from __future__ import annotations

import textwrap
from enum import Enum

import pytest

from rladv_cli.config.flags import to_command_line
from rladv_cli.config.resolve import merge_verl_config, refused_inert, settings_from_flags
from rladv_cli.config.settings import Config
from rladv_cli.errors import ConfigError


def _refused(*args, **kwargs):
    """``refused_inert`` as the command line calls it: its messages name flags."""
    with to_command_line():
        return refused_inert(*args, **kwargs)


# A command's settings at their defaults, as settings_from_flags returns them (a few of them).
DEFAULTS = {"estimator": None, "gamma": 1.0, "lam": 1.0, "norm_adv_by_std": True, "epsilon": 1e-6, "kl_coef": 0.0,
            "rollout_rs": None, "pad_width": None}

YAML = """\
    algorithm:
      adv_estimator: grpo
      gamma: 0.9
      lam: 0.95
      norm_adv_by_std_in_grpo: false
"""
FILE_SETTINGS = {"estimator": "grpo", "gamma": 0.9, "lam": 0.95, "norm_adv_by_std": False}


@pytest.fixture
def trainer_yaml(tmp_path):
    path = tmp_path / "trainer.yaml"
    path.write_text(textwrap.dedent(YAML), encoding="utf-8")
    return str(path)


class _Mode(str, Enum):
    carry = "carry"


# ------------------------------------------------------------------------------------------ flags


def test_settings_from_flags_takes_config_fields_as_config_takes_them():
    params = {"dataset": ["a.parquet"], "quiet": True, "estimator": "grpo", "rpp_mask_mode": _Mode.carry,
              "reward_components": " format, accuracy ,", "reward_weights": None, "gamma": 0.9, "chunk_rows": 64}
    assert settings_from_flags(params) == {"estimator": "grpo", "rpp_mask_mode": "carry",
                                           "reward_components": ["format", "accuracy"], "reward_weights": None,
                                           "gamma": 0.9, "chunk_rows": 64}


# ------------------------------------------------------------------------------------------ merging


def test_without_a_file_none_values_are_left_out_unless_typed():
    flags = {**DEFAULTS, "estimator": "rloo"}
    merged, source = merge_verl_config(flags, {"estimator", "pad_width"}, None)
    assert source is None
    assert merged == {"estimator": "rloo", "gamma": 1.0, "lam": 1.0, "norm_adv_by_std": True, "epsilon": 1e-6,
                      "kl_coef": 0.0, "pad_width": None}


def test_untyped_defaults_do_not_override_the_file(trainer_yaml):
    merged, source = merge_verl_config(dict(DEFAULTS), set(), trainer_yaml)
    assert merged == {"estimator": "grpo", "gamma": 0.9, "lam": 0.95, "norm_adv_by_std": False, "epsilon": 1e-6,
                      "kl_coef": 0.0}
    assert source == {"path": trainer_yaml, "settings": FILE_SETTINGS, "overridden_by_flags": [], "ignored": [],
                      "notes": []}


def test_typed_flags_override_the_file(trainer_yaml):
    # --estimator rloo --lam 0.5 --gamma 1.0: typed flags win, even one that says the default
    flags = {**DEFAULTS, "estimator": "rloo", "lam": 0.5}
    merged, source = merge_verl_config(flags, {"estimator", "lam", "gamma"}, trainer_yaml)
    assert merged == {"estimator": "rloo", "gamma": 1.0, "lam": 0.5, "norm_adv_by_std": False, "epsilon": 1e-6,
                      "kl_coef": 0.0}
    assert source == {"path": trainer_yaml, "settings": FILE_SETTINGS,
                      "overridden_by_flags": ["estimator", "gamma", "lam"], "ignored": [], "notes": []}


def test_a_typed_flag_the_file_does_not_set_is_not_an_override(trainer_yaml):
    merged, source = merge_verl_config({**DEFAULTS, "kl_coef": 0.1}, {"kl_coef"}, trainer_yaml)
    assert merged["kl_coef"] == 0.1 and merged["gamma"] == 0.9
    assert source["overridden_by_flags"] == []


def test_the_file_contributes_its_notes_and_unused_keys(tmp_path):
    path = tmp_path / "cfg.yaml"
    path.write_text("algorithm:\n  adv_estimator: grpo\n  use_kl_in_reward: false\n  kl_ctrl:\n    kl_coef: 0.2\n",
                    encoding="utf-8")
    merged, source = merge_verl_config({**DEFAULTS, "kl_coef": 0.5}, set(), path)
    assert merged["kl_coef"] == 0.0
    assert source == {"path": str(path), "settings": {"estimator": "grpo", "kl_coef": 0.0}, "overridden_by_flags": [],
                      "ignored": ["algorithm.kl_ctrl.kl_coef"],
                      "notes": ["algorithm.use_kl_in_reward=false: kl_coef set to 0 (no KL reward shaping)"]}


def test_an_unreadable_file_is_a_config_error(tmp_path):
    missing = str(tmp_path / "missing.yaml")
    with pytest.raises(ConfigError) as info:
        merge_verl_config(dict(DEFAULTS), set(), missing)
    assert str(info.value) == f"{missing}: no such config file"


# ------------------------------------------------------------------------------------------ "has no effect"


@pytest.mark.parametrize("settings, typed, message", [
    pytest.param({"estimator": "grpo_vectorized", "norm_adv_by_std": False}, {"norm_adv_by_std": False},
                 "--no-norm-adv-by-std has no effect with --estimator grpo_vectorized, which reads --epsilon",
                 id="std-flag-with-grpo-vectorized"),
    pytest.param({"estimator": "rloo", "epsilon": 1e-4}, {"epsilon": 1e-4},
                 "--epsilon has no effect with --estimator rloo, which reads no estimator setting",
                 id="epsilon-with-rloo"),
    pytest.param({"estimator": "grpo", "kl_penalty": "k3"}, {"kl_penalty": "k3"},
                 "--kl-penalty has no effect without --kl-coef (KL reward shaping is off)", id="kl-penalty"),
    pytest.param({"estimator": "grpo", "kl_coef": 0.1, "kl_target": 0.2}, {"kl_coef": 0.1, "kl_target": 0.2},
                 "--kl-target has no effect without --kl-ctrl adaptive", id="kl-target-fixed"),
    pytest.param({"estimator": "grpo", "max_resp_len": 10}, {"max_resp_len": 10},
                 "--max-resp-len has no effect without --overlong-buffer-len", id="max-resp-len"),
    pytest.param({"estimator": "grpo", "rollout_is_batch_normalize": True}, {"rollout_is_batch_normalize": True},
                 "--rollout-is-batch-normalize has no effect without --rollout-is token|sequence", id="is-normalize"),
    pytest.param({"estimator": "grpo", "lam": 0.95, "kl_penalty": "k3"}, {"kl_penalty": "k3", "lam": 0.95},
                 "--lam has no effect with --estimator grpo, which reads --norm-adv-by-std, --epsilon",
                 id="first-in-config-order"),
])
def test_inert_typed_options_are_refused(settings, typed, message):
    assert _refused(Config(**settings), typed, ray_engine=False) == message


@pytest.mark.parametrize("settings, typed", [
    pytest.param({"estimator": "grpo", "lam": 0.95}, {}, id="set-by-the-file-not-typed"),
    pytest.param({"estimator": "grpo"}, {"gamma": 1.0, "kl_ctrl": "fixed"}, id="typed-defaults"),
    pytest.param({"estimator": "gae", "lam": 0.95}, {"estimator": "gae", "lam": 0.95}, id="read-by-the-estimator"),
])
def test_options_that_count_or_were_not_typed_pass(settings, typed):
    assert _refused(Config(**settings), typed, ray_engine=False) is None


def test_ray_options_without_the_ray_engine_are_refused():
    cfg = Config(estimator="grpo")
    assert _refused(cfg, {"ray_workers": 4}, ray_engine=False) == (
        "--ray-workers has no effect without --engine ray")
    assert _refused(cfg, {"ray_workers": 4, "ray_address": "auto"}, ray_engine=False) == (
        "--ray-address has no effect without --engine ray")
    assert _refused(cfg, {"ray_workers": 4, "ray_address": "auto"}, ray_engine=True) is None
    # the settings' own refusals come first
    assert _refused(Config(estimator="grpo", kl_penalty="k3"), {"ray_workers": 4, "kl_penalty": "k3"},
                         ray_engine=False) == "--kl-penalty has no effect without --kl-coef (KL reward shaping is off)"


@pytest.mark.parametrize("coef", [0.1, -0.1])
@pytest.mark.parametrize("setting, message", [
    ({"kl_target": 0.0}, "kl_target must not be 0 for the adaptive controller (verl divides by it)"),
    ({"kl_horizon": 0}, "kl_horizon must be > 0 for the adaptive controller"),
])
def test_the_adaptive_controller_refuses_what_it_would_divide_by_for_any_shaping_coefficient(coef, setting, message):
    """A negative --kl-coef shapes the rewards too (verl accepts it), so the adaptive controller steps on it: a
    zero target or horizon is refused before any data is read, not a ZeroDivisionError traceback in the kl pass."""
    with pytest.raises(ConfigError) as err:
        Config(estimator="grpo", kl_coef=coef, kl_ctrl="adaptive", batch_key="step", **setting)
    assert str(err.value) == message  # a Python caller reads the keyword it passed
    with pytest.raises(ConfigError) as err, to_command_line():
        Config(estimator="grpo", kl_coef=coef, kl_ctrl="adaptive", batch_key="step", **setting)
    assert str(err.value) == "--" + message.replace("_", "-", 1)  # the command line, the flag it typed
