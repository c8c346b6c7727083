"""The verdict (docs/debugging.md "The verdict"): ``judge`` on hand-built rows, every number checked by hand."""
from __future__ import annotations

import numpy as np
import pytest

from rladv_cli.report.verdict import THRESHOLDS, Context, RowsToJudge, judge, level_for, pct


def ctx(estimator="grpo", uses_groups=True, steps=()):
    return Context(estimator=estimator, uses_groups=uses_groups, singleton_rule="advantage R/(1+eps)",
                   row_command=lambda r: f"explain --row {r}", group_command=lambda g: f"inspect --uid g{g}",
                   step_names=list(steps))


def rows(actor, used=None, zero=None, group=None, reward=None, **more):
    actor = np.asarray(actor)
    return RowsToJudge(actor=actor, used=np.asarray(actor if used is None else used),
                       zero=None if zero is None else np.asarray(zero),
                       group=None if group is None else np.asarray(group),
                       reward=None if reward is None else np.asarray(reward, dtype=np.float64),
                       dataset_row=np.arange(actor.size), **more)


def test_the_inspect_fixture_by_hand():
    """tests/diagnose/test_inspect.py's with_advantages: 15 actor tokens; 3 rejected (rows 3 and 5), group b
    a singleton (2 tokens), group a all-equal at 1 (3 tokens), one other zero advantage (row 8): 6 with signal."""
    r = rows(actor=[2, 1, 2, 3, 2, 2, 1, 1, 1], used=[2, 1, 2, 2, 2, 0, 1, 1, 1],
             zero=[2, 1, 2, 0, 0, 0, 0, 0, 1], group=[0, 0, 1, 2, 2, 3, 3, 4, 4],
             reward=[1, 1, 0, 1, 0, 1, 0, 0.2, 0.5])
    v = judge(r, ctx())
    assert (v.actor_tokens, v.signal_tokens, v.signal_rows, v.groups, v.signal_groups) == (15, 6, 4, 5, 3)
    assert v.signal_share == pytest.approx(0.4)
    assert v.level == "warn"  # 60% without signal: at least 50%, below 75%
    assert v.headline == "40.0% of actor tokens (4 of 9 rows, 3 of 5 groups) carry learning signal under grpo"
    # the largest first; a tie (rejected and all-equal hold 3 tokens each) goes to the one with groups. Each at
    # its own thresholds: all-equal 20% < 50% is a note, rejected 20% >= 10% warns, singletons 13% >= 5% warn,
    # other zeros 6.7% < 10% is a note
    assert [(c.code, c.tokens, c.level) for c in v.causes] == [
        ("all_equal_group", 3, "note"), ("rejected", 3, "warn"), ("singleton_group", 2, "warn"),
        ("zero_advantage", 1, "note")]
    by = {c.code: c for c in v.causes}
    assert by["all_equal_group"].example == "inspect --uid g0" and by["all_equal_group"].groups == 1
    assert by["rejected"].rows == 2 and by["rejected"].example == "explain --row 3"
    assert by["zero_advantage"].example == "explain --row 8"
    assert by["singleton_group"].share == pytest.approx(2 / 15)
    g = v.group_outcomes  # groups of 2+ rows: a (all 1 = the top), c, d, e mixed
    assert (g.groups, g.all_zero, g.all_top, g.all_equal_other, g.mixed) == (4, 0.0, 0.25, 0.0, 0.75)


def test_one_singleton_in_a_thousand_groups_is_a_note_all_singletons_fail_with_the_cause_named():
    n = 1000
    group = np.repeat(np.arange(n), 2)[:-1]  # the last group has one row
    reward = np.tile([0.0, 1.0], n)[:-1]
    v = judge(rows(actor=np.full(group.size, 10), group=group, reward=reward), ctx())
    assert [c.code for c in v.causes] == ["singleton_group"]
    assert v.causes[0].level == "note" and v.level == "note" and v.causes[0].groups == 1
    assert v.causes[0].share == pytest.approx(10 / (10 * group.size))
    v = judge(rows(actor=[5, 5, 5], group=[0, 1, 2], reward=[0, 1, 1]), ctx())
    assert v.level == "fail" and v.signal_share == 0 and v.causes[0].code == "singleton_group"
    assert any("every row has its own uid" in h for h in v.hints)


def test_each_check_has_its_own_levels():
    assert [level_for("singleton_group", x) for x in (0, 0.01, 0.05, 0.2, 0.5, 1)] == [
        "ok", "note", "warn", "warn", "fail", "fail"]
    assert [level_for("all_equal_group", x) for x in (0.125, 0.49, 0.5, 0.75)] == ["note", "note", "warn", "fail"]
    assert [level_for("no_signal", x) for x in (0.2, 0.5, 0.74, 0.75)] == ["note", "warn", "warn", "fail"]
    assert level_for("no_uid", 0.01) == "fail"
    assert [level_for("length_bias", x) for x in (1.5, 2.0, 50.0)] == ["note", "warn", "warn"]  # never fails
    mine = {**THRESHOLDS, "all_equal_group": (0.1, 0.2)}
    assert [level_for("all_equal_group", x, mine) for x in (0.05, 0.125, 0.2)] == ["note", "warn", "fail"]
    assert level_for("rejected", 0.9, {**THRESHOLDS, "rejected": (None, None)}) == "note"
    assert [pct(x) for x in (0, 1, 0.0004, 0.9996, 0.1234)] == ["0%", "100%", "<0.1%", ">99.9%", "12.3%"]


def test_random_binary_rewards_in_groups_of_four_do_not_warn():
    """Four samples of a coin flip tie 2 x 0.5^4 = 12.5% of the time: the floor of a healthy batch, a note."""
    rng = np.random.default_rng(0)
    groups = 400
    reward = rng.integers(0, 2, 4 * groups).astype(float)
    v = judge(rows(actor=np.full(4 * groups, 20), group=np.repeat(np.arange(groups), 4), reward=reward), ctx())
    tied = {c.code: c for c in v.causes}["all_equal_group"]
    assert 0.08 < tied.share < 0.17 and tied.level == "note" and v.level == "note"
    assert not v.at_least("warn")


def test_one_singleton_among_400_groups_does_not_warn_and_levels_are_configurable():
    group = np.append(np.repeat(np.arange(399), 4), 399)
    reward = np.append(np.tile([0.0, 1.0, 0.0, 1.0], 399), 1.0)
    r = rows(actor=np.full(group.size, 10), group=group, reward=reward)
    v = judge(r, ctx())
    assert [(c.code, c.level) for c in v.causes] == [("singleton_group", "note")] and v.level == "note"
    strict = Context(**{**ctx().__dict__, "thresholds": {**THRESHOLDS, "singleton_group": (0.0001, 0.5)}})
    assert judge(r, strict).level == "warn"


def test_group_outcomes_are_ratios_of_the_groups_of_two_or_more():
    # groups: 0 and 1 all 0, 2 all at the top (2.0), 3 all 0.5, 4 mixed, 5 a singleton (not counted)
    group = [0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5]
    reward = [0, 0, 0, 0, 2, 2, 0.5, 0.5, 0, 2, 1]
    v = judge(rows(actor=[1] * 11, group=group, reward=reward), ctx())
    g = v.group_outcomes
    assert (g.groups, g.all_zero, g.all_top, g.all_equal_other, g.mixed) == (5, 0.4, 0.2, 0.2, 0.2)
    by = {c.code: c for c in v.causes}
    assert by["all_equal_group"].groups == 4 and by["all_equal_group"].tokens == 8
    assert "2 all 0: too hard?; 1 all at the top score: too easy?" in by["all_equal_group"].message
    assert by["all_equal_group"].level == "warn"  # 8 of 11 tokens: 73%, at least 50%, below 75%
    assert v.level == "fail" and v.signal_tokens == 2  # 9 of 11 tokens without signal: 82%


def test_every_reward_zero_fails_with_its_hint():
    v = judge(rows(actor=[3] * 4, group=[0, 0, 1, 1], reward=[0] * 4), ctx())
    assert v.level == "fail" and v.group_outcomes.all_zero == 1
    assert any(h.startswith("every reward is 0") for h in v.hints)


def test_no_uid_for_a_group_estimator_is_every_token():
    v = judge(rows(actor=[3, 4], reward=[0, 1]), ctx(), no_uid=True)
    assert [(c.code, c.tokens, c.level) for c in v.causes] == [("no_uid", 7, "fail")]
    assert v.groups is None and v.level == "fail" and any("--column uid=COLUMN" in h for h in v.hints)


def test_an_estimator_without_groups_ignores_them():
    v = judge(rows(actor=[3, 4], zero=[0, 4], group=[0, 1], reward=[0, 1]), ctx("gae", uses_groups=False))
    assert [c.code for c in v.causes] == ["zero_advantage"] and v.groups is None
    assert v.signal_tokens == 3 and v.headline.endswith("under gae")


def test_rejection_comes_first_and_its_tokens_are_not_counted_twice():
    # row 0: 4 actor tokens, 1 used; its group is all-equal: 3 rejected + 1 all-equal, not 4 + 1
    v = judge(rows(actor=[4, 4], used=[1, 4], group=[0, 0], reward=[1, 1]), ctx())
    assert {c.code: c.tokens for c in v.causes} == {"rejected": 3, "all_equal_group": 5}
    assert v.signal_tokens == 0


def test_kl_only_groups_tie_on_scores_not_on_shaped_totals():
    # group 0 ties on its scores, its KL-shaped totals differ; group 1 differs on both
    v = judge(rows(actor=[2, 2, 2, 2], group=[0, 0, 1, 1], reward=[0.99, 0.98, 1.0, 0.0],
                   all_equal=np.array([False, False]), score_equal=np.array([True, False])), ctx())
    assert [(c.code, c.tokens, c.groups) for c in v.causes] == [("kl_only_group", 4, 1)]
    assert v.signal_tokens == 4 and v.level == "fail"


def test_per_step_shares():
    # step 0: one mixed group; step 1: one all-0 group and a singleton
    v = judge(rows(actor=[2, 2, 2, 2, 2], group=[0, 0, 1, 1, 2], reward=[0, 1, 0, 0, 1],
                   step=np.array([0, 0, 1, 1, 1]), kl=np.array([0.1, 0.3, 0.0, 0.0, 0.5])),
              ctx(steps=["s0", "s1"]))
    s0, s1 = v.steps
    assert (s0.step, s0.rows, s0.signal_share, s0.level, s0.all_zero_share, s0.singleton_share) == (
        "s0", 2, 1.0, "ok", 0.0, 0.0)
    assert (s1.step, s1.rows, s1.signal_share, s1.level, s1.all_zero_share, s1.singleton_share) == (
        "s1", 3, 0.0, "fail", 1.0, 0.5)
    assert s0.kl_mean == pytest.approx(0.2) and s1.kl_mean == pytest.approx(0.5 / 3)
    assert judge(rows(actor=[1, 1], group=[0, 0], reward=[0, 1], step=np.array([0, 0])), ctx(steps=["s0"])).steps is None


def test_the_terminal_shows_the_first_and_last_steps_and_names_the_worst():
    import io

    from rich.console import Console

    from rladv_cli.report.verdict import TERMINAL_STEPS, render_verdict

    n_steps, per = 2 * TERMINAL_STEPS + 5, 4
    B = n_steps * per
    reward = np.tile([0.0, 1.0], B // 2)
    reward[12 * per:13 * per] = 0  # step 12 (hidden in the middle) collapses to all-0 groups
    v = judge(rows(actor=[1] * B, group=np.arange(B) // 2, reward=reward, step=np.arange(B) // per),
              ctx(steps=[f"s{i}" for i in range(n_steps)]))
    c = Console(file=io.StringIO(), width=120)
    render_verdict(v, c)
    out = c.file.getvalue()
    assert f"first and last {TERMINAL_STEPS} of {n_steps}" in out
    assert "\n s9 " in out and "\n s12 " not in out and "\n s24 " in out
    assert "lowest signal: s12 (0%); first failing step: s12" in out
    assert len(v.steps) == n_steps and v.steps[12].all_zero_share == 1.0


def test_near_ties_count_as_no_signal_for_an_estimator_that_divides_by_std():
    # group 0: 0.35 three times and a hair above (std ~5e-7 <= 9e-6); group 1 a real spread
    reward = [0.35, 0.35, 0.35, 0.350001, 0.0, 1.0]
    r = rows(actor=[2] * 6, group=[0, 0, 0, 0, 1, 1], reward=reward)
    c = Context(estimator="grpo", uses_groups=True, singleton_rule=None, row_command=str, group_command=str,
                epsilon=1e-6)
    v = judge(r, c)
    assert [(x.code, x.tokens, x.groups) for x in v.causes] == [("epsilon_tie_group", 8, 1)]
    assert v.signal_tokens == 4 and "9 x epsilon (1e-06)" in v.causes[0].message
    assert judge(r, ctx()).causes == []  # no epsilon: an estimator that does not divide by the std
    # the rule is std <= 9 eps: a spread of 1e-4 is real signal at eps 1e-6, a near tie at eps 1e-4
    wide = rows(actor=[1, 1], group=[0, 0], reward=[0.0, 1e-4])
    assert judge(wide, c).causes == []
    assert judge(wide, Context(**{**c.__dict__, "epsilon": 1e-4})).causes[0].code == "epsilon_tie_group"
