"""The README documents what exists: its two set-up commands, every command (each option in the doc its row
links to), the tour's commands with the output it shows, and docs/python-api.md's example runs."""
from __future__ import annotations

import re
import shlex

import pytest
import typer.main
from conftest import ROOT, rladv

from rladv_cli.cli import app

README = (ROOT / "README.md").read_text()
GROUP = typer.main.get_command(app)
TOUR = [(block.splitlines()[0][2:], block.splitlines()[1:])
        for block in re.findall(r"```console\n(.*?)```", README, re.S)]


def test_readme_opens_with_the_two_setup_commands_and_ci_runs_the_second():
    first_block = re.search(r"```bash\n(.*?)```", README, re.S).group(1).strip().splitlines()
    assert len(first_block) == 2
    assert first_block[0].startswith("bash .ci/install && .venv/bin/rladv compute --estimator grpo sample_data/")
    assert first_block[1] == "bash .ci/run"
    ci = (ROOT / ".ci" / "run").read_text()
    assert "bash .ci/install" in ci and ".venv/bin/python -m pytest -q" in ci


@pytest.mark.parametrize("name", list(GROUP.commands))
def test_every_command_has_a_row_and_its_options_are_in_the_doc_it_links(name):
    """inspect, explain and offpolicy take compute's settings, which docs/compute.md describes."""
    row = re.search(rf"^\| `rladv {name}\b[^|]*\|[^|]*\| \[docs/([\w.-]+)\]", README, re.M)
    assert row, f"README's Commands table has no row for rladv {name} with a link to its doc"
    docs = (ROOT / "docs" / row.group(1)).read_text() + (ROOT / "docs" / "compute.md").read_text()
    for param in GROUP.commands[name].params:
        if getattr(param, "param_type_name", "") == "option":
            assert any(opt in docs for opt in param.opts), f"{name} {param.opts}: not in docs/{row.group(1)}"


def _matches_in_order(shown: list[str], printed: list[str]) -> bool:
    """Whether the README's lines appear in the printed ones in order: consecutive runs of lines consecutively,
    a `...` line standing for any number of lines."""
    runs, run = [], []
    for line in shown:
        if line == "...":
            runs, run = runs + [run], []
        else:
            run.append(line.rstrip())
    runs.append(run)
    at = 0
    for run in filter(None, runs):
        found = next((i for i in range(at, len(printed) - len(run) + 1) if printed[i:i + len(run)] == run), None)
        if found is None:
            return False
        at = found + len(run)
    return True


def test_the_tour_has_its_five_commands():
    assert [shlex.split(command)[:2] for command, _ in TOUR] == [
        ["rladv", "compute"], ["rladv", "inspect"], ["rladv", "explain"], ["rladv", "compute"], ["rladv", "compare"]]


@pytest.mark.parametrize("command, shown", TOUR, ids=[c.split()[1] + str(i) for i, (c, _) in enumerate(TOUR)])
def test_the_tour_prints_what_the_readme_shows(command, shown, tmp_path, monkeypatch):
    """Each ``$ rladv ...`` line of the tour, run at 80 columns from the repository root; outputs go to a
    temporary folder instead of /tmp, so a line naming an output path is checked for the file's name only."""
    monkeypatch.chdir(ROOT)
    args = [arg.replace("/tmp/", f"{tmp_path}/") for arg in shlex.split(command)[1:]]
    res = rladv(*args, env={"COLUMNS": "80"})
    assert res.exit_code == 0, res.output
    printed = [line.rstrip() for line in res.stdout.splitlines()]
    paths = [line for line in shown if "/tmp/" in line]
    assert _matches_in_order([line for line in shown if line not in paths], printed), res.stdout
    for line in paths:
        assert line.strip().replace("/tmp/", "") in "".join(printed)
    for arg in args:
        if arg.startswith(str(tmp_path)):
            assert (tmp_path / arg[len(str(tmp_path)) + 1:]).exists(), arg


def test_the_python_example_runs(tmp_path, monkeypatch):
    doc = (ROOT / "docs" / "python-api.md").read_text()
    code = re.search(r"## Example\n.*?```python\n(.*?)```", doc, re.S).group(1)
    written = sorted(set(re.findall(r'"(/tmp/[\w.]+)"', code)))
    assert written, "the example writes its outputs under /tmp"
    for path in written:
        code = code.replace(path, str(tmp_path / path[len("/tmp/"):]))
    monkeypatch.chdir(ROOT)
    exec(compile(code, "docs/python-api.md", "exec"), {})
    assert all((tmp_path / path[len("/tmp/"):]).exists() for path in written)


def test_the_polars_pipeline_runs_and_finds_the_always_solved_prompts(monkeypatch, capsys):
    """The README's Python block, run from the repository root: a lazy scan in, the group query out."""
    code = re.search(r"## In a polars pipeline\n.*?```python\n(.*?)```", README, re.S).group(1)
    monkeypatch.chdir(ROOT)
    scope: dict = {}
    exec(compile(code, "README.md", "exec"), scope)
    assert type(scope["out"]).__name__ == "DataFrame" and scope["out"].height == 33
    solved = scope["groups"].filter(scope["pl"].col("cause") == "all_top")
    assert solved.height >= 1 and (solved["score_mean"] == 1.0).all()
    assert scope["report"].verdict.headline in capsys.readouterr().out
