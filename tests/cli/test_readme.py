"""The README documents what exists: set-up commands, every command and option, a Python example that runs."""
import re

import typer.main

from conftest import ROOT
from rladv_cli.cli import app

README = (ROOT / "README.md").read_text()


def test_readme_opens_with_the_two_setup_commands_and_ci_runs_the_second():
    first_block = re.search(r"```bash\n(.*?)```", README, re.S).group(1).strip().splitlines()
    assert first_block[0].startswith("bash .ci/install && .venv/bin/rladv compute --estimator grpo sample_data/")
    assert first_block[1] == "bash .ci/run"
    ci = (ROOT / ".ci" / "run").read_text()
    assert "bash .ci/install" in ci and ".venv/bin/python -m pytest -q" in ci


def test_every_command_and_option_is_in_the_readme():
    group = typer.main.get_command(app)
    for name, command in group.commands.items():
        assert f"rladv {name}" in README, f"command {name} missing from README"
        for param in command.params:
            if getattr(param, "param_type_name", "") == "option":
                assert any(opt in README for opt in param.opts), f"{name} {param.opts} missing from README"


def test_python_example_runs(tmp_path, monkeypatch):
    code = re.search(r"## Python API\n.*?```python\n(.*?)```", README, re.S).group(1)
    code = code.replace("/tmp/mt.adv.parquet", str(tmp_path / "mt.adv.parquet"))
    code = code.replace("/tmp/step_0.parquet", str(tmp_path / "step_0.parquet"))
    monkeypatch.chdir(ROOT)
    exec(compile(code, "README.md", "exec"), {})
    assert (tmp_path / "mt.adv.parquet").exists() and (tmp_path / "step_0.parquet").exists()
