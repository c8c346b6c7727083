"""``rladv inspect`` on the command line (docs/contract.md §5): the checklist's JSON and ``--fail-on``, the row and group
views with every setting compute takes, and ``--export``'s reproducer (the checklist itself:
tests/diagnose/test_inspect.py)."""
from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import assert_one_line_error, copy_sample, read, rladv, write


def test_inspect_json_is_contract_section_5_and_strict_fails_on_a_failing_check(tmp_path):
    inp = copy_sample(tmp_path, "groups.parquet")
    result = rladv("inspect", inp, "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert {"rows", "tokens", "groups", "columns", "checks"} <= set(data)
    codes = {c["code"]: c["status"] for c in data["checks"]}
    assert codes["singleton_group"] == "warn" and codes["all_equal_group"] == "warn"
    bad = tmp_path / "adv.parquet"
    t = read(inp)
    advantages = pa.array([[1.0] * len(m) for m in t["response_mask"].to_pylist()], pa.list_(pa.float32()))
    masks = pa.array([[0] + m[1:] for m in t["response_mask"].to_pylist()], pa.list_(pa.int8()))
    pq.write_table(t.set_column(t.schema.get_field_index("response_mask"), "response_mask", masks)
                   .append_column("advantages", advantages), bad)
    assert rladv("inspect", bad).exit_code == 0
    result = rladv("inspect", bad, "--fail-on", "fail", "--json")
    assert result.exit_code == 1
    assert {c["code"]: c["status"] for c in json.loads(result.stdout)["checks"]}["advantage_on_masked_position"] == "fail"


def test_inspect_row_and_group_views(tmp_path):
    inp = copy_sample(tmp_path, "multiturn.parquet")
    result = rladv("inspect", inp, "--row", "3", "--estimator", "gae")
    assert result.exit_code == 0, result.output
    uid = read(inp)["uid"][0].as_py()
    result = rladv("inspect", inp, "--uid", uid, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["uid"] == uid
    assert_one_line_error(rladv("inspect", tmp_path / "missing.parquet"), "missing.parquet")


# -------------------------------------------------------------------------------------------------------- --export
def test_inspect_export_writes_a_reproducer_that_reproduces(tmp_path, monkeypatch):
    inp = copy_sample(tmp_path, "multiturn.parquet")
    out_dir = tmp_path / "new" / "repro"  # created, with its parent
    uid = read(inp)["uid"][5].as_py()
    result = rladv("inspect", inp, "--uid", uid, "--export", out_dir, "--estimator", "rloo", "--kl-coef", "0.05")
    assert result.exit_code == 0, result.output
    command = (out_dir / "command.txt").read_text().splitlines()[0].split()
    assert command[:3] == ["rladv", "compute", "group.parquet"]
    moved = tmp_path / "moved"
    out_dir.rename(moved)  # the paths are relative to the folder: it can travel
    monkeypatch.chdir(moved)
    assert rladv(*command[1:], "-q").exit_code == 0
    out_dir = moved
    full = tmp_path / "full.parquet"
    assert rladv("compute", inp, "--estimator", "rloo", "--kl-coef", "0.05", "-o", full, "-q").exit_code == 0
    whole = read(full).filter(pa.compute.equal(read(full)["uid"], uid))
    group = read(out_dir / "group.adv.parquet")
    assert group.num_rows == whole.num_rows == 4
    assert group["advantages"].equals(whole["advantages"])  # to the bit: --pad-width when the batch is wider
    assert_one_line_error(rladv("inspect", inp, "--export", out_dir), "--export needs --uid")
    assert_one_line_error(rladv("inspect", inp, "--row", "3", "--uid", uid), "--row shows one trajectory and --uid one group")


def _rows_whose_padded_sums_round_otherwise(rng, width: int, rows: int) -> list[list[float]]:
    """``rows`` float32 rows (lengths 20-60) totalling 1 up to rounding (a near-tied group, where one ulp of a
    total moves the advantages), whose padded float32 sum at their own length differs from the sum padded to
    ``width``: torch's vectorised cascade rounds by the padded width (searched, so that the rows round
    otherwise on whatever CPU runs the test)."""
    import torch

    found = []
    while len(found) < rows:
        v = rng.normal(size=int(rng.integers(20, 60)))
        v[-1] = 1.0 - v[:-1].sum()
        x = torch.from_numpy(v.astype(np.float32))
        if x.unsqueeze(0).sum(-1).item() != torch.nn.functional.pad(x, (0, width - x.numel())).unsqueeze(0).sum(-1).item():
            found.append(x.tolist())
    return found


def test_export_carries_the_batch_pad_width_and_reproduces_to_the_bit(tmp_path, monkeypatch):
    """A group of short rows in a batch with a 500-position response: alone, its totals would be summed at its
    own width and round otherwise; the exported command carries --pad-width 500 and gives the full run's bits."""
    rng = np.random.default_rng(3)
    short = _rows_whose_padded_sums_round_otherwise(rng, 500, 3)
    inp = write(tmp_path / "batch.parquet", {
        "uid": ["g", "g", "g", "long", "long"],
        "response_mask": [[1] * len(r) for r in short] + [[1] * 500, [1] * 7],
        "rm_scores": short + [[0.0] * 499 + [1.0], [0.0] * 6 + [0.5]],
    })
    settings = ["--estimator", "grpo"]
    assert rladv("inspect", inp, "--uid", "g", "--export", tmp_path / "repro", *settings).exit_code == 0
    command = (tmp_path / "repro" / "command.txt").read_text().splitlines()[0].split()
    assert command[command.index("--pad-width") + 1] == "500"
    monkeypatch.chdir(tmp_path / "repro")
    assert rladv(*command[1:], "-q").exit_code == 0
    without = [part for i, part in enumerate(command) if "--pad-width" not in command[max(i - 1, 0):i + 1]]
    assert rladv(*without[1:], "-o", "alone.parquet", "-q").exit_code == 0
    assert rladv("compute", inp, *settings, "-o", tmp_path / "full.parquet", "-q").exit_code == 0
    full = read(tmp_path / "full.parquet").slice(0, 3)
    assert read(tmp_path / "repro" / "group.adv.parquet")["advantages"].equals(full["advantages"])
    assert not read(tmp_path / "repro" / "alone.parquet")["advantages"].equals(full["advantages"])
    assert rladv("compute", inp, *settings, "--pad-width", "0").exit_code == 2


# ------------------------------------------------------------------------------------------------- --row and --uid
def test_inspect_row_and_uid_on_semantics_examples(tmp_path):
    gae = write(tmp_path / "gae.parquet", {"response_mask": [[1, 1, 1]], "rm_scores": [[0, 0, 1.0]],
                                           "values": [[0.2, 0.3, 0.4]]})
    result = rladv("inspect", gae, "--row", "0", "--estimator", "gae", "--json")
    assert result.exit_code == 0, result.output
    view = json.loads(result.stdout)
    # §7.1 with lam = 1.0 (the inspect default): A_raw = [0.8, 0.7, 0.6], returns = A_raw + V = [1, 1, 1]
    np.testing.assert_allclose(view["returns"], [1.0, 1.0, 1.0], atol=1e-6)
    grp = write(tmp_path / "grp.parquet", {"uid": ["a", "a", "a"], "response_mask": [[1], [1], [1]],
                                           "rm_scores": [[1.0], [0.0], [0.5]]})
    result = rladv("inspect", grp, "--uid", "a", "--json")
    assert result.exit_code == 0, result.output
    members = json.loads(result.stdout)["members"]
    np.testing.assert_allclose([m["advantage"] for m in members], [0.999998, -0.999998, 0.0], atol=1e-6)


@pytest.mark.parametrize("settings", [
    ["--estimator", "gae", "--gamma", "0.99", "--lam", "0.9", "--kl-coef", "0.05", "--kl-penalty", "k3"],
    ["--estimator", "grpo", "--no-norm-adv-by-std", "--overlong-buffer-len", "8", "--max-resp-len", "40"],
    ["--estimator", "reinforce_plus_plus", "--rpp-mask-mode", "carry", "--gamma", "0.9", "--tool-reward-coef", "0.5"],
])
def test_inspect_row_and_uid_take_every_setting_of_compute(tmp_path, settings):
    """inspect --row/--uid show the advantages compute writes with the same settings, not the defaults'."""
    inp = copy_sample(tmp_path, "multiturn.parquet")
    full = tmp_path / "full.parquet"
    assert rladv("compute", inp, *settings, "-o", full, "-q").exit_code == 0
    out = read(full)
    default = tmp_path / "default.parquet"
    assert rladv("compute", inp, "--estimator", settings[1], "-o", default, "-q").exit_code == 0
    assert read(default)["advantages"][7] != out["advantages"][7]  # the settings matter on these rows
    view = json.loads(rladv("inspect", inp, "--row", "7", *settings, "--json").stdout)
    assert view["advantage"] == out["advantages"][7].as_py()
    uid = out["uid"][7].as_py()
    members = json.loads(rladv("inspect", inp, "--uid", uid, *settings, "--json").stdout)["members"]
    rows = {m["dataset_row"]: m for m in members}
    for r, m in rows.items():
        valid = [a for a, v in zip(out["advantages"][r].as_py(), out["response_mask"][r].as_py()) if v]
        assert (m["advantage_min"], m["advantage_max"]) == ((min(valid), max(valid)) if valid else (None, None))


def test_inspect_uid_reads_a_verl_config(tmp_path):
    inp = copy_sample(tmp_path, "multiturn.parquet")
    yaml = tmp_path / "ppo.yaml"
    yaml.write_text("algorithm:\n  adv_estimator: grpo\n  norm_adv_by_std_in_grpo: false\n")
    uid = read(inp)["uid"][0].as_py()
    view = json.loads(rladv("inspect", inp, "--uid", uid, "--config", yaml, "--json").stdout)
    typed = json.loads(rladv("inspect", inp, "--uid", uid, "--no-norm-adv-by-std", "--json").stdout)
    default = json.loads(rladv("inspect", inp, "--uid", uid, "--json").stdout)
    advantages = lambda v: [m["advantage"] for m in v["members"]]  # noqa: E731
    assert advantages(view) == advantages(typed) != advantages(default)  # Dr.GRPO: R - mean


def test_inspect_refuses_settings_it_would_not_use(tmp_path):
    inp = copy_sample(tmp_path, "multiturn.parquet")
    uid = read(inp)["uid"][0].as_py()
    assert_one_line_error(rladv("inspect", inp, "--gamma", "0.9"), "--gamma: the checklist takes only --kl-coef")
    assert_one_line_error(rladv("inspect", inp, "--row", "3", "--lam", "0.9"), "--lam: without --estimator, --row")
    assert_one_line_error(rladv("inspect", inp, "--uid", uid, "--lam", "0.9"),
                          "--lam has no effect with --estimator grpo")
    assert rladv("inspect", inp, "--kl-coef", "0.1", "--kl-penalty", "k3").exit_code == 0


@pytest.mark.parametrize("broken", [[3], list(range(65))])
def test_inspect_exits_2_after_the_checklist_when_rows_break_the_contract(tmp_path, broken):
    """One bad row or all of them: the checklist still prints (it is what says which), then one Error line and
    exit 2, as validate, since compute refuses such a dataset; --json prints the checklist as well."""
    t = read(copy_sample(tmp_path, "groups.parquet"))
    masks = t["response_mask"].to_pylist()
    for r in broken:
        masks[r] = [2] * len(masks[r])
    path = tmp_path / "bad.parquet"
    pq.write_table(t.set_column(t.column_names.index("response_mask"), "response_mask",
                                pa.array(masks, pa.list_(pa.int8()))), path)
    res = rladv("inspect", path, "--estimator", "grpo", "--json")
    assert res.exit_code == 2
    assert json.loads(res.stdout)["invalid_rows"] == len(broken)
    assert res.stderr == (f"Error: {len(broken)} of 65 rows of {path} break the data contract, so rladv compute "
                          "refuses the dataset (the invalid_rows check above; rladv validate lists them all)\n")
    assert rladv("inspect", copy_sample(tmp_path, "groups.parquet")).exit_code == 0
