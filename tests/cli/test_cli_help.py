"""``rladv --help`` and each command's: the commands, and compute's settings in the same panels wherever a command
takes them."""
from __future__ import annotations

import subprocess

import pytest

from conftest import rladv_command, runner
from rladv_cli.cli import app


@pytest.mark.parametrize("command", ["compute", "explain", "inspect"])
def test_help_groups_the_settings_in_panels(command):
    """Each command that computes shows compute's settings in the same panels, --estimator as NAME."""
    r = runner.invoke(app, [command, "--help"], env={"COLUMNS": "120"}, terminal_width=120)
    assert r.exit_code == 0, r.output
    panels = ["Estimator settings", "Reward shaping", "Rollout correction"]
    places = [r.output.find(p) for p in panels]
    assert -1 not in places and places == sorted(places), places
    assert "--rollout-rs-threshold" in r.output[places[2]:] and "--kl-coef" in r.output[places[1]:places[2]]
    assert "--estimator" in r.output and "gae|grpo|" not in r.output


def test_help_subprocess():
    p = subprocess.run(rladv_command() + ["--help"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "compute" in p.stdout and "validate" in p.stdout and "estimators" in p.stdout
    assert "Traceback" not in p.stderr
