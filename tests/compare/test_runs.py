"""Run specifications (``rladv_cli.compare.runs``): names, output columns, and the options parsed by ``rladv
compute``'s own parameters, every shared setting (``SHARED_SETTINGS``) included."""
from __future__ import annotations

import typing
from pathlib import Path

import pytest
import typer.main

from rladv_cli.cli import app
from rladv_cli.cli.options import SHARED_SETTINGS, setting_option
from rladv_cli.compare.runs import RunSpec, distinct, parse_spec, parse_specs, run_context
from rladv_cli.errors import ConfigError

COMPUTE = typer.main.get_command(app).commands["compute"]
SETTINGS = {"estimator", "config", *SHARED_SETTINGS}


def test_a_spec_is_a_name_a_colon_and_shell_words():
    spec = parse_spec("  dr grpo : --estimator grpo --where \"step >= 3 AND note = 'a: b'\" ")
    assert spec == RunSpec("dr grpo", ("--estimator", "grpo", "--where", "step >= 3 AND note = 'a: b'"))
    assert (spec.slug, spec.column) == ("dr_grpo", "advantages__dr_grpo")
    assert RunSpec("Verl-GRPO (v2)!", ()).slug == "verl_grpo_v2"
    assert parse_spec("a:").args == ()


@pytest.mark.parametrize("text, says", [
    ("--estimator grpo", "write NAME: OPTIONS"),
    (": --estimator grpo", "write NAME: OPTIONS"),
    ("a: --where 'step > 1", "do not split into words"),
])
def test_a_malformed_spec_is_one_config_error(text, says):
    with pytest.raises(ConfigError, match=says):
        parse_spec(text)


def test_runs_need_two_distinct_names_and_columns():
    with pytest.raises(ConfigError, match="at least two runs, got 1"):
        parse_specs(["a: --estimator grpo"])
    with pytest.raises(ConfigError, match="'a' is given twice"):
        parse_specs(["a: --estimator grpo", "a: --estimator rloo"])
    with pytest.raises(ConfigError, match="'a b' and 'A-B' would both write the column advantages__a_b"):
        parse_specs(["a b: --estimator grpo", "A-B: --estimator rloo"])
    with pytest.raises(ConfigError, match="needs an ASCII letter or digit"):
        distinct([RunSpec("ü", ()), RunSpec("b", ())])
    assert [s.name for s in parse_specs(["a: x", "b: y"])] == ["a", "b"]


def typed(ctx) -> dict:
    return {name: value for name, value in ctx.params.items()
            if getattr(ctx.get_parameter_source(name), "name", "") == "COMMANDLINE"}


def test_the_options_are_parsed_by_computes_parameters():
    ctx = run_context(parse_spec("x: --estimator grpo --no-norm-adv-by-std --kl-coef 0.1 --column uid=prompt"),
                      COMPUTE, SETTINGS)
    assert typed(ctx) == {"estimator": "grpo", "norm_adv_by_std": False, "kl_coef": 0.1, "columns": ["uid=prompt"]}
    assert ctx.params["gamma"] == 1.0  # the defaults are there, as compute's own context holds them


def sample_words(name: str) -> list[str]:
    """Words that give setting ``name`` a value its option's type takes (``setting_option``): a flag alone, else
    its default or, for a default of None, a value of its type."""
    option, default = setting_option(name)
    param = next(p for p in COMPUTE.params if p.name == name)
    flag = next(o for o in param.opts if o.startswith("--"))
    if param.is_flag:
        return [flag]
    if default is not None:
        return [flag, str(default)]
    kind = next(t for t in typing.get_args(typing.get_args(option)[0]) if t is not type(None))
    if typing.get_origin(kind) is typing.Literal:
        return [flag, typing.get_args(kind)[0]]
    return [flag, {int: "4", float: "0.5", str: "x"}.get(kind, "uid=uid")]


@pytest.mark.parametrize("name", SHARED_SETTINGS)
def test_every_setting_compute_takes_is_taken_in_a_run(name):
    """Whatever ``SHARED_SETTINGS`` holds (a setting added to ``Config`` with a ``Flag`` comes with it): a run
    parses it."""
    ctx = run_context(RunSpec("r", tuple(sample_words(name))), COMPUTE, SETTINGS)
    assert list(typed(ctx)) == [name]


def test_estimator_and_config_are_taken_in_a_run():
    ctx = run_context(RunSpec("r", ("--estimator", "gae", "--config", "c.yaml")), COMPUTE, SETTINGS)
    assert typed(ctx) == {"estimator": "gae", "config": Path("c.yaml")}


@pytest.mark.parametrize("words, says", [
    (["--device", "cpu"], "--device changes how a run goes, never its numbers; give it to rladv compare itself"),
    (["--chunk-rows", "8"], "--chunk-rows changes how a run goes"),
    (["--threads", "2"], "--threads changes how a run goes"),
    (["--html", "r.html"], "--html is not a setting of the numbers"),
    (["-o", "out.parquet"], "--output is not a setting of the numbers"),
    (["--engine", "ray"], "--engine is not a setting of the numbers"),
    (["--strict-replay"], "--strict-replay is not a setting"),
    (["--no-such-option"], "No such option: --no-such-option"),
    (["--gamma", "abc"], "Invalid value for '--gamma'"),
    (["--estimator", "grpo", "stray"], "unexpected extra argument(s) (stray)"),
    (["--help"], "No such option: --help"),
])
def test_what_a_run_refuses_is_one_config_error_naming_the_run(words, says):
    with pytest.raises(ConfigError) as err:
        run_context(RunSpec("my run", tuple(words)), COMPUTE, SETTINGS)
    assert str(err.value).startswith("run 'my run': ") and says in str(err.value), str(err.value)
    assert "\n" not in str(err.value)
