"""The documentation's commands work as written: every ``rladv ...`` example in README.md and docs/*.md parses
with the command line as it is (its options exist, its values are of the option's type and choice), each synopsis
in a table of the README too, with its metavariables filled in, and every example that runs on sample_data/ runs
(exit 0) from a copy of it. README's tour is checked line by line against its output in test_readme.py."""
from __future__ import annotations

import re
import shlex
import shutil

import pytest
import typer.main
from conftest import ROOT, rladv

from rladv_cli.cli import app

GROUP = typer.main.get_command(app)
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SYNOPSIS = re.compile(r"\.\.\.|\[|\]|\|")  # DATASET..., [options], a|b: a form, not a command


def _examples() -> list[tuple[str, str]]:
    """(file, command) for each example command line in a code block (continued lines joined, the shell's
    redirections and comments cut)."""
    found = []
    for path in DOCS:
        for kind, block in re.findall(r"```(bash|console|sh|)\n(.*?)```", path.read_text(), re.S):
            lines = block.replace("\\\n", " ").splitlines()
            if kind == "console":  # a command after its prompt, then what it prints
                lines = [line[2:] for line in lines if line.startswith("$ ")]
            for line in lines:
                line = line.strip()
                line = re.split(r"\s+(?:#|>|\|\|)\s", line)[0]  # a comment, a redirection, a shell fallback
                try:
                    words = shlex.split(line)
                except ValueError:
                    continue
                if len(words) >= 2 and words[0] == "rladv" and (words[1] in GROUP.commands or words[1].startswith("-")) \
                        and not SYNOPSIS.search(" ".join(words[2:]).replace("--where", "")):
                    found.append((path.name, line))
    return found


EXAMPLES = _examples()


def test_the_docs_hold_examples_of_every_command():
    assert {shlex.split(c)[1] for _, c in EXAMPLES} >= set(GROUP.commands)


@pytest.mark.parametrize("doc, command", EXAMPLES, ids=[f"{d}:{c[:60]}" for d, c in EXAMPLES])
def test_every_documented_command_parses(doc, command):
    """The command line reads every option and value (paths are not looked at): a renamed flag, a removed
    choice or a value of the wrong type in the docs fails here."""
    words = shlex.split(command)[1:]
    if words[0].startswith("-"):  # rladv --version, --install-completion
        GROUP.make_context("rladv", list(words))
        return
    command_ = GROUP.commands[words[0]]
    command_.make_context(words[0], words[1:])


def _table_forms() -> list[str]:
    """The README's Commands table: each command's form, its metavariables given values."""
    readme = (ROOT / "README.md").read_text()
    fill = {"DATASET...": "sample_data/multiturn.parquet", "NAME": "grpo", "OPT": "token_k1", "T1,T2": "1.5,2.0",
            "N": "3", "UID": "prompt-0005", "FORMAT": "verl-jsonl", "SRC...": "sample_data/logs/verl-jsonl",
            "OUT.parquet": "out.parquet", "SAVED_BATCH": "step.pt"}
    forms = []
    for form in re.findall(r"^\| `(rladv [^`]+)` \|", readme, re.M):
        words = [fill.get(w, w) for w in shlex.split(form)]
        forms.append(" ".join(shlex.quote(w) for w in words))
    return forms


@pytest.mark.parametrize("form", _table_forms())
def test_the_readme_table_forms_parse(form):
    words = shlex.split(form)[1:]
    GROUP.commands[words[0]].make_context(words[0], words[1:])


RUNNABLE = [(d, c) for d, c in EXAMPLES if "sample_data/" in c]


@pytest.mark.slow  # a run each
@pytest.mark.parametrize("doc, command", RUNNABLE, ids=[f"{d}:{c[:60]}" for d, c in RUNNABLE])
def test_every_documented_command_on_the_sample_data_runs(doc, command, tmp_path, monkeypatch):
    """From a folder holding a copy of sample_data/, outputs under /tmp/ and in the folder redirected into it."""
    shutil.copytree(ROOT / "sample_data", tmp_path / "sample_data")
    monkeypatch.chdir(tmp_path)
    args = [a.replace("/tmp/", f"{tmp_path}/out-") for a in shlex.split(command)[1:]]
    res = rladv(*args, env={"COLUMNS": "80"})
    assert res.exit_code == 0, f"{doc}: {command}\n{res.output}"


def test_the_readme_offpolicy_form_runs(tmp_path, monkeypatch):
    """The form the README's table gives, filled in, runs (it once lacked the thresholds offpolicy needs)."""
    form = next(f for f in _table_forms() if f.startswith("rladv offpolicy"))
    monkeypatch.chdir(ROOT)
    res = rladv(*shlex.split(form)[1:])
    assert res.exit_code == 0, res.output


def _tables(text: str) -> list[list[str]]:
    """The Markdown tables of ``text`` outside code blocks, each as its lines."""
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    tables, current = [], []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            current.append(line)
        elif current:
            tables, current = tables + [current], []
    return tables


@pytest.mark.parametrize("path", DOCS, ids=[p.name for p in DOCS])
def test_every_table_row_has_the_headers_cells(path):
    """A row with one cell too many or too few renders broken (an unescaped | inside a cell, a cell lost)."""
    for table in _tables(path.read_text()):
        widths = [len(re.split(r"(?<!\\)\|", line.strip().strip("|"))) for line in table]
        assert len(table) >= 2 and re.fullmatch(r"\|[\s:|-]+\|", table[1].strip()), table[:2]
        bad = [line for line, w in zip(table, widths) if w != widths[0]]
        assert not bad, f"{path.name}: {len(bad)} row(s) of another width than {table[0][:60]}: {bad[0][:120]}"
