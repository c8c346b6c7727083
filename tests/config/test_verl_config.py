"""``--config``: verl trainer YAML -> rladv settings (rladv_cli/config/verl.py)."""
from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from conftest import DATA
from rladv_cli.config.settings import Config
from rladv_cli.config.verl import VerlSettings, settings_from_verl_yaml
from rladv_cli.errors import ConfigError
from rladv_cli.estimators.registry import REFERENCE_NAMES


def yaml_file(tmp_path: Path, text: str, name: str = "cfg.yaml") -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return str(path)


def read_yaml(tmp_path: Path, text: str) -> VerlSettings:
    return settings_from_verl_yaml(yaml_file(tmp_path, text))


def build(settings: dict, **extra) -> Config:
    """What the CLI does: file settings first, then flags. Settings Config does not have (yet) are left out:
    overlong_*, max_resp_len, reward_components and reward_weights are checked as dict entries."""
    known = {k: v for k, v in settings.items() if k in Config.model_fields}
    known.setdefault("estimator", "grpo")
    return Config(**{**known, **extra})


def error_of(tmp_path: Path, text: str) -> str:
    path = yaml_file(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        settings_from_verl_yaml(path)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: ")
    return message.removeprefix(f"{path}: ")


# ------------------------------------------------------------------------------------------ full trainer file


def test_full_trainer_config_exact_settings():
    vs = settings_from_verl_yaml(str(DATA / "ppo_trainer.yaml"))
    assert vs.settings == {
        "estimator": "grpo",
        "gamma": 1.0,
        "lam": 0.95,
        "norm_adv_by_std": False,
        "kl_penalty": "low_var_kl",
        "kl_ctrl": "adaptive",
        "kl_target": 0.05,
        "kl_horizon": 5000,
        "kl_coef": 0.002,
        "rollout_is": "token",
        "rollout_is_threshold": "2.0",
        "rollout_is_batch_normalize": False,
        "rollout_rs": "token_k1",
        "rollout_rs_threshold": "0.5_2.0",
        "overlong_buffer_len": 512,
        "overlong_penalty_factor": 1.0,
        "max_resp_len": 4096,  # ${data.max_response_length}
    }
    assert sorted(vs.ignored) == sorted([
        "algorithm.use_pf_ppo", "algorithm.pf_ppo", "algorithm.filter_groups",
        "algorithm.rollout_correction.loss_type", "reward.reward_kwargs.overlong_buffer_cfg.log",
    ])
    assert any("use_kl_in_reward=true" in n and "0.002" in n for n in vs.notes)
    assert any("overlong_buffer_cfg.enable=true" in n for n in vs.notes)
    assert all("\n" not in n for n in vs.notes)
    cfg = build(vs.settings)
    assert (cfg.estimator, cfg.lam, cfg.kl_coef, cfg.kl_ctrl, cfg.rollout_rs) == (
        "grpo", 0.95, 0.002, "adaptive", "token_k1")
    assert isinstance(vs.settings["gamma"], float) and isinstance(vs.settings["kl_horizon"], int)


def test_flags_typed_on_the_command_line_win():
    vs = settings_from_verl_yaml(str(DATA / "ppo_trainer.yaml"))
    cfg = build(vs.settings, kl_coef=0.0, estimator="rloo")
    assert cfg.estimator == "rloo" and not cfg.use_kl and cfg.kl_penalty == "low_var_kl"


def test_trainer_config_without_algorithm_section(tmp_path):
    vs = read_yaml(tmp_path, """
        trainer:
          total_epochs: 1
        data:
          max_response_length: 64
    """)
    assert vs.settings == {}
    assert any("verl's algorithm defaults" in n for n in vs.notes)


def test_hydra_defaults_list_is_noted(tmp_path):
    vs = read_yaml(tmp_path, """
        defaults:
          - _self_
        algorithm:
          adv_estimator: rloo
    """)
    assert vs.settings == {"estimator": "rloo"}
    assert any("defaults:" in n for n in vs.notes)


# ------------------------------------------------------------------------------------------ algorithm-only


def test_algorithm_section_without_its_key():
    vs = settings_from_verl_yaml(str(DATA / "algorithm_only.yaml"))
    assert vs.settings == {"estimator": "reinforce_plus_plus", "gamma": 0.99, "lam": 1.0, "kl_penalty": "kl",
                           "kl_ctrl": "fixed", "kl_coef": 0.0}
    assert vs.ignored == ["algorithm.kl_ctrl.kl_coef"]
    assert build(vs.settings).gamma == 0.99


def test_algorithm_section_with_its_key_only(tmp_path):
    vs = read_yaml(tmp_path, """
        algorithm:
          adv_estimator: grpo
          norm_adv_by_std_in_grpo: false
    """)
    assert vs.settings == {"estimator": "grpo", "norm_adv_by_std": False}
    assert vs.ignored == [] and vs.notes == []
    assert build(vs.settings).norm_adv_by_std is False


def test_only_keys_the_file_sets_are_emitted(tmp_path):
    assert read_yaml(tmp_path, "algorithm:\n  gamma: 0.9\n").settings == {"gamma": 0.9}
    assert read_yaml(tmp_path, "algorithm: null\n").settings == {}


def test_numbers_and_booleans_as_omegaconf_reads_them(tmp_path):
    vs = read_yaml(tmp_path, """
        gamma: 1e-1
        lam: "0.5"
        norm_adv_by_std_in_grpo: "False"
        kl_ctrl:
          horizon: 2e3
          target_kl: 5e-2
    """)
    assert vs.settings == {"gamma": 0.1, "lam": 0.5, "norm_adv_by_std": False, "kl_horizon": 2000,
                           "kl_target": 0.05}


# ------------------------------------------------------------------------------------------ KL


def test_use_kl_in_reward_false_sets_kl_coef_zero(tmp_path):
    vs = read_yaml(tmp_path, """
        algorithm:
          use_kl_in_reward: false
          kl_ctrl:
            kl_coef: 0.05
    """)
    assert vs.settings == {"kl_coef": 0.0}
    assert "algorithm.kl_ctrl.kl_coef" in vs.ignored
    assert "algorithm.use_kl_in_reward=false: kl_coef set to 0 (no KL reward shaping)" in vs.notes
    assert not build(vs.settings).use_kl


def test_use_kl_in_reward_true_takes_kl_ctrl_kl_coef(tmp_path):
    vs = read_yaml(tmp_path, """
        algorithm:
          use_kl_in_reward: true
          kl_penalty: k3
          kl_ctrl:
            type: fixed
            kl_coef: 0.05
    """)
    assert vs.settings == {"kl_coef": 0.05, "kl_penalty": "k3", "kl_ctrl": "fixed"}
    assert build(vs.settings).use_kl


def test_use_kl_in_reward_true_without_kl_coef_uses_verl_default(tmp_path):
    vs = read_yaml(tmp_path, "algorithm:\n  use_kl_in_reward: true\n")
    assert vs.settings == {"kl_coef": 0.001}
    assert any("default 0.001" in n for n in vs.notes)


def test_kl_coef_without_use_kl_in_reward_is_unused(tmp_path):
    vs = read_yaml(tmp_path, "algorithm:\n  kl_ctrl:\n    kl_coef: 0.2\n")
    assert vs.settings == {}
    assert vs.ignored == ["algorithm.kl_ctrl.kl_coef"]


def test_kl_penalty_plus_suffix_accepted(tmp_path):
    assert read_yaml(tmp_path, "kl_penalty: low_var_kl+\n").settings == {"kl_penalty": "low_var_kl+"}


# ------------------------------------------------------------------------------------------ rollout correction


def test_rollout_correction_values(tmp_path):
    vs = read_yaml(tmp_path, """
        algorithm:
          rollout_correction:
            rollout_is: sequence
            rollout_is_threshold: 3
            rollout_is_batch_normalize: true
            rollout_rs: token_k1,seq_max_k2
            rollout_rs_threshold: 0.5_2.0,2.5
            bypass_mode: false
    """)
    assert vs.settings == {"rollout_is": "sequence", "rollout_is_threshold": "3", "rollout_is_batch_normalize": True,
                           "rollout_rs": "token_k1,seq_max_k2", "rollout_rs_threshold": "0.5_2.0,2.5"}
    cfg = build(vs.settings)
    assert cfg.rollout_is == "sequence" and cfg.rollout_is_batch_normalize


def test_rollout_thresholds_numbers_become_strings_as_in_verl(tmp_path):
    vs = read_yaml(tmp_path, """
        rollout_correction:
          rollout_is: token
          rollout_is_threshold: 0.5_5.0
          rollout_rs: seq_mean_k3
          rollout_rs_threshold: 0.01
    """)
    assert vs.settings["rollout_is_threshold"] == "0.5_5.0"
    assert vs.settings["rollout_rs_threshold"] == "0.01"


def test_rollout_correction_shipped_defaults(tmp_path):
    vs = read_yaml(tmp_path, """
        rollout_correction:
          rollout_is: null
          rollout_is_threshold: 2.0
          rollout_rs: null
          rollout_rs_threshold: null
          bypass_mode: false
          loss_type: ppo_clip
          rollout_is_batch_normalize: false
    """)
    assert vs.settings == {"rollout_is": None, "rollout_is_threshold": "2.0", "rollout_is_batch_normalize": False,
                           "rollout_rs": None, "rollout_rs_threshold": None}
    assert vs.ignored == ["algorithm.rollout_correction.loss_type"]
    build(vs.settings)


def test_rs_threshold_without_rs_is_unused(tmp_path):
    vs = read_yaml(tmp_path, "rollout_correction:\n  rollout_rs_threshold: 2.0\n")
    assert vs.settings == {}
    assert vs.ignored == ["algorithm.rollout_correction.rollout_rs_threshold"]


def test_rollout_correction_null_means_off(tmp_path):
    assert read_yaml(tmp_path, "rollout_correction: null\n").settings == {}


# ------------------------------------------------------------------------------------------ DAPO overlong


@pytest.mark.parametrize("section", ["reward", "reward_model"])  # [P], [S]
def test_overlong_enabled(tmp_path, section):
    vs = read_yaml(tmp_path, f"""
        {section}:
          reward_manager: dapo
          reward_kwargs:
            overlong_buffer_cfg:
              enable: true
              len: 4
              penalty_factor: 0.5
            max_resp_len: 20
    """)
    assert vs.settings == {"overlong_buffer_len": 4, "overlong_penalty_factor": 0.5, "max_resp_len": 20}
    assert any(f"{section}.reward_kwargs.overlong_buffer_cfg.enable=true" in n for n in vs.notes)


@pytest.mark.parametrize("section", ["reward", "reward_model"])
def test_overlong_disabled(tmp_path, section):
    vs = read_yaml(tmp_path, f"""
        {section}:
          reward_kwargs:
            overlong_buffer_cfg:
              enable: false
              len: 4
              penalty_factor: 1.0
              log: false
            max_resp_len: 20
    """)
    assert vs.settings == {}
    assert f"{section}.reward_kwargs.max_resp_len" in vs.ignored
    assert any("no DAPO overlong penalty" in n for n in vs.notes)


def test_overlong_both_places_agree_p_wins(tmp_path):
    block = ("  reward_kwargs:\n    overlong_buffer_cfg: {enable: true, len: 8, penalty_factor: 1.0}\n"
             "    max_resp_len: 64\n")
    vs = read_yaml(tmp_path, "reward:\n" + block + "reward_model:\n" + block)
    assert vs.settings == {"overlong_buffer_len": 8, "overlong_penalty_factor": 1.0, "max_resp_len": 64}
    assert any("reward_model.reward_kwargs repeats reward.reward_kwargs" in n for n in vs.notes)


def test_overlong_both_places_disagree(tmp_path):
    message = error_of(tmp_path, """
        reward:
          reward_kwargs:
            overlong_buffer_cfg: {enable: true, len: 8, penalty_factor: 1.0}
            max_resp_len: 64
        reward_model:
          reward_kwargs:
            overlong_buffer_cfg: {enable: true, len: 4, penalty_factor: 1.0}
            max_resp_len: 64
    """)
    assert message.startswith("reward_model.reward_kwargs.overlong_buffer_cfg: disagrees with reward.reward_kwargs")


def test_overlong_other_reward_kwargs_ignored(tmp_path):
    vs = read_yaml(tmp_path, """
        reward:
          reward_kwargs:
            reward_fn_key: data_source
    """)
    assert vs.settings == {} and vs.ignored == ["reward.reward_kwargs.reward_fn_key"]


@pytest.mark.parametrize("body, key, words", [
    ("overlong_buffer_cfg: {enable: true, len: 4, penalty_factor: 1.0}",
     "reward.reward_kwargs.max_resp_len", "must be set"),
    ("overlong_buffer_cfg: {enable: true, len: 4, penalty_factor: 1.0}\n    max_resp_len: 3",
     "reward.reward_kwargs.max_resp_len", "smaller than"),
    ("overlong_buffer_cfg: {enable: true, len: 0, penalty_factor: 1.0}\n    max_resp_len: 3",
     "reward.reward_kwargs.overlong_buffer_cfg.len", "> 0"),
    ("overlong_buffer_cfg: {enable: true, len: 4}\n    max_resp_len: 8",
     "reward.reward_kwargs.overlong_buffer_cfg.penalty_factor", "must be set"),
    ("overlong_buffer_cfg: {enable: true, length: 4, penalty_factor: 1.0}\n    max_resp_len: 8",
     "reward.reward_kwargs.overlong_buffer_cfg.length", "did you mean reward.reward_kwargs.overlong_buffer_cfg.len"),
    ("overlong_buffer_cfg: [1, 2]", "reward.reward_kwargs.overlong_buffer_cfg", "must be a mapping"),
])
def test_overlong_errors(tmp_path, body, key, words):
    message = error_of(tmp_path, "reward:\n  reward_kwargs:\n    " + body + "\n")
    assert message.startswith(key + ": ") and words in message


# ------------------------------------------------------------------------------------------ GDPO


def test_gdpo_keys_and_weights(tmp_path):
    vs = read_yaml(tmp_path, """
        algorithm:
          adv_estimator: grpo
          gdpo_reward_keys: [format_reward, accuracy_reward]
          gdpo_reward_weights: [0.5, 1]
    """)
    # the file's estimator is grpo: verl ignores the gdpo keys
    assert "reward_components" not in vs.settings
    assert vs.ignored == ["algorithm.gdpo_reward_keys", "algorithm.gdpo_reward_weights"]
    assert vs.notes == ["algorithm.gdpo_reward_keys is unused: only adv_estimator gdpo reads it (the file says grpo)"]

    vs = read_yaml(tmp_path, """
        algorithm:
          gdpo_reward_keys: [format_reward, accuracy_reward]
          gdpo_reward_weights: [0.5, 1]
    """)
    assert vs.settings == {"reward_components": ["format_reward", "accuracy_reward"], "reward_weights": [0.5, 1.0]}
    from rladv_cli.estimators.registry import ESTIMATORS

    if "gdpo" in ESTIMATORS:
        build(vs.settings, estimator="gdpo")


@pytest.mark.parametrize("body, key, words", [
    ("gdpo_reward_keys: format_reward", "algorithm.gdpo_reward_keys", "non-empty list"),
    ("gdpo_reward_keys: []", "algorithm.gdpo_reward_keys", "non-empty list"),
    ("gdpo_reward_keys: [a, a]", "algorithm.gdpo_reward_keys", "twice"),
    ("gdpo_reward_keys: [a, b]\ngdpo_reward_weights: [1.0]", "algorithm.gdpo_reward_weights", "1 weights for 2"),
    ("gdpo_reward_keys: [a]\ngdpo_reward_weights: [x]", "algorithm.gdpo_reward_weights.0", "must be a finite number"),
])
def test_gdpo_errors(tmp_path, body, key, words):
    message = error_of(tmp_path, body + "\n")
    assert message.startswith(key + ": ") and words in message


# ------------------------------------------------------------------------------------------ interpolation


def test_interpolation_kinds(tmp_path):
    vs = read_yaml(tmp_path, """
        data:
          max_response_length: 256
        knobs:
          lo: 0.5
          hi: 2.0
          lam: ${knobs.lam_base}
          lam_base: 0.9
        algorithm:
          gamma: ${knobs.lam}
          kl_ctrl:
            target_kl: 0.02
            horizon: ${data.max_response_length}
            kl_coef: ${.target_kl}
          use_kl_in_reward: true
          rollout_correction:
            rollout_rs: token_k1
            rollout_rs_threshold: ${knobs.lo}_${knobs.hi}
        reward:
          reward_kwargs:
            overlong_buffer_cfg: {enable: true, len: 16, penalty_factor: 1.0}
            max_resp_len: ${data.max_response_length}
    """)
    assert vs.settings["gamma"] == 0.9  # chained
    assert vs.settings["kl_horizon"] == 256  # typed: stays an int
    assert vs.settings["kl_coef"] == 0.02  # relative ${.x}
    assert vs.settings["rollout_rs_threshold"] == "0.5_2.0"  # embedded in a string
    assert vs.settings["max_resp_len"] == 256


def test_interpolation_in_algorithm_only_file(tmp_path):
    vs = read_yaml(tmp_path, "lam: 0.8\ngamma: ${lam}\n")
    assert vs.settings == {"lam": 0.8, "gamma": 0.8}


def test_unread_sections_may_hold_any_interpolation(tmp_path):
    vs = read_yaml(tmp_path, """
        actor_rollout_ref:
          rollout:
            n: ${oc.select:actor_rollout_ref.rollout.n_resp,1}
            name: ???
            path: ${oc.env:HOME}
        algorithm:
          adv_estimator: grpo
    """)
    assert vs.settings == {"estimator": "grpo"}


@pytest.mark.parametrize("value, words", [
    ("${oc.select:algorithm.lam,1.0}", "cannot resolve '${oc.select:algorithm.lam,1.0}' offline"),
    ("${oc.env:GAMMA}", "cannot resolve"),
    ("${data.nope}", "refers to data.nope, which the file does not set"),
    ("${algorithm.gamma}", "interpolation cycle"),
    ("'???'", "mandatory value"),
    ("'${a.${b}}'", "cannot resolve"),
])
def test_interpolation_errors_name_the_key(tmp_path, value, words):
    message = error_of(tmp_path, f"data: {{}}\nalgorithm:\n  gamma: {value}\n")
    assert message.startswith("algorithm.gamma: ") and words in message


# ------------------------------------------------------------------------------------------ errors


@pytest.mark.parametrize("text, key, suggestion", [
    ("algorithm:\n  adv_estimatr: grpo\n", "algorithm.adv_estimatr", "algorithm.adv_estimator"),
    ("adv_estimatr: grpo\ngamma: 1.0\n", "algorithm.adv_estimatr", "algorithm.adv_estimator"),
    ("algorithm:\n  kl_ctrl:\n    kl_cof: 0.1\n", "algorithm.kl_ctrl.kl_cof", "algorithm.kl_ctrl.kl_coef"),
    ("algorithm:\n  kl_coef: 0.1\n", "algorithm.kl_coef", "algorithm.kl_ctrl.kl_coef"),
    ("algorithm:\n  rollout_is_threshold: 2.0\n", "algorithm.rollout_is_threshold",
     "algorithm.rollout_correction.rollout_is_threshold"),
    ("algorithm:\n  rollout_correction:\n    rollout_rs_treshold: 2.0\n",
     "algorithm.rollout_correction.rollout_rs_treshold", "algorithm.rollout_correction.rollout_rs_threshold"),
    ("algorithm:\n  norm_adv_by_std: false\n", "algorithm.norm_adv_by_std", "algorithm.norm_adv_by_std_in_grpo"),
])
def test_typo_names_the_closest_key(tmp_path, text, key, suggestion):
    message = error_of(tmp_path, text)
    assert message.startswith(f"{key}: not a key verl 0.9.1 defines")
    assert message.endswith(f"did you mean {suggestion}?")


def test_unknown_key_without_a_close_match_lists_the_known_ones(tmp_path):
    message = error_of(tmp_path, "algorithm:\n  kl_ctrl:\n    zzz: 1\n")
    assert message.startswith("algorithm.kl_ctrl.zzz: ") and "known keys: type, kl_coef, horizon, target_kl" in message


def test_bypass_mode_true_is_refused(tmp_path):
    message = error_of(tmp_path, "algorithm:\n  rollout_correction:\n    bypass_mode: true\n")
    assert message.startswith("algorithm.rollout_correction.bypass_mode: true is not supported")


def test_rs_without_threshold(tmp_path):
    for text in ("rollout_correction:\n  rollout_rs: token_k1\n",
                 "rollout_correction:\n  rollout_rs: token_k1\n  rollout_rs_threshold: null\n"):
        message = error_of(tmp_path, text)
        assert message.startswith("algorithm.rollout_correction.rollout_rs_threshold: must be set when rollout_rs")


@pytest.mark.parametrize("text, key, words", [
    ("adv_estimator: grpoo", "algorithm.adv_estimator", "did you mean grpo?"),
    ("adv_estimator: 3", "algorithm.adv_estimator", "non-empty string"),
    ("gamma: 1.5", "algorithm.gamma", "[0, 1]"),
    ("lam: abc", "algorithm.lam", "must be a finite number"),
    ("gamma: true", "algorithm.gamma", "must be a finite number"),
    ("kl_ctrl:\n  kl_coef: .inf", "algorithm.kl_ctrl.kl_coef", "finite number"),
    ("norm_adv_by_std_in_grpo: maybe", "algorithm.norm_adv_by_std_in_grpo", "true or false"),
    ("kl_penalty: full", "algorithm.kl_penalty", "NotImplementedError"),
    ("kl_penalty: kl2", "algorithm.kl_penalty", "not a KL estimate"),
    ("kl_ctrl:\n  type: pid", "algorithm.kl_ctrl.type", "fixed or adaptive"),
    ("kl_ctrl:\n  horizon: 1.5", "algorithm.kl_ctrl.horizon", "integer"),
    ("kl_ctrl: 0.1", "algorithm.kl_ctrl", "must be a mapping"),
    ("use_kl_in_reward: true\nkl_ctrl:\n  type: adaptive\n  horizon: 0", "algorithm.kl_ctrl.horizon", "> 0"),
    ("use_kl_in_reward: true\nkl_ctrl:\n  type: adaptive\n  target_kl: 0", "algorithm.kl_ctrl.target_kl", "not be 0"),
    ("rollout_correction:\n  rollout_is: tokens", "algorithm.rollout_correction.rollout_is", "token, sequence"),
    ("rollout_correction:\n  rollout_is: token\n  rollout_is_threshold: null",
     "algorithm.rollout_correction.rollout_is_threshold", "is null"),
    ("rollout_correction:\n  rollout_rs: tokn_k1\n  rollout_rs_threshold: 2",
     "algorithm.rollout_correction.rollout_rs", "did you mean token_k1?"),
    ("rollout_correction:\n  rollout_rs: token_k1\n  rollout_rs_threshold: true",
     "algorithm.rollout_correction.rollout_rs_threshold", "number or a string"),
    ("rollout_correction: [1]", "algorithm.rollout_correction", "must be a mapping"),
])
def test_bad_values_name_the_key(tmp_path, text, key, words):
    message = error_of(tmp_path, text + "\n")
    assert message.startswith(key + ": ") and words in message


def test_verl_estimator_rladv_lacks(tmp_path):
    from rladv_cli.estimators import registry

    # pretend rladv lacks one of verl's; the registry is put back in its order (monkeypatch.delitem would put the
    # entry back at the end, and the order is what rladv estimators and the docs' tables list)
    saved = dict(registry.ESTIMATORS)
    del registry.ESTIMATORS["gdpo"]
    try:
        assert "gdpo" in REFERENCE_NAMES
        message = error_of(tmp_path, "adv_estimator: gdpo\n")
    finally:
        registry.ESTIMATORS.clear()
        registry.ESTIMATORS.update(saved)
    assert message.startswith("algorithm.adv_estimator: ") and "not implemented by rladv" in message
    assert list(registry.ESTIMATORS) == list(saved)


def test_algorithm_not_a_mapping(tmp_path):
    assert error_of(tmp_path, "algorithm: grpo\n").startswith("algorithm: must be a mapping")


@pytest.mark.parametrize("text, words", [
    ("", "empty"),
    ("# only a comment\n", "empty"),
    ("- adv_estimator: grpo\n", "top level is a list"),
    ("just a string\n", "top level is a string"),
    ("algorithm:\n  gamma: [1.0\n", "not valid YAML"),
    ("algorithm:\n\tgamma: 1.0\n", "not valid YAML"),
    ("algorithm:\n  gamma: 1.0\n  gamma: 0.9\n", "duplicate key 'gamma'"),
])
def test_bad_files(tmp_path, text, words):
    message = error_of(tmp_path, text)
    assert words in message


def test_missing_file(tmp_path):
    path = str(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match=r"nope\.yaml: no such config file"):
        settings_from_verl_yaml(path)


def test_directory_and_binary_file(tmp_path):
    with pytest.raises(ConfigError, match="is a directory"):
        settings_from_verl_yaml(str(tmp_path))
    binary = tmp_path / "cfg.yaml"
    binary.write_bytes(b"\xff\xfe\x00algorithm")
    with pytest.raises(ConfigError, match="not a UTF-8 text file"):
        settings_from_verl_yaml(str(binary))


def test_every_fixture_builds_a_config():
    for path in sorted(DATA.glob("*.yaml")):
        vs = settings_from_verl_yaml(str(path))
        assert isinstance(vs, VerlSettings)
        build(vs.settings)


# ------------------------------------------------------------------------------------ audit: hostile files
def test_a_deeply_nested_file_is_one_error(tmp_path):
    """5000 nested lists used to end in a RecursionError traceback."""
    message = error_of(tmp_path, "algorithm: " + "[" * 5000 + "]" * 5000 + "\n")
    assert "nested too deeply" in message
    message = error_of(tmp_path, "algorithm:\n  pf_ppo: " + "[" * 300 + "]" * 300 + "\n")
    assert "nested" in message


def test_an_integer_python_cannot_convert_is_one_error(tmp_path):
    """An integer of more than 4300 digits used to end in a ValueError traceback."""
    message = error_of(tmp_path, "algorithm:\n  adv_estimator: gae\n  gamma: 1" + "0" * 5000 + "\n")
    assert message.startswith("line 3, column 10: cannot read this number") and "4300" in message


@pytest.mark.parametrize(("body", "key", "words"), [
    ("rollout_rs: token_k1\n  rollout_rs_threshold: abc", "rollout_rs_threshold", ["'abc'", "not a number"]),
    ("rollout_rs: token_k1\n  rollout_rs_threshold: '0.5_1_2'", "rollout_rs_threshold", ["'1_2'", "12.0"]),
    ("rollout_rs: seq_max_k2\n  rollout_rs_threshold: '0.5_2'", "rollout_rs_threshold", ["without '_'"]),
    ("rollout_rs: token_k1,token_k2\n  rollout_rs_threshold: 1,2,3", "rollout_rs_threshold", ["3 entries"]),
    ("rollout_is: token\n  rollout_is_threshold: two", "rollout_is_threshold", ["'two'"]),
    ("rollout_is: token\n  rollout_is_threshold: '3_0.5'", "rollout_is_threshold", ["exceeds"]),
    # YAML (and OmegaConf) read 0.5_2 as the number 0.52 and 2_5 as 25: verl would use those
    ("rollout_is: token\n  rollout_is_threshold: 0.5_2", "rollout_is_threshold", ["0.52", "quote it"]),
    ("rollout_rs: token_k1\n  rollout_rs_threshold: 2_5", "rollout_rs_threshold", ["25", "quote it"]),
])
def test_bad_thresholds_name_the_file_and_key(tmp_path, body, key, words):
    """They were parsed only when the run started, under the flags' names (``--rollout-rs-threshold 'abc'``)."""
    lines = "".join(f"    {line.strip()}\n" for line in body.splitlines())
    message = error_of(tmp_path, "algorithm:\n  rollout_correction:\n" + lines)
    assert message.startswith(f"algorithm.rollout_correction.{key}"), message
    assert "--rollout" not in message
    for word in words:
        assert word in message, message


def test_quoted_bands_and_plain_numbers_still_read(tmp_path):
    vs = read_yaml(tmp_path, """
        rollout_correction:
          rollout_is: token
          rollout_is_threshold: '0.5_2'
          rollout_rs: token_k1,seq_max_k2
          rollout_rs_threshold: 0.5_2.0,1e3
    """)
    assert vs.settings["rollout_is_threshold"] == "0.5_2"
    assert vs.settings["rollout_rs_threshold"] == "0.5_2.0,1e3"
    assert read_yaml(tmp_path, "gamma: 0.9_9\n").settings == {"gamma": 0.99}  # elsewhere '_' is YAML's business
    build(vs.settings)


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path):
    fifo = tmp_path / "cfg.yaml"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match="not a regular file"):
        settings_from_verl_yaml(str(fifo))


def test_a_misspelt_keyword_is_named_as_the_python_caller_wrote_it():
    import pyarrow as pa

    import rladv_cli
    from rladv_cli.errors import ConfigError

    table = pa.table({"response_mask": pa.array([[1]], pa.list_(pa.int8())), "score": [1.0], "uid": ["a"]})
    with pytest.raises(ConfigError, match=r"^kl_coeff: not a setting; did you mean kl_coef\?$"):
        rladv_cli.compute(table, estimator="grpo", kl_coeff=0.1)
    with pytest.raises(ConfigError, match=r"^zzz: not a setting \(rladv_cli.Config's fields are the settings\)$"):
        rladv_cli.Config(estimator="grpo", zzz=1)


def test_config_names_no_estimator():
    """Estimator names live in the registry: no string constant under config/ is one (its messages name
    estimators through the registry's declarations)."""
    import ast

    import rladv_cli.config
    from rladv_cli.estimators.registry import ESTIMATORS

    names = {*ESTIMATORS, *REFERENCE_NAMES}
    found = [
        (path.name, node.lineno, node.value)
        for path in sorted(Path(rladv_cli.config.__file__).parent.glob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Constant) and node.value in names
    ]
    assert found == []
