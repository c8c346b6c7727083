"""`rladv explain`: the derivation of one row, checked on docs/semantics.md's worked examples."""

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import GOLDEN, SAMPLES, binary_scores, runner, write
from rladv_cli.cli import app
from rladv_cli.diagnose.explain import explain
from rladv_cli.errors import ConfigError


def column(e, name):
    i = e.columns.index(name)
    return [row[i] for row in e.tokens]


def test_gae_derivation_is_the_chapter_example(tmp_path):
    path = write(tmp_path / "d.parquet", response_mask=[[1, 1, 1]], rm_scores=[[0, 0, 1]], values=[[0.2, 0.3, 0.4]])
    e = explain([path], 0, "gae", gamma=1.0, lam=0.95)
    np.testing.assert_allclose(column(e, "delta"), [0.1, 0.1, 0.6], atol=1e-6)
    np.testing.assert_allclose(column(e, "running A"), [0.7365, 0.67, 0.6], atol=1e-6)
    np.testing.assert_allclose(column(e, "return"), [0.9365, 0.97, 1.0], atol=1e-6)
    np.testing.assert_allclose(e.advantages, [0.9913445, 0.0170926, -1.0084344], atol=1e-6)
    assert e.constants["batch tokens"] == 3


def test_reinforce_plus_plus_marks_the_return_each_mode_cuts_or_passes_on(tmp_path):
    """m = [1, 0, 1, 0], r = [0, 0, 1, 1]: the return 1 of t = 2 meets the mask-0 t = 1 with an actor token
    before it (the row credit_cut_rows names); the reward on t = 3 is dropped by both modes."""
    path = write(tmp_path / "d.parquet", response_mask=[[1, 0, 1, 0]], rm_scores=[[0, 0, 1, 1]])
    carry = column(explain([path], 0, "reinforce_plus_plus"), "mask-0 point")
    assert carry == ["", "carry: return 1 passed on", "", "carry; its reward 1 dropped"]
    reset = column(explain([path], 0, "reinforce_plus_plus", rpp_mask_mode="reset"), "mask-0 point")
    assert reset == ["", "reset: return 1 cut", "", "reset; its reward 1 dropped"]
    first = write(tmp_path / "e.parquet", response_mask=[[0, 1, 1]], rm_scores=[[0, 0, 1]])  # no actor token before
    assert column(explain([first], 0, "reinforce_plus_plus", rpp_mask_mode="reset"), "mask-0 point") == ["reset", "", ""]


def test_group_estimators_explain_through_the_group(tmp_path):
    path = write(tmp_path / "d.parquet", uid=["a", "a", "a"], response_mask=[[1], [1], [1]],
                 rm_scores=[[1.0], [0.0], [0.5]])
    e = explain([path], 0, "grpo")
    assert e.group is not None and len(e.group.members) == 3
    assert e.advantages == pytest.approx([0.999998], abs=1e-6)
    with pytest.raises(ConfigError, match="--row 5"):
        explain([path], 5, "grpo")


def test_the_inputs_own_advantages_stand_beside_the_derivation(tmp_path):
    """A replay's differing row, drilled into: the file's advantages (a trainer dump) next to rladv's."""
    path = write(tmp_path / "d.parquet", response_mask=[[1, 1, 1]], rm_scores=[[0, 0, 1]], values=[[0.2, 0.3, 0.4]],
                 advantages=[[0.5, 0.25, -0.75]])
    e = explain([path], 0, "gae", gamma=1.0, lam=0.95)
    assert e.columns[-1] == "input's advantage" and column(e, "input's advantage") == [0.5, 0.25, -0.75]
    np.testing.assert_allclose(e.advantages, [0.9913445, 0.0170926, -1.0084344], atol=1e-6)  # still rladv's
    group = write(tmp_path / "d.parquet", uid=["a", "a"], response_mask=[[1], [1]], rm_scores=[[1.0], [0.0]],
                  advantages=[[2.0], [-2.0]])
    res = runner.invoke(app, ["explain", str(group), "--estimator", "grpo", "--row", "1"])
    assert res.exit_code == 0 and "the input's advantage on those tokens: -2" in res.stdout
    # with the run's options: Dr.GRPO's advantage is R - mean
    res = runner.invoke(app, ["explain", str(group), "--estimator", "grpo", "--row", "1", "--no-norm-adv-by-std"])
    assert res.exit_code == 0 and "row 1: advantage -0.5 on its actor tokens" in res.stdout
    plain = write(tmp_path / "d.parquet", response_mask=[[1, 1]], rm_scores=[[0, 1.0]], values=[[0.0, 0.5]])
    assert explain([plain], 0, "gae").input_advantages is None


def test_explain_runs_on_the_cpu_where_a_gpu_is_present(tmp_path, monkeypatch):
    """The derivation beside the advantages is verl's loop as the CPU rounds it, so explain computes there
    even where ``--device auto`` would pick a GPU (here a pretended one: using it would fail)."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    path = write(tmp_path / "d.parquet", response_mask=[[1, 1, 1]], rm_scores=[[0, 0, 1]], values=[[0.2, 0.3, 0.4]])
    e = explain([path], 0, "gae", gamma=1.0, lam=0.95)
    np.testing.assert_allclose(e.advantages, [0.9913445, 0.0170926, -1.0084344], atol=1e-6)


@pytest.mark.slow  # over 2 s: explain on every third row
@pytest.mark.parametrize("batch_key", [None, "step"])
def test_a_rows_numbers_are_the_whole_runs_to_the_bit(tmp_path, batch_key):
    """explain and inspect compute a group (or a row) on its own; its row totals are still summed padded to
    the batch's longest response in the whole dataset, so near-tied groups (where an ulp of a total moves the
    advantage by ~1e-4) give the run's numbers exactly."""
    import rladv_cli
    from rladv_cli.diagnose.views import group_view

    sample = pq.read_table(SAMPLES / "multiturn.parquet")
    path = tmp_path / "mt.parquet"
    pq.write_table(sample.append_column("step", pa.array([i % 2 for i in range(sample.num_rows)])), path)
    settings = dict(kl_coef=0.01, kl_penalty="k3", batch_key=batch_key)
    out, _ = rladv_cli.compute(pq.read_table(path), estimator="grpo", **settings)
    for row in range(0, out.num_rows, 3):
        assert explain([path], row, "grpo", **settings).advantages == out["advantages"][row].as_py(), row
    uid = out["uid"][11].as_py()
    view = group_view([path], uid, estimator="grpo", **settings)
    members = {(m.path, m.row): m for m in view.members}
    for row in map(int, np.flatnonzero(np.array(out["uid"].to_pylist()) == uid)):
        first = out["response_mask"][row].as_py().index(1)
        assert members[(str(path), row)].advantage == pytest.approx(out["advantages"][row].as_py()[first], rel=0, abs=0)


@pytest.mark.parametrize("name", sorted(__import__("rladv_cli").ESTIMATORS))
def test_an_estimator_reads_exactly_the_settings_it_declares(name):
    """Estimator.settings decides which flags are refused as inert and left out of printed command lines: each
    declared setting changes the estimator's numbers on the golden mix data, and every other one does not."""
    import rladv_cli
    from rladv_cli.estimators.registry import ESTIMATOR_SETTINGS, ESTIMATORS

    table = pq.read_table(GOLDEN / "inputs" / "mix.parquet")
    if ESTIMATORS[name].binary_rewards:
        table = binary_scores(table)
    rng = np.random.default_rng(1)
    table = table.append_column("c1", pa.array(rng.choice([0.0, 0.5, 1.0], table.num_rows)))
    extra = {"reward_components": ("c1",)} if ESTIMATORS[name].components else {}
    other = {"gamma": 0.9, "lam": 0.8, "norm_adv_by_std": False, "epsilon": 0.5, "rpp_mask_mode": "reset"}
    other.update(mean_level="batch", std_level="batch", k=3, vapo_alpha=0.01, value_lam=0.9, scale_rewards="batch",
                 leave_one_out=False)
    base, _ = rladv_cli.compute(table, estimator=name, **extra)
    for setting in ESTIMATOR_SETTINGS:
        changed, _ = rladv_cli.compute(table, estimator=name, **extra, **{setting: other[setting]})
        same = changed["advantages"].equals(base["advantages"]) and changed["returns"].equals(base["returns"])
        assert same == (setting not in ESTIMATORS[name].settings), setting
