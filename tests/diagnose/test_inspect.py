"""``rladv_cli.diagnose.checklist``: the checklist on crafted tables (exact counts and rows), docs/contract.md §5's
JSON, chunking, no torch in ``inspect``, and the row/group views on docs/semantics.md's worked examples."""
from __future__ import annotations

import io
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from rich.console import Console

from conftest import F32, SAMPLES, runner, write
from rladv_cli.diagnose.checklist import inspect
from rladv_cli.diagnose.findings import render_inspection
from rladv_cli.diagnose.scan import kl_estimate
from rladv_cli.diagnose.views import group_view, render_group, render_row, row_view
from rladv_cli.errors import ConfigError, InputError

CONTRACT_CODES = {
    "singleton_group", "all_equal_group", "group_size_mismatch", "score_on_masked_position", "credit_reset_at_mask",
    "kl_raises_reward", "kl_flips_sign", "uid_merge_grpo_vectorized", "row_without_actor_tokens",
}


def by_code(ins) -> dict:
    return {c.code: c for c in ins.checks}


def expect(ins, code: str, status: str, count: int, rows: list[int]) -> None:
    c = by_code(ins)[code]
    assert (c.status, c.count, c.rows) == (status, count, rows), c


def console() -> Console:
    return Console(file=io.StringIO(), width=100, color_system=None)


# ------------------------------------------------------------------------------------------- datasets
@pytest.fixture
def faults(tmp_path) -> Path:
    """Scalar scores; groups a(2) b(1) c(2, all equal) d(1)."""
    return write(tmp_path / "faults.parquet", {
        "uid": ["a", "a", "b", "c", "c", "d"],
        "response_mask": [[1, 1, 0], [1, 1, 1], [0, 0], [1, 1], [1], [1]],
        "score": [1.0, 0.0, 0.5, 1.0, 1.0, 0.0],
    })


@pytest.fixture
def with_advantages(tmp_path) -> Path:
    """An rladv-output-like file: loss_mask, advantages; see test_advantages_and_dead_signal for the story."""
    return write(tmp_path / "adv.parquet", {
        "uid": ["a", "a", "b", "c", "c", "d", "d", "e", "e"],
        "response_mask": [[1, 1], [1], [1, 1], [1, 0, 1], [1, 1], [0, 0], [1], [1, 0], [1]],
        "loss_mask": [[1, 1], [1], [1, 1], [1, 1, 1], [1, 1], [1, 1], [1], [1, 0], [1]],
        "score": [1.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 0.2, 0.5],
        "advantages": [[0, 0], [0], [0, 0], [0.7, 0, 0.7], [-0.7, -0.7], [0, 0], [0.5], [0.3, 0.2], [0]],
    })


# ------------------------------------------------------------------------------------------- JSON shape
def test_json_has_contract_section5_keys(with_advantages):
    ins = inspect(with_advantages)
    doc = json.loads(ins.to_json())
    assert list(doc)[:6] == ["verdict", "rows", "tokens", "groups", "columns", "checks"]
    assert set(doc) == {"verdict", "rows", "tokens", "groups", "columns", "checks", "paths", "skipped", "filter", "estimator",
                        "invalid_rows",
                        "layout", "scores", "masks", "kl", "advantages", "dead_signal", "distributions"}
    assert {"actor", "observation", "padding", "rejected"} <= set(doc["tokens"])
    assert {"count", "sizes", "singletons", "all_equal"} <= set(doc["groups"])
    assert doc["groups"]["sizes"] == {"1": 1, "2": 4}
    assert doc["columns"] == {"uid": "string", "response_mask": "list<element: int8>",
                              "loss_mask": "list<element: int8>", "score": "float",
                              "advantages": "list<element: float>"}
    for check in doc["checks"]:
        assert {"code", "status", "message", "count", "rows"} <= set(check)
        assert check["status"] in ("pass", "warn", "fail")
    assert doc["rows"] == 9
    assert doc["tokens"] == {"total": 16, "actor": 15, "observation": 1, "padding": 0, "rejected": 3, "used": 12}


def test_every_contract_code_the_data_allows_is_checked(tmp_path):
    path = write(tmp_path / "all.parquet", {
        "uid": ["a", "a"], "response_mask": [[1, 1], [1, 1]], "score": [1.0, 0.0],
        "old_log_probs": [[-1, -1], [-1, -1]], "ref_log_prob": [[-1, -1], [-1, -1]],
    })
    codes = [c.code for c in inspect(path, kl_coef=0.1).checks]
    assert CONTRACT_CODES <= set(codes)
    # docs/debugging.md's order: scores/KL, masks, group sizes, all-equal groups, advantages, REINFORCE++ credit
    assert codes.index("kl_flips_sign") < codes.index("score_on_masked_position") < codes.index("group_size_mismatch") \
        < codes.index("all_equal_group") < codes.index("credit_reset_at_mask")
    assert all(c.status == "pass" for c in inspect(path, kl_coef=0.1).checks)
    # without a coefficient (or a uid) those checks are not listed
    no_uid = write(tmp_path / "no_uid.parquet", {"response_mask": [[1]], "score": [1.0]})
    codes = {c.code for c in inspect(no_uid).checks}
    assert not codes & {"kl_raises_reward", "kl_flips_sign", "singleton_group", "all_equal_group",
                        "group_size_mismatch", "uid_merge_grpo_vectorized", "advantage_on_masked_position"}


# ------------------------------------------------------------------------------------------- checks
def test_group_and_mask_checks_exact(faults):
    ins = inspect(faults)
    expect(ins, "score_on_masked_position", "warn", 2, [0, 2])   # ends in an observation / no actor token
    expect(ins, "row_without_actor_tokens", "warn", 1, [2])
    expect(ins, "group_size_mismatch", "warn", 1, [2, 5])        # one batch; sizes 1,1 vs 2,2: a tie goes to the larger
    expect(ins, "singleton_group", "warn", 2, [2, 5])
    expect(ins, "all_equal_group", "warn", 1, [3])
    # row 0's score sits on the observation after turn 1: score_on_masked_position, which both
    # --rpp-mask-mode values drop, so it decides no return
    expect(ins, "credit_reset_at_mask", "pass", 0, [])
    expect(ins, "uid_merge_grpo_vectorized", "pass", 0, [])
    assert ins.groups.model_dump() == {
        "count": 4, "sizes": {"1": 2, "2": 2}, "singletons": 2, "all_equal": 1, "expected_n": None,
        "all_equal_scores": 1, "size_mismatch": 2, "basis": "score", "session_sizes": None,
    }
    assert ins.status == "warn"
    assert ins.layout.rows_ending_in_observation == 2 and ins.layout.turns.max == 1
    assert ins.scores.score_total.mean == pytest.approx(3.5 / 6)
    expect(inspect(faults, expected_n=3), "group_size_mismatch", "warn", 1, [0, 2, 3, 5])
    assert inspect(faults, expected_n=3).groups.expected_n == 3


def test_status_follows_the_estimator(faults, tmp_path):
    gae = inspect(faults, estimator="gae")
    expect(gae, "singleton_group", "pass", 2, [2, 5])            # counted, but gae has no groups
    assert "does not use groups" in by_code(gae)["singleton_group"].message
    expect(gae, "missing_columns", "fail", 1, [])                # gae needs values
    assert "values" in by_code(gae)["missing_columns"].message
    credit = write(tmp_path / "credit.parquet", response_mask=[[1, 0, 1]], rm_scores=[[0, 0, 1]])
    expect(inspect(credit, estimator="grpo"), "credit_reset_at_mask", "pass", 1, [0])
    expect(inspect(credit, estimator="reinforce_plus_plus"), "credit_reset_at_mask", "warn", 1, [0])
    assert "only reinforce_plus_plus resets; grpo is unaffected" in by_code(inspect(credit, estimator="grpo"))[
        "credit_reset_at_mask"].message
    with pytest.raises(ConfigError):
        inspect(faults, estimator="nope")


def test_token_level_scores_terminal_and_credit(tmp_path):
    path = write(tmp_path / "rm.parquet", {
        "response_mask": [[1, 1, 1], [1, 1, 1], [1, 0], [1, 0, 1], [0, 1, 1], [1, 1, 0]],
        "rm_scores": [[0.5, 0, 1], [0, 0, 1], [0, 1], [0, 0, 1], [0, 0, 1], [1, 0, 0]],
    })
    ins = inspect(path)
    expect(ins, "non_terminal_score", "warn", 2, [0, 5])
    expect(ins, "score_on_masked_position", "warn", 1, [2])
    # a reward on an actor token after a mask-0 position that follows an actor token: row 3; not row 2 (its
    # reward sits on the mask-0 position itself, which both modes drop), 4 (mask 0 first) nor 5 (the reward is
    # before the cut)
    expect(ins, "credit_reset_at_mask", "warn", 1, [3])
    assert ins.layout.turns.max == 2 and ins.layout.observation_spans.max == 1


def test_kl_checks_semantics_example(tmp_path):
    """docs/semantics.md §11: kld = [[.5, −1, 0], [0, .2, 0]]; the −1 estimate raises a reward. Row 2's penalty flips
    its total from 0.01 to −0.19."""
    path = write(tmp_path / "kl.parquet", {
        "uid": ["a", "a", "b"],
        "response_mask": [[1, 1, 1], [1, 1, 0], [1, 1]],
        "rm_scores": [[0, 0, 1], [0, 0, 0], [0, 0.01]],
        "old_log_probs": [[-1, -2, -0.5], [-1, -1, -1], [-1, -1]],
        "ref_log_prob": [[-1.5, -1, -0.5], [-1, -1.2, -1], [-2, -2]],
    })
    ins = inspect(path, kl_coef=0.1)
    expect(ins, "kl_raises_reward", "warn", 1, [0])
    expect(ins, "kl_flips_sign", "warn", 1, [2])
    assert ins.kl.mean == pytest.approx((-1 / 6 + 0.1 + 1.0) / 3, rel=1e-6)
    assert ins.scores.reward_total.min == pytest.approx(-0.19, abs=1e-6)
    assert ins.groups.basis == "kl_shaped"
    expect(inspect(path, kl_coef=0.1, kl_penalty="k3"), "kl_raises_reward", "pass", 0, [])  # k3 >= 0
    assert "kl_raises_reward" not in by_code(inspect(path))
    no_ref = write(tmp_path / "no_ref.parquet", {"response_mask": [[1]], "score": [1.0], "old_log_probs": [[-1]]})
    ins = inspect(no_ref, kl_coef=0.1)
    expect(ins, "missing_columns", "fail", 1, [])
    assert "kl_raises_reward" not in by_code(ins)


def test_all_equal_scores_but_not_after_kl(tmp_path):
    path = write(tmp_path / "eq.parquet", {
        "uid": ["a", "a"], "response_mask": [[1, 1], [1, 1]], "score": [1.0, 1.0],
        "old_log_probs": [[-1, -1], [-1, -1]], "ref_log_prob": [[-1, -1], [-1.5, -1]],
    })
    expect(inspect(path), "all_equal_group", "warn", 1, [0])
    shaped = inspect(path, kl_coef=0.1)
    expect(shaped, "all_equal_group", "pass", 0, [])
    assert (shaped.groups.all_equal, shaped.groups.all_equal_scores) == (0, 1)


@pytest.mark.parametrize("mode", ["kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3", "k3+", "kl+"])
def test_kl_estimate_matches_the_pipelines(mode):
    import torch

    from rladv_cli.stages.shaping import kl_penalty

    rng = np.random.default_rng(0)
    old = (-rng.exponential(1.0, 200) * 5).astype(np.float32)
    ref = (-rng.exponential(1.0, 200) * 5).astype(np.float32)
    want = kl_penalty(torch.from_numpy(old), torch.from_numpy(ref), mode).numpy()
    np.testing.assert_allclose(kl_estimate(old, ref, mode), want, rtol=2e-6, atol=1e-6)  # exp differs by an ulp in k3's cancellation


def test_uid_merges_and_estimator_relevance(tmp_path):
    path = write(tmp_path / "uids.parquet", {
        "uid": ["01", "1", "2", "2"], "response_mask": [[1]] * 4, "score": [1.0, 0.0, 1.0, 0.0],
    })
    # count: sets of merged uids; rows: the first row of every uid involved
    expect(inspect(path), "uid_merge_grpo_vectorized", "warn", 1, [0, 1])
    expect(inspect(path, estimator="grpo_vectorized"), "uid_merge_grpo_vectorized", "warn", 1, [0, 1])
    expect(inspect(path, estimator="grpo"), "uid_merge_grpo_vectorized", "pass", 1, [0, 1])
    assert "'01'/'1'" in by_code(inspect(path)).get("uid_merge_grpo_vectorized").message


def test_loss_mask_and_advantages_and_dead_signal(with_advantages):
    ins = inspect(with_advantages)
    expect(ins, "loss_mask_differs", "warn", 2, [3, 5])
    expect(ins, "advantage_on_masked_position", "fail", 1, [7])
    expect(ins, "score_on_masked_position", "warn", 1, [7])      # row 5's score sits on a rejected actor token
    expect(ins, "row_without_actor_tokens", "pass", 0, [])
    expect(ins, "row_fully_rejected", "warn", 1, [5])
    expect(ins, "credit_reset_at_mask", "warn", 1, [3])          # not row 7: its score sits on the mask-0 token
    expect(ins, "group_size_mismatch", "warn", 1, [2])
    expect(ins, "all_equal_group", "warn", 1, [0])
    assert ins.status == "fail"
    assert ins.masks.loss_vs_response.model_dump() == {"rows": 2, "loss_only_tokens": 3}
    values = np.array([0, 0, 0, 0, 0, 0.7, 0.7, -0.7, -0.7, 0.5, 0.3, 0], dtype=np.float32).astype(np.float64)
    a = ins.advantages
    assert a.count == 12
    assert a.mean == pytest.approx(values.mean(), abs=1e-12)
    assert a.std == pytest.approx(values.std(ddof=1), abs=1e-12)
    assert (a.fraction_positive, a.fraction_negative, a.fraction_zero) == (4 / 12, 2 / 12, 6 / 12)
    assert (a.masked_nonzero_tokens, a.masked_nonzero_rows) == (1, 1)
    d = ins.dead_signal
    assert (d.base, d.actor_tokens, d.zero_tokens) == ("loss_mask", 15, 9)
    assert {k: c.tokens for k, c in d.by_cause.items()} == {
        "rejected": 3, "all_equal_group": 3, "singleton": 2, "other": 1,
    }
    assert d.share == pytest.approx(9 / 15)


def test_invalid_rows_become_a_fail_check(tmp_path):
    path = write(tmp_path / "bad.parquet", {
        "uid": ["a", "a", "b", "b", "c"],
        "response_mask": [[1, 1], [1, 1], [1], [1, 2], [1]],
        "rm_scores": [[0, 1], [0, 1, 0], [1], [0, 1], [0]],
        "advantages": [[0, 0], [0, 0], [float("nan")], [0, 0], [0]],
    })
    for chunk_rows in (1, 2, 100):
        ins = inspect(path, chunk_rows=chunk_rows)
        expect(ins, "invalid_rows", "fail", 3, [1, 2, 3])
        assert "row 1, column rm_scores" in by_code(ins)["invalid_rows"].message
        assert ins.rows == 5 and ins.invalid_rows == 3
        assert ins.groups.sizes == {"1": 2} and ins.tokens.total == 3   # rows 0 and 4 only
        expect(ins, "all_equal_group", "pass", 0, [])


def test_unreadable_dataset_raises(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        inspect(tmp_path / "missing.parquet")
    junk = tmp_path / "junk.parquet"
    junk.write_text("not parquet")
    with pytest.raises(InputError, match="not a readable Parquet"):
        inspect(junk)
    no_mask = write(tmp_path / "no_mask.parquet", {"rm_scores": [[1.0]]})
    with pytest.raises(InputError, match="response_mask"):
        inspect(no_mask)
    # a score and no token list: sequence-level data, one position per row (docs/contract.md §1)
    assert inspect(write(tmp_path / "seq.parquet", {"score": [1.0, 0.0]})).tokens.actor == 2
    wrong = write(tmp_path / "wrong.parquet", {"response_mask": [[1]], "uid": [[1.0]]}, types={"uid": F32})
    ins = inspect(wrong)   # a badly typed optional column is reported and ignored
    expect(ins, "invalid_columns", "fail", 1, [])
    expect(ins, "missing_columns", "fail", 1, [])
    assert ins.groups.count == 0


def test_sessions_count_for_grpo(tmp_path):
    path = write(tmp_path / "sessions.parquet", {
        "uid": ["a"] * 4 + ["b"] * 2,
        "session_id": ["s1", "s1", "s2", "s2", "s3", "s4"],
        "response_mask": [[1]] * 6, "score": [1.0, 1.0, 0.0, 0.0, 1.0, 0.0],
    })
    expect(inspect(path, expected_n=2), "group_size_mismatch", "warn", 1, [0])   # rows: 4 vs 2
    grpo = inspect(path, expected_n=2, estimator="grpo")
    expect(grpo, "group_size_mismatch", "pass", 0, [])                          # sessions: 2 and 2
    assert grpo.groups.session_sizes == {"2": 2}
    expect(grpo, "session_key_collision", "pass", 0, [])


def test_sessions_verl_would_join_are_named(tmp_path):
    """verl keys a session by f"{uid}_{session_id}": ("a_b", "c") and ("a", "b_c") are one session there."""
    path = write(tmp_path / "sessions.parquet", {
        "uid": ["a_b", "a_b", "a", "a", "z", "z"], "session_id": ["c", "d", "b_c", "e", "x", "y"],
        "response_mask": [[1]] * 6, "score": [1.0, 0.0, 0.5, 0.25, 1.0, 0.0],
    })
    expect(inspect(path, estimator="grpo"), "session_key_collision", "warn", 1, [0, 2])
    expect(inspect(path, estimator="rloo"), "session_key_collision", "pass", 1, [0, 2])  # only grpo folds
    assert "('a_b', 'c') and ('a', 'b_c')" in by_code(inspect(path))["session_key_collision"].message
    plain = write(tmp_path / "plain.parquet", {"uid": ["a", "a"], "response_mask": [[1]] * 2, "score": [1.0, 0.0]})
    assert "session_key_collision" not in by_code(inspect(plain))  # no session_id column, no check


# ------------------------------------------------------------------------------------------- streaming
@pytest.fixture(scope="module")
def computed_groups(tmp_path_factory) -> Path:
    """sample_data/groups.parquet after `rladv compute --estimator grpo` (a file that carries advantages)."""
    import rladv_cli

    out = tmp_path_factory.mktemp("adv") / "groups.adv.parquet"
    rladv_cli.compute_file([SAMPLES / "groups.parquet"], output=out, estimator="grpo", device="cpu")
    return out


@pytest.mark.parametrize("name", ["groups.parquet", "multiturn.parquet", "padded.parquet", "groups.adv.parquet"])
def test_chunked_equals_whole_on_samples(name, computed_groups):
    path = computed_groups if name == "groups.adv.parquet" else SAMPLES / name
    whole = inspect(path, kl_coef=0.05, chunk_rows=100_000)
    assert inspect(path, kl_coef=0.05, chunk_rows=1) == whole
    assert inspect(path, kl_coef=0.05, chunk_rows=7) == whole


def test_chunked_equals_whole_crafted(with_advantages, faults):
    for path in (with_advantages, faults):
        assert inspect(path, chunk_rows=1) == inspect(path)


def test_rows_are_within_their_file(tmp_path):
    folder = tmp_path / "ds"
    folder.mkdir()
    write(folder / "a.parquet", {"uid": ["x", "x"], "response_mask": [[1], [1]], "score": [1.0, 1.0]})
    write(folder / "b.parquet", {"uid": ["y", "z", "z"], "response_mask": [[1], [0], [1]], "score": [1.0, 0.0, 1.0]})
    ins = inspect(folder, chunk_rows=2)
    c = by_code(ins)
    assert (c["all_equal_group"].rows, c["all_equal_group"].where) == ([0], [f"{folder / 'a.parquet'}:0"])
    assert (c["singleton_group"].rows, c["row_without_actor_tokens"].rows) == ([0], [1])
    assert c["singleton_group"].where == [f"{folder / 'b.parquet'}:0"]


def test_sample_groups_finds_the_singleton_and_all_equal_group():
    ins = inspect(SAMPLES / "groups.parquet", expected_n=4)
    assert ins.groups.sizes == {"1": 1, "4": 16}
    expect(ins, "singleton_group", "warn", 1, [15])
    assert by_code(ins)["all_equal_group"].count >= 1
    assert ins.tokens.observation == 0 and ins.layout.turns.max == 1


@pytest.mark.slow  # a fresh interpreter
def test_inspect_does_not_import_torch(computed_groups):
    code = (
        "import sys\n"
        "from rladv_cli.diagnose.checklist import inspect\nfrom rladv_cli.diagnose.findings import render_inspection\n"
        f"ins = inspect([{str(computed_groups)!r}], kl_coef=0.1, estimator='grpo')\n"
        f"inspect({str(SAMPLES / 'multiturn.parquet')!r}, chunk_rows=5)\n"
        "import io; from rich.console import Console\n"
        "render_inspection(ins, Console(file=io.StringIO()))\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


# ------------------------------------------------------------------------------------------- views
@pytest.fixture
def semantics_groups(tmp_path) -> Path:
    """docs/semantics.md §7.2: group A R = [1, 0, .5] (row 0 mask [1,1,0,0,1]), all-equal B = [0, 0, 0], singleton S."""
    return write(tmp_path / "groups.parquet", {
        "uid": ["A", "A", "A", "B", "B", "B", "S"],
        "response_mask": [[1, 1, 0, 0, 1], [1, 1], [1], [1], [1, 1], [1], [1, 1]],
        "loss_mask": [[1, 1, 0, 0, 1], [1, 1], [1], [1], [1, 1], [1], [1, 1]],
        "score": [1.0, 0.0, 0.5, 0.0, 0.0, 0.0, 0.5],
        "responses": [[5, 6, 7, 8, 9], [1, 2], [3], [4], [5, 6], [7], [8, 9]],
    }, {"responses": pa.list_(pa.int32())})


def test_group_view_grpo_semantics_example(semantics_groups):
    v = group_view(semantics_groups, "A")
    assert v.scope == "group" and v.error is None
    assert [m.advantage for m in v.members] == pytest.approx([0.999998, -0.999998, 0.0], abs=1e-7)
    assert np.float32(v.members[0].advantage) == np.float32(0.9999980)
    assert [m.row for m in v.members] == [0, 1, 2]
    (g,) = v.groups
    assert (g.size, g.mean, g.std, g.all_equal, g.singleton) == (3, 0.5, 0.5, False, False)
    assert [r.code for r in v.why] == ["group_stats"]
    rloo = group_view(semantics_groups, "A", estimator="rloo")
    assert [m.advantage for m in rloo.members] == pytest.approx([0.75, -0.75, 0.0])


def test_group_view_explains_singleton_all_equal_and_rejected(semantics_groups, tmp_path):
    s = group_view(semantics_groups, "S")
    assert s.members[0].advantage == pytest.approx(0.4999995, abs=1e-7)
    assert [r.code for r in s.why] == ["singleton_group"] and "R/(1+eps)" in s.why[0].message
    assert [r.code for r in group_view(semantics_groups, "S", estimator="rloo_vectorized").why] == ["singleton_group"]
    assert group_view(semantics_groups, "S", estimator="rloo_vectorized").members[0].advantage == 0.0
    b = group_view(semantics_groups, "B")
    assert [m.advantage for m in b.members] == [0.0, 0.0, 0.0]
    assert [r.code for r in b.why] == ["all_equal_group"]
    passk = group_view(semantics_groups, "S", estimator="grpo_passk")
    assert passk.error and passk.members[0].advantage is None
    whitened = group_view(semantics_groups, "A", estimator="reinforce_plus_plus_baseline")
    assert whitened.scope == "dataset"
    rejected = write(tmp_path / "rejected.parquet", {
        "uid": ["A", "A"], "response_mask": [[1, 0], [0, 0]], "loss_mask": [[1, 1], [1, 1]], "score": [1.0, 0.0],
    })
    v = group_view(rejected, "A")
    # row 0's score sits on its rejected last token: still in R for grpo
    assert [r.code for r in v.why] == ["group_stats", "rejected_in_group_baseline", "row_fully_rejected",
                                       "score_on_masked_position"]
    assert [m.rejected_tokens for m in v.members] == [1, 2]
    with pytest.raises(ConfigError, match="no row"):
        group_view(semantics_groups, "nope")


def test_row_view_grpo_and_file_columns(semantics_groups):
    v = row_view(semantics_groups, 0, estimator="grpo")
    assert v.source == "compute (group)" and v.uid == "A"
    assert v.advantage == pytest.approx([0.999998, 0.999998, 0, 0, 0.999998], abs=1e-7)
    assert v.score == [0, 0, 0, 0, 1.0] and v.token_id == [5, 6, 7, 8, 9]
    assert [(s.kind, s.start, s.end) for s in v.spans] == [("assistant", 0, 2), ("observation", 2, 4), ("assistant", 4, 5)]
    plain = row_view(semantics_groups, 0)
    assert plain.source == "file" and plain.advantage is None and plain.reward is None
    with pytest.raises(ConfigError):
        row_view(semantics_groups, 7)


def test_row_view_reinforce_reset_semantics_example(tmp_path):
    """docs/semantics.md §7.7, one-row batch r = [0, 0, 1], m = [1, 0, 1]: reset mode gives [−0.7071068, 0,
    0.7071068]; carry, the default, [0, 0, 0] (both actor tokens return 1)."""
    path = write(tmp_path / "rpp.parquet", {"response_mask": [[1, 0, 1]], "rm_scores": [[0, 0, 1]]})
    assert row_view(path, 0, estimator="reinforce_plus_plus").advantage == [0, 0, 0]
    v = row_view(path, 0, estimator="reinforce_plus_plus", rpp_mask_mode="reset")
    assert v.source == "compute (dataset)"
    assert v.advantage == pytest.approx([-0.7071068, 0, 0.7071068], abs=1e-6)
    assert any(n.startswith("credit_reset_at_mask") for n in v.notes)
    assert [s.kind for s in v.spans] == ["assistant", "observation", "assistant"]


# ------------------------------------------------------------------------------------------- rendering
def test_render_inspection_shows_codes_and_statuses(with_advantages):
    c = console()
    render_inspection(inspect(with_advantages), c)
    out = c.file.getvalue()
    for code in ("advantage_on_masked_position", "loss_mask_differs", "singleton_group", "all_equal_group"):
        assert code in out
    assert "FAIL" in out and "WARN" in out and "PASS" not in out
    assert "verdict FAIL: 40.0% of actor tokens (4 of 9 rows, 3 of 5 groups) carry learning signal" in out
    assert "check(s) pass: invalid_rows, invalid_columns" in out and "(--all lists them)" in out
    c = console()
    render_inspection(inspect(with_advantages), c, show_all=True)
    assert "PASS" in c.file.getvalue() and "--all lists them" not in c.file.getvalue()


def test_render_row_collapses_long_rows(tmp_path):
    mask = [1] * 300 + [0] * 50 + [1] * 150
    path = write(tmp_path / "long.parquet", {"response_mask": [mask], "score": [1.0], "values": [[0.1] * 500]})
    c = console()
    render_row(row_view(path, 0), c, max_tokens=30)
    out = c.file.getvalue()
    assert "assistant x290" in out and "observation x40" in out and "assistant x140" in out
    assert len(out.splitlines()) < 60
    full = console()
    render_row(row_view(path, 0), full, max_tokens=1000)
    assert len(full.file.getvalue().splitlines()) > 500
    # more spans than the budget allows: one line per span (a one-token span is shown as itself)
    many = write(tmp_path / "many.parquet", {"response_mask": [[1, 1, 1, 0, 0, 0] * 10 + [1]], "score": [1.0]})
    c = console()
    render_row(row_view(many, 0), c, max_tokens=20)
    out = c.file.getvalue()
    assert out.count("assistant x3") == 10 and out.count("observation x3") == 10
    assert "│    60 │" in out and "(9 more spans)" in " ".join(out.split())  # the header wraps with the path's length


def test_render_group_and_row(semantics_groups):
    c = console()
    render_group(group_view(semantics_groups, "S"), c)
    render_group(group_view(semantics_groups, "A"), c)
    render_row(row_view(semantics_groups, 0, estimator="grpo"), c)
    out = c.file.getvalue()
    assert "singleton_group" in out and "0.999998" in out and "observation" in out


def test_a_clean_dataset_has_no_warn_or_fail(tmp_path):
    """Two groups of two with distinct scores, actor tokens only, scores on the last token, no KL: all pass."""
    path = write(tmp_path / "clean.parquet", {
        "uid": ["a", "b", "a", "b"],
        "response_mask": [[1, 1, 1], [1, 1], [1, 1], [1, 1, 1]],
        "rm_scores": [[0, 0, 1.0], [0, 0.5], [0, 0.0], [0, 0, -0.5]],
        "old_log_probs": [[-1, -1, -1], [-1, -1], [-1, -1], [-1, -1, -1]],
        "ref_log_prob": [[-1.1, -1.2, -1.1], [-1.3, -1.1], [-1.2, -1.1], [-1.1, -1.1, -1.2]],
    })
    for ins in (inspect(path, expected_n=2), inspect(path, expected_n=2, kl_coef=0.01, estimator="reinforce_plus_plus")):
        assert [c.code for c in ins.checks if c.status != "pass"] == []


# ------------------------------------------------------------------------------------------- rladv outputs
@pytest.fixture
def semantics_output(tmp_path) -> Path:
    """docs/semantics.md §11 as an rladv output: KL shaping (kl, β 0.1) on the original mask m0 = loss_mask, then
    rejection of row 0's token 1 (response_mask [1, 0, 1]); token_level_rewards and grpo's advantages as written."""
    return write(tmp_path / "semantics.adv.parquet", {
        "uid": ["a", "a"],
        "response_mask": [[1, 0, 1], [1, 1, 0]],
        "loss_mask": [[1, 1, 1], [1, 1, 0]],
        "rm_scores": [[0, 0, 1], [0, 0, 0]],
        "old_log_probs": [[-1, -2, -0.5], [-1, -1, -1]],
        "ref_log_prob": [[-1.5, -1, -0.5], [-1, -1.2, -1]],
        "token_level_rewards": [[-0.05, 0.1, 1.0], [0, -0.02, 0]],
        "advantages": [[0.7071058, 0, 0.7071058], [-0.7071058, -0.7071058, 0]],
    })


def test_kl_on_an_output_uses_the_original_mask(semantics_output, tmp_path):
    """KL shaping runs on the mask before rejection (docs/semantics.md §4.2/§10): current_kl = mean(−1/6, 0.2/2) and
    R = [1.05, −0.02], the rejected token's +0.1 included; the same numbers as on the input file."""
    ins = inspect(semantics_output, kl_coef=0.1)
    assert ins.kl.mean == pytest.approx((-1 / 6 + 0.1) / 2, rel=1e-6)
    assert (ins.scores.reward_total.min, ins.scores.reward_total.max) == (pytest.approx(-0.02, abs=1e-7),
                                                                          pytest.approx(1.05, abs=1e-7))
    expect(ins, "kl_raises_reward", "warn", 1, [0])            # the −1 estimate sits on the rejected token
    source = write(tmp_path / "semantics.parquet", {
        k: v for k, v in pq.read_table(semantics_output).to_pydict().items()
        if k not in ("loss_mask", "token_level_rewards", "advantages")} | {"response_mask": [[1, 1, 1], [1, 1, 0]]})
    raw = inspect(source, kl_coef=0.1)
    assert (raw.kl, raw.scores, raw.layout) == (ins.kl, ins.scores, ins.layout)


def test_tokens_dead_signal_and_masks_on_an_output(semantics_output, with_advantages):
    """Rejected tokens (loss_mask 1, response_mask 0) are actor tokens, counted apart as ``rejected``, as in
    rladv compute's report; a row whose actor tokens were all rejected is ``row_fully_rejected``."""
    ins = inspect(with_advantages)
    assert ins.tokens.model_dump() == {"total": 16, "actor": 15, "observation": 1, "padding": 0, "rejected": 3,
                                       "used": 12}
    assert list(ins.dead_signal.by_cause) == ["rejected", "all_equal_group", "singleton", "other"]  # compute's causes
    assert (ins.masks.rows_without_actor_tokens, ins.masks.rows_fully_rejected) == (0, 1)
    assert ins.layout.turns.max == 1 and ins.layout.rows_ending_in_observation == 1
    out = inspect(semantics_output)
    assert out.tokens.model_dump() == {"total": 6, "actor": 5, "observation": 1, "padding": 0, "rejected": 1, "used": 4}
    # an input without loss_mask: nothing rejected, every actor token used
    plain = inspect(SAMPLES / "multiturn.parquet").tokens
    assert plain.rejected == 0 and plain.used == plain.actor


@pytest.fixture(scope="module")
def rejected_output(tmp_path_factory):
    """sample_data/multiturn.parquet through grpo with KL in the reward and token_k1 rejection: (output, report)."""
    import rladv_cli

    out = tmp_path_factory.mktemp("rej") / "multiturn.adv.parquet"
    report = rladv_cli.compute_file([SAMPLES / "multiturn.parquet"], output=out, estimator="grpo", kl_coef=0.05,
                                    rollout_rs="token_k1", rollout_rs_threshold="1.5", device="cpu")
    assert report.tokens.rejected > 0
    return out, report


def test_inspect_of_an_output_agrees_with_the_compute_report(rejected_output):
    out, report = rejected_output
    ins = inspect(out, kl_coef=0.05)
    assert ins.kl.mean == pytest.approx(report.kl.mean, rel=1e-5)
    r, want = ins.scores.reward_total, report.scores.reward_total
    assert (r.count, r.fraction_positive, r.fraction_negative) == (want.count, want.fraction_positive, want.fraction_negative)
    assert (r.mean, r.min, r.max) == (pytest.approx(want.mean, abs=1e-6), pytest.approx(want.min, abs=1e-6),
                                      pytest.approx(want.max, abs=1e-6))
    tlr = pq.read_table(out, columns=["token_level_rewards"])["token_level_rewards"].to_pylist()
    assert r.mean == pytest.approx(np.mean([math.fsum(np.float32(x).tolist()) for x in tlr]), abs=1e-7)
    assert ins.tokens.model_dump() == report.tokens.model_dump()
    assert {k: c.tokens for k, c in ins.dead_signal.by_cause.items()} == report.dead_signal["causes"]
    assert ins.dead_signal.zero_tokens == report.dead_signal["zero_advantage_tokens"]
    warned = {w.code: w for w in report.warnings}
    for code in ("score_on_masked_position", "kl_raises_reward", "kl_flips_sign", "row_without_actor_tokens",
                 "row_fully_rejected", "group_size_mismatch", "singleton_group", "all_equal_group"):
        c = by_code(ins)[code]
        assert (c.count, c.rows) == ((warned[code].count, warned[code].rows) if code in warned else (0, [])), code
    # the raw input gives the same totals, KL and layout
    raw = inspect(SAMPLES / "multiturn.parquet", kl_coef=0.05)
    assert (raw.kl, raw.scores, raw.layout) == (ins.kl, ins.scores, ins.layout)


def test_group_size_mismatch_counts_batches_as_compute_does(faults, tmp_path):
    """rladv compute's report counts the batches whose group sizes differ (inspect has one batch); the rows are
    the first rows of the groups off the most common size (or --expected-n), groups.size_mismatch their number."""
    from rladv_cli.api import compute

    ins = inspect(faults)
    expect(ins, "group_size_mismatch", "warn", 1, [2, 5])
    assert ins.groups.size_mismatch == 2 and "2 of 4 uid group(s)" in by_code(ins)["group_size_mismatch"].message
    _, report = compute(pq.read_table(faults), estimator="grpo")
    (w,) = [w for w in report.warnings if w.code == "group_size_mismatch"]
    assert w.count == 1
    n3 = inspect(faults, expected_n=3)
    expect(n3, "group_size_mismatch", "warn", 1, [0, 2, 3, 5])
    assert n3.groups.size_mismatch == 4
    same = write(tmp_path / "same.parquet", {"uid": ["a", "a", "b", "b"], "response_mask": [[1]] * 4,
                                             "score": [1.0, 0.0, 1.0, 0.0]})
    expect(inspect(same), "group_size_mismatch", "pass", 0, [])
    expect(inspect(same, expected_n=3), "group_size_mismatch", "warn", 1, [0, 2])


def test_row_is_dataset_wide_and_shown_as_such(tmp_path):
    """--row N counts across all files; a row is shown as ``row N`` (dataset-wide) and ``file:row`` (within it)."""

    from rladv_cli.cli import app

    a = write(tmp_path / "a.parquet", {"uid": ["x", "x"], "response_mask": [[1], [1]], "score": [1.0, 1.0]})
    b = write(tmp_path / "b.parquet", {"uid": ["y", "z", "z"], "response_mask": [[1], [0], [1]], "score": [1.0, 0.0, 1.0]})
    v = row_view([a, b], 3)
    assert (v.path, v.row, v.dataset_row) == (str(b), 1, 3)
    c = console()
    render_row(v, c)
    assert f"row 3 of the dataset = {b}:1" in c.file.getvalue().replace("\n", "")
    ins = inspect([a, b])
    check = by_code(ins)["row_without_actor_tokens"]
    assert (check.rows, check.where, check.dataset_rows) == ([1], [f"{b}:1"], [3])
    c = console()
    render_inspection(ins, Console(file=c.file, width=400, color_system=None))
    assert f"{b}:1 (row 3)" in c.file.getvalue()
    result = runner.invoke(app, ["inspect", str(a), str(b), "--row", "3", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert (doc["path"], doc["row"], doc["dataset_row"], doc["response_mask"]) == (str(b), 1, 3, [0])
    wide = runner.invoke(app, ["inspect", str(a), str(b), "--row", "3"], env={"COLUMNS": "200"})
    assert f"row 3 of the dataset = {b}:1" in wide.output
    g = console()
    render_group(group_view([a, b], "z"), Console(file=g.file, width=400, color_system=None))
    assert "\n1 (row 3)  " in g.file.getvalue()   # the rows of b.parquet, and what --row takes
    assert [(m.row, m.dataset_row) for m in group_view([a, b], "z").members] == [(1, 3), (2, 4)]


def test_export_never_writes_onto_an_input(tmp_path):
    """--export DIR writes DIR/group.parquet and DIR/command.txt: refused when either is an input, which is
    left as it was (exit 2, one line); elsewhere the reproducer is written."""

    from rladv_cli.cli import app

    data = write(tmp_path / "group.parquet", {"uid": ["x", "x", "y"], "response_mask": [[1], [1], [1]],
                                              "score": [1.0, 0.0, 1.0]})
    before = data.read_bytes()
    result = runner.invoke(app, ["inspect", str(data), "--uid", "x", "--export", str(tmp_path)])
    assert result.exit_code == 2 and result.output.count("\n") == 1, result.output
    assert "is one of the inputs" in result.output
    assert data.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["group.parquet"]
    out = tmp_path / "repro"
    out.mkdir()
    result = runner.invoke(app, ["inspect", str(data), "--uid", "x", "--export", str(out)])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == ["command.txt", "group.parquet"]
    assert pq.read_table(out / "group.parquet")["uid"].to_pylist() == ["x", "x"]
    # a missing folder is created, but not for a run that fails; a file in its place is refused
    result = runner.invoke(app, ["inspect", str(data), "--uid", "nope", "--export", str(tmp_path / "new")])
    assert result.exit_code == 2 and "nope" in result.output and not (tmp_path / "new").exists()
    result = runner.invoke(app, ["inspect", str(data), "--uid", "x", "--export", str(data)])
    assert result.exit_code == 2 and "exists and is not a folder" in result.output


def test_a_bad_row_elsewhere_stops_the_computation_naming_its_file_and_row(tmp_path):
    """--row/--uid with a whitened estimator computes the whole dataset: a bad row elsewhere is reported as
    compute reports it (file, row within it, column), and the command exits 2 as compute would."""

    from rladv_cli.cli import app

    cols = {"uid": ["a", "a", "b", "b"], "response_mask": [[1, 1], [1], [1, 1], [1, 3]], "score": [1.0, 0.0, 0.5, 0.0],
            "values": [[0.1, 0.2], [0.3], [0.1, 0.2], [0.0, 0.1]]}
    a = write(tmp_path / "a.parquet", {k: v[:2] for k, v in cols.items()})
    b = write(tmp_path / "b.parquet", {k: v[2:] for k, v in cols.items()})
    for args in (["--row", "0", "--estimator", "gae"], ["--uid", "a", "--estimator", "reinforce_plus_plus"]):
        result = runner.invoke(app, ["inspect", str(a), str(b), *args], env={"COLUMNS": "300"})
        assert result.exit_code == 2, result.output
        assert f"compute failed: {b}: row 1, column response_mask: has value 3" in result.output
    assert row_view([a, b], 0, estimator="grpo").error is None  # grpo computes the group alone: row 3 is not read
