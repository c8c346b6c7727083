"""The estimator registry (``rladv_cli.estimators.registry.ESTIMATORS``) is the one list of estimators: each one
registered there has an oracle, golden cases, a derivation and its documentation, each failing test names the
estimator that lacks one; no module outside ``rladv_cli/estimators/`` spells an estimator's name; and the
registry's vocabularies are the code's."""
from __future__ import annotations

import ast
import json
from collections import Counter
from dataclasses import fields

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import reference as ref
from conftest import GOLDEN, ROOT, binary_scores, case_estimator, golden_cases, rladv
from rladv_cli.config.settings import Params
from rladv_cli.estimators.registry import ESTIMATORS, GROUP_STATISTICS, INPUTS

NAMES = list(ESTIMATORS)
MIX = GOLDEN / "inputs" / "mix.parquet"
PACKAGE = ROOT / "rladv_cli"


def _golden_marks(name: str) -> list:
    """An estimator of per-row reward components has no golden case: verl 0.9.1's V1 trainer, which made
    tests/golden, does not feed it its inputs (docs/semantics.md, the trainers' table: "the V1 data path lacks
    its inputs"). Strict: a golden case of one makes the test pass, and this mark must go."""
    if not ESTIMATORS[name].components:
        return []
    return [pytest.mark.xfail(strict=True, reason=f"{name} reads reward components, which verl's V1 trainer that "
                              "made tests/golden does not feed; docs/semantics.md §7.13's worked example "
                              "(tests/estimators/test_examples.py) and tests/against_verl/ cover it instead")]


@pytest.mark.parametrize("name", NAMES)
def test_every_estimator_has_an_oracle(name):
    assert callable(ref.ORACLE.get(name)), f"{name}: tests/reference.py's ORACLE has no oracle for it"


def test_the_oracle_knows_only_registered_estimators():
    assert set(ref.ORACLE) <= set(ESTIMATORS), f"not registered: {sorted(set(ref.ORACLE) - set(ESTIMATORS))}"


@pytest.mark.parametrize("name", [pytest.param(name, marks=_golden_marks(name)) for name in NAMES])
def test_every_estimator_has_a_golden_case(name):
    covered = {case_estimator(case) for case in golden_cases().values()}
    assert name in covered, f"{name}: tests/golden/cases.json has no case of it"


def _row_in_a_group(table: pa.Table, size: int) -> int:
    """The first row whose uid group has at least ``size`` rows."""
    uids = table["uid"].to_pylist()
    counts = Counter(uids)
    return next(i for i, u in enumerate(uids) if counts[u] >= size)


@pytest.mark.parametrize("name", NAMES)
def test_every_estimator_explains_a_row(name, tmp_path):
    """``rladv explain --row N --estimator NAME --json`` on the golden mix data; an estimator of reward
    components reads one more column (as tests/diagnose/test_explain.py gives it), a group estimator a row of
    a group as large as it requires, one of binary rewards 0/1 scores."""
    e = ESTIMATORS[name]
    table = pq.read_table(MIX)
    path, extra = MIX, []
    if e.binary_rewards:
        table, path = binary_scores(table), tmp_path / "mix.parquet"
        pq.write_table(table, path)
    if e.components:
        rng = np.random.default_rng(1)
        table = table.append_column("c1", pa.array(rng.choice([0.0, 0.5, 1.0], table.num_rows)))
        path, extra = tmp_path / "mix.parquet", ["--reward-components", "c1"]
        pq.write_table(table, path)
    row = _row_in_a_group(table, max(2, e.min_group(Params())))
    result = rladv("explain", path, "--row", row, "--estimator", name, "--json", *extra)
    assert result.exit_code == 0, f"{name}: rladv explain failed:\n{result.output}"
    shown = json.loads(result.stdout)
    assert shown["estimator"] == name and len(shown["advantages"]) > 0, name


@pytest.mark.parametrize("name", NAMES)
def test_every_estimator_is_documented(name):
    """docs/semantics.md has a §7 section headed by its name, and docs/contract.md's ``--estimator`` row names it."""
    semantics = (ROOT / "docs" / "semantics.md").read_text().splitlines()
    headed = [line.split()[2:] for line in semantics if line.startswith("### 7.")]  # ### 7.12 a and b
    assert any(name in words for words in headed), f"{name}: no section of docs/semantics.md §7"
    contract = (ROOT / "docs" / "contract.md").read_text().splitlines()
    row = next((line for line in contract if line.startswith("| `--estimator NAME` |")), "")
    assert f"`{name}`" in row, f"{name}: docs/contract.md's `--estimator` row does not name it"


def _spelled_names() -> list[str]:
    """``path:line: 'name'`` for each string literal outside rladv_cli/estimators/ that is an estimator's name
    (rladv_cli/loss/modes.py is the registry of the trainers' loss modes, whose names are the trainers' own:
    TRL's loss_type ``grpo`` is not the estimator)."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.relative_to(PACKAGE).parts[0] == "estimators" or path.relative_to(PACKAGE).parts == ("loss", "modes.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in ESTIMATORS:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value!r}")
    return found


def test_no_module_outside_the_estimators_spells_an_estimator_name():
    """Estimator names live in rladv_cli/estimators/; elsewhere the code asks the registry (its declarations,
    ``names_where``, ``with_check``), so a new estimator needs no edit outside its package."""
    assert _spelled_names() == []


def test_the_registry_group_statistics_are_the_ones_tensors_computes():
    from rladv_cli.tensors.groups import STATISTICS

    assert GROUP_STATISTICS == STATISTICS


def test_the_registry_inputs_are_the_fields_of_inputs():
    from rladv_cli.estimators.inputs import Inputs

    assert INPUTS == tuple(f.name for f in fields(Inputs))
