"""The catalogue of checks (docs/debugging.md): every code that ``rladv compute``'s report warns with or
``rladv inspect``'s checklist lists, declared once with its step of the debugging order, a one-line title, the
function that words its message from the figures each command computes (the array namespace in compute, numpy
in inspect), its pass line, the estimators it can affect (by the registry's declarations) and its severity; and
the verdict's measures with their levels (``MEASURES``). Both commands take a code's text from here, so a code
has one wording.

``python -m rladv_cli.report.checks docs/debugging.md`` rewrites the doc's tables of checks and of levels
(between their marker comments) from this catalogue; a test fails when they drift apart.
"""
from __future__ import annotations

import inspect
import sys
from dataclasses import dataclass
from types import MappingProxyType
from typing import Callable, Literal, Mapping, Optional

from ..estimators.registry import SINGLETON_EXAMPLES, Estimator, names_where

Limits = tuple[Optional[float], Optional[float]]  # (warn at or above, fail at or above); None: never
Command = Literal["compute", "inspect"]
BOTH: tuple[Command, ...] = ("compute", "inspect")

STEP_TITLES = {
    0: "data contract", 1: "score totals", 2: "KL shaping", 3: "masks", 4: "group sizes",
    5: "all-equal groups", 6: "advantages", 7: "REINFORCE++ credit",
}
# what the all-equal decision compares (inspect's ``groups.basis``, compute's shaped totals or components)
BASES = {"score": "score totals", "kl_shaped": "KL-shaped reward totals",
         "token_level_rewards": "token_level_rewards totals", "shaped": "shaped reward totals",
         "components": "reward components"}


@dataclass(frozen=True)
class Applies:
    """The estimators a check can affect, by a declaration of the registry (``test``); ``who`` words them for
    the docs (None: their names), ``unaffected`` says why another estimator ``{name}`` passes (``{names}``:
    those it applies to)."""

    test: Callable[[Estimator], bool]
    who: Optional[str]
    unaffected: str

    def names(self) -> str:
        return " and ".join(names_where(self.test))

    def words(self) -> str:
        return self.who if self.who is not None else ", ".join(names_where(self.test))

    def __call__(self, est: Optional[Estimator]) -> bool:
        """Whether the check matters for ``est`` (None: no estimator named, so it may)."""
        return est is None or self.test(est)

    def why_not(self, est: Optional[Estimator]) -> str:
        return self.unaffected.format(name=est.name if est else "", names=self.names())


ANY = Applies(lambda e: True, "every estimator", "")
GROUPS = Applies(lambda e: e.groups, "group estimators", "{name} does not use groups")
BASELINE = Applies(lambda e: e.groups, "group estimators", "{name} forms no group baseline for it to enter")
INT_UIDS = Applies(lambda e: e.int_uids, None, "only {names} merges; {name} keeps them apart")
FOLDS = Applies(lambda e: e.folds_sessions, None, "only {names} folds sessions; {name} counts every output row")
DIVIDES = Applies(lambda e: e.std_epsilon(1.0) is not None, None, "{name} does not divide by std + epsilon")
RESETS = Applies(lambda e: "credit_reset_at_mask" in dict(e.row_checks), None, "only {names} resets; {name} is unaffected")
NO_ESTIMATOR = Applies(lambda e: False, "without --estimator", "{name} does not use groups")
BLOCKS = Applies(lambda e: False, "trainers that cut blocks (without --estimator)",
                 "verl groups by uid, so {name}'s advantages do not depend on it")
WHITENED = Applies(lambda e: e.whiten, None, "")
TOKEN_BASELINES = Applies(lambda e: e.rounding is not None, None, "")


@dataclass(frozen=True)
class Definition:
    """One check: ``say(**figures)`` is its message, ``passed`` its line when nothing is flagged (a
    ``str.format`` template over the same figures and ``names``, those of the estimators it applies to)."""

    code: str
    step: int
    title: str
    say: Callable[..., str]
    by: tuple[Command, ...]
    applies: Applies
    passed: str
    severity: Literal["warn", "fail"]

    def message(self, **figures) -> str:
        """The message from ``figures`` (those only the pass line reads are left out)."""
        takes = inspect.signature(self.say).parameters
        return self.say(**{k: v for k, v in figures.items() if k in takes})

    def pass_line(self, **figures) -> str:
        return self.passed.format(names=self.applies.names(), **figures)


CHECKS: dict[str, Definition] = {}


def _check(step: int, title: str, *, by: tuple[Command, ...] = BOTH, applies: Applies = ANY, passed: str = "",
           severity: Literal["warn", "fail"] = "warn"):
    """Declare the decorated function as the check of its name."""
    def declare(say: Callable[..., str]) -> Callable[..., str]:
        CHECKS[say.__name__] = Definition(say.__name__, step, title, say, by, applies, passed, severity)
        return say
    return declare


def group_size_words(reference: Optional[int], unit: str, expected_n: Optional[int]) -> str:
    """The size every group should have: ``--expected-n``, else the common reference size of every batch (None:
    the batches' references differ)."""
    if expected_n is not None:
        return f"{expected_n} {unit} (--expected-n)"
    return f"{reference} {unit}" if reference is not None else f"their batch's most common number of {unit}"


# ==================================================================================== step 0: the data contract
@_check(0, "a row breaking the data contract; left out of everything else", by=("inspect",), severity="fail",
        passed="every row passed the data contract (docs/contract.md §1) on the columns inspect reads")
def invalid_rows(n: int, first: str) -> str:
    return f"{n} row(s) break the data contract and are left out of everything below; first: {first}"


@_check(0, "a contract column of the wrong Arrow type; ignored", by=("inspect",), severity="fail",
        passed="every contract column has an accepted Arrow type")
def invalid_columns(problems: list[str]) -> str:
    return f"{len(problems)} column(s) have the wrong type and are ignored: {'; '.join(problems)}"


@_check(0, "a column the checks or the estimator need is missing", by=("inspect",), severity="fail",
        passed="every column the checks{also} need is present")
def missing_columns(missing: list[str]) -> str:
    return "missing: " + "; ".join(missing)


# ==================================================================================== step 1: score totals
@_check(1, "a non-zero rm_score before the row's last position", by=("inspect",),
        passed="every non-zero rm_score sits on its row's last non-padding position")
def non_terminal_score(n: int) -> str:
    return (f"{n} row(s) have a non-zero rm_score before their last position: expected for a process reward; for an "
            "outcome reward check that the row total is what you meant")


@_check(1, "--convention trl: a row without a score (null or NaN)", by=("compute",))
def unscorable_row(n: int, trainer: str) -> str:
    return (f"{n} row(s) have no score (null or NaN: {trainer}'s unscorable completion): left out of their group's "
            "mean and std, advantage 0 (the report's totals count them as 0)")


# ==================================================================================== step 2: KL shaping
@_check(2, "KL shaping raised a row's total reward", passed="no row's total reward rises through {penalty} shaping")
def kl_raises_reward(n: int, penalty: str) -> str:
    return (f"{n} row(s) whose KL term (the coefficient times the sum of the row's {penalty} estimates) is negative, "
            "so shaping raised their total reward (single tokens' k1/k2 estimates are signed by nature; a row's sum "
            "below 0 means its tokens are overall less likely under the policy than under the reference)")


@_check(2, "KL shaping changed the sign of a row's total reward", passed="KL shaping changes no row's total-reward sign")
def kl_flips_sign(n: int, coef: float) -> str:
    return (f"{n} row(s) changed the sign of their total reward through KL shaping (coefficient {coef:g} too large "
            "for these scores?)")


# ==================================================================================== step 3: masks
def masked_score_fate(est: Optional[Estimator]) -> str:
    """What ``est`` does with a score on a masked position (every estimator's fate without one)."""
    if est is not None:
        return f"{est.name} {'still counts' if est.counts_masked_rewards else 'drops'} it"
    *some, last = names_where(lambda e: not e.counts_masked_rewards and not e.components)
    dropping = f"{', '.join(some)} and {last}" if some else last
    return f"outcome estimators (R_i sums every position) still count it; {dropping} drop it"


@_check(3, "a non-zero score on a position that is not an actor token", passed="every non-zero score sits on a {mask} 1 position")
def score_on_masked_position(n: int, mask: str, est: Optional[Estimator]) -> str:
    return (f"{n} row(s) carry a non-zero score on a {mask} 0 position (a tool observation or padding): "
            + masked_score_fate(est))


@_check(3, "a row without an actor token", passed="every row has a token with {mask} 1")
def row_without_actor_tokens(n: int, mask: str, grouped: bool) -> str:
    return (f"{n} row(s) have no position with {mask} 1: they get no advantage"
            + (" (and still enter their group's baseline)" if grouped else ""))


@_check(3, "a row without an actor token whose score is not 0", by=("inspect",), applies=BASELINE,
        passed="no row without actor tokens carries a score")
def score_on_empty_response(n: int) -> str:
    return (f"{n} row(s) have no actor token but a non-zero score on a padding or masked position (an empty response: "
            "the score went to the last position, which is not the model's): the row gets no advantage, yet its score "
            "enters its group's mean and std and moves the others' advantages")


@_check(3, "rollout rejection removed every actor token of a row",
        passed="every row with loss_mask 1 somewhere keeps a response_mask 1 token")
def row_fully_rejected(n: int, grouped: bool) -> str:
    return (f"{n} row(s) lost every actor token to rollout rejection (response_mask 0 on every actor token): they get "
            "no advantage" + (" and still enter their group's baseline" if grouped else ""))


@_check(3, "response_mask drops loss_mask tokens", by=("inspect",), passed="loss_mask equals response_mask everywhere")
def loss_mask_differs(n: int, tokens: int) -> str:
    return (f"{n} row(s) where response_mask drops {tokens} loss_mask token(s) (rollout-rejected tokens in an rladv or "
            "verl output; compute's estimator leaves them out)")


@_check(3, "a row with rejected tokens still enters its group's baseline", by=("compute",), applies=GROUPS)
def rejected_in_group_baseline(n: int) -> str:
    return f"{n} row(s) with rejected tokens still contribute their full reward to their group's baseline"


# ==================================================================================== step 4: group sizes
@_check(4, "no uid column: the group checks did not run", by=("inspect",), applies=NO_ESTIMATOR)
def no_groups() -> str:
    return ("no uid column: no groups, so the group checks (steps 4-5) did not run and "
            f"{', '.join(names_where(lambda e: e.groups))} cannot run on this dataset (--column uid=COLUMN names your "
            "prompt-id column)")


@_check(4, "a batch whose groups differ in size", applies=GROUPS, passed="every uid group has {size}")
def group_size_mismatch(off: int, groups: int, batches: int, size: str, sizes: Mapping[int, int], unit: str,
                        expected: bool, folding: bool = False) -> str:
    hist = ", ".join(f"{k} {unit} x{v}" for k, v in sorted(sizes.items()))
    return (f"{off} of {groups} uid group(s) in {batches} batch(es) do not have {size}"
            + ("" if expected else " (the most common size)")
            + f", their first rows shown; sizes: {hist}. Check that every prompt got rollout.n samples"
            + (f"; with multi-output sessions {FOLDS.names()} counts sessions, other estimators count output rows"
               if folding else ""))


@_check(4, "a step whose row count is not a multiple of the group size", by=("inspect",), applies=BLOCKS,
        passed="every step's row count is a multiple of the most common group size ({modal})")
def batch_not_multiple_of_group(n: int, modal: int, shown: str) -> str:
    return (f"{n} step(s) have a row count that is not a multiple of the most common group size {modal} ({shown}): "
            f"samples were dropped or groups split; a trainer that cuts the batch into blocks of {modal} (TRL, "
            "OpenRLHF) groups rows of different prompts from the first short group on")


@_check(4, "a uid group whose rows hold different prompts", by=("inspect",), applies=GROUPS,
        passed="every uid group's rows share one prompt")
def uid_spans_prompts(n: int) -> str:
    return (f"{n} uid group(s) hold rows of different prompts (the prompts column differs within the group): their "
            "baseline mixes prompts of different difficulty. Is uid the prompt's id?")


@_check(4, "without a batch key, a uid group with rows in several files", applies=GROUPS,
        passed="every uid group's rows are in one file")
def uid_spans_files(groups: int, members: int) -> str:
    return (f"{groups} uid group(s) ({members} row(s)) have rows in several input files, and no batch key splits them: if "
            "each file is a training step, each such group merges a prompt's samples across steps (give --batch-key "
            "COLUMN, or uids unique per step as verl's are)")


@_check(4, "a block of --group-size rows holding several uids", by=("compute",))
def block_mixes_uids(n: int, trainer: str) -> str:
    return (f"{n} block(s) of {trainer}'s consecutive --group-size rows hold rows of more than one uid: the file is "
            f"not in the order {trainer} grouped it, or --group-size is not its group size; these blocks' baselines "
            "mix prompts")


@_check(4, "a uid group of one row: no group baseline", applies=GROUPS, passed="no uid group has a single row")
def singleton_group(groups: int, est: Optional[Estimator]) -> str:
    rule = est.singleton if est is not None and est.singleton else SINGLETON_EXAMPLES
    return (f"{groups} uid group(s) have one row, so there is no group baseline; "
            f"{est.name + ': ' if est is not None else ''}{rule}")


@_check(4, "distinct uids that verl converts to one integer", applies=INT_UIDS,
        passed="no two uids would be merged by verl's {names}")
def uid_merge_grpo_vectorized(merges: list[tuple]) -> str:
    shown = "; ".join("/".join(repr(u) for u in m) for m in merges[:3])
    return (f"{len(merges)} set(s) of distinct uids that verl's {INT_UIDS.names()} converts to one integer and merges "
            f"into one group ({shown}); rladv merges them too, as verl does")


@_check(4, "two (uid, session_id) pairs that join to one verl session key", applies=FOLDS,
        passed="no two (uid, session_id) pairs join to the same verl session key")
def session_key_collision(collisions: list[list[tuple[int, object]]], uids: Mapping[int, object]) -> str:
    """``collisions``: the (group id, session_id) pairs sharing each key (``Labels.session_key_collisions``)."""
    ordered = sorted((sorted(pairs, key=repr) for pairs in collisions), key=repr)
    shown = "; ".join(" and ".join(f"({uids[g]!r}, {s!r})" for g, s in pairs) for pairs in ordered[:3])
    return (f"{len(collisions)} verl session key(s) f'{{uid}}_{{session_id}}' shared by two or more sessions ({shown}): "
            "verl 0.9.1 folds them into one session, rladv keeps them apart (ids from verl, an integer session_id, "
            "never collide)")


# ==================================================================================== step 5: all-equal groups
@_check(5, "a group of 2+ rows whose totals are all equal", applies=GROUPS, passed="no group of 2+ rows has equal {basis}")
def all_equal_group(groups: int, basis: str, before_shaping: Optional[int], multi: int, all_zero: int,
                    all_top: int) -> str:
    """``basis``: a key of ``BASES``; ``before_shaping``: the groups tied by score totals (None: no shaping);
    ``multi``: the groups of 2+ rows, of which ``all_zero`` are all 0 and ``all_top`` all at the top reward."""
    ratios = (f"; of the {multi} groups of 2+ rows, {all_zero / multi:.1%} are all 0 (too hard?) and "
              f"{all_top / multi:.1%} all at the batch's top reward (too easy?)") if groups and multi else ""
    return (f"{groups} group(s) of 2+ rows have equal {BASES[basis]}"
            + (f" ({before_shaping} by score totals before shaping)" if before_shaping is not None else "")
            + ": R - mean = 0, no learning signal from them (float32 rounding can leave tiny non-zero advantages, "
              "as in verl)" + ratios)


@_check(5, "an all-equal group whose rows' tool rewards differ", applies=GROUPS,
        passed="no all-equal group has rows whose tool_rewards differ")
def tool_rewards_not_in_score(groups: int, basis: str) -> str:
    return (f"{groups} all-equal group(s) have rows whose tool_rewards differ: a signal the {BASES[basis]} leave out "
            "(verl never adds tool rewards; rladv compute --tool-reward-coef C adds C * their sum to each row's score)")


@_check(5, "a group whose reward std is above 0 but at most 9 x epsilon", by=("inspect",), applies=DIVIDES,
        passed="no group's reward std is within 9 x epsilon ({epsilon:g}) of 0 without being 0")
def epsilon_dominated_std(n: int, epsilon: float, detail: str) -> str:
    return (f"{n} group(s) have a reward std above 0 but at most 9 x epsilon ({epsilon:g}){detail}: epsilon makes a "
            "tenth or more of the denominator std + eps, so epsilon and float32 rounding, not the spread, set the "
            "advantages' size; a near tie (a verifier's rounding) passes for signal, and with a smaller epsilon "
            "becomes a full-size one")


@_check(5, "a group tied on its scores whose shaped totals differ", by=("inspect",), applies=GROUPS,
        passed="no group's advantages come from the shaping alone")
def kl_only_signal(n: int, shaping: str) -> str:
    return (f"{n} group(s) tie on their scores but not on their shaped totals: their advantages come from {shaping} "
            "alone (zero-std groups that still get updates, with no signal from the task)")


# ==================================================================================== step 6: advantages
@_check(6, "a non-zero advantage where response_mask is 0", by=("inspect",), severity="fail",
        passed="advantages are 0 wherever response_mask is 0")
def advantage_on_masked_position(n: int, tokens: int) -> str:
    return (f"{n} row(s) have a non-zero advantage on a response_mask 0 position ({tokens} token(s)): "
            "observation/padding tokens would be trained on (verl's GAE does this before masking in the loss)")


@_check(6, "one float32 ulp of a batch's whitening mean moves advantages by 1e-6 or more", by=("compute",),
        applies=WHITENED)
def whitening_ill_conditioned(batches: int, worst: float) -> str:
    return (f"{batches} batch(es) whiten values whose spread is tiny next to their size: one float32 ulp of the batch "
            f"mean moves every advantage by up to {worst:.1e}. verl sums the mean in float32 in an order rladv cannot "
            "follow (rladv: float64), so its advantages differ from rladv's by a few such steps; all values equal "
            "gives rladv 0 and verl float32 noise")


@_check(6, "one float32 rounding of a group's per-position sums moves the baseline by 1e-6 or more", by=("compute",),
        applies=TOKEN_BASELINES)
def baseline_ill_conditioned(groups: int, worst: float) -> str:
    return (f"{groups} group(s) have positions where the baseline's weights Σ_i W[i,t] nearly cancel (w = 1 - 2π + Σπ² "
            "is negative where sum_pi_squared < π², which a policy's own Σπ² never is): one float32 rounding of its "
            f"sums moves the baseline, and the advantages, by up to {worst:.1e}. verl sums them in float32 (rladv: "
            "float64), so its advantages there differ from rladv's by about that much")


@_check(6, "an actor token whose optimal-baseline weight is negative", by=("compute",), applies=TOKEN_BASELINES)
def negative_token_weight(n: int) -> str:
    return (f"{n} row(s) have an actor token whose optimal-baseline weight w = 1 - 2π + sum_pi_squared is negative: "
            "sum_pi_squared is below π² = exp(old_log_prob)² there, which a policy's own Σπ² never is (another "
            "temperature or policy?); such weights can cancel in a group's baseline")


# ==================================================================================== step 7: REINFORCE++ credit
@_check(7, "a reward that reaches earlier actor tokens only across a mask-0 position", applies=RESETS,
        passed="no reward sits on an actor token after a mask-0 position that follows a response_mask 1 token")
def credit_reset_at_mask(n: int, mode: str = "carry") -> str:
    """``mode``: the ``--rpp-mask-mode`` compute ran (inspect predicts both modes, as carry words it)."""
    if mode == "reset":
        return (f"{n} row(s): {RESETS.names()} in reset mode cut a reward off from earlier tokens at a mask-0 position "
                "(--rpp-mask-mode carry passes it through, as verl 0.9.1 does)")
    return (f"{n} row(s) have a reward on an actor token after a response_mask 0 position that follows a response_mask 1 "
            f"token: {RESETS.names()} passes it back to the earlier tokens as verl 0.9.1 does (--rpp-mask-mode carry, "
            "the default); --rpp-mask-mode reset (verl before 0.9, the chapter) would cut it off there")


# ==================================================================================== the verdict's levels
@dataclass(frozen=True)
class Measure:
    """The verdict's levels of one code (docs/debugging.md, "Levels"): what it measures, ``limits`` (warn at or
    above, fail at or above; None: never) and why they sit there."""

    code: str
    measure: str
    limits: Limits
    why: str


MEASURES: Mapping[str, Measure] = MappingProxyType({m.code: m for m in (
    Measure("no_signal", "share of actor tokens without signal", (0.50, 0.75),
          "half the batch's compute teaches nothing; at three quarters the step is mostly dead"),
    Measure("rejected", "share removed by rollout rejection", (0.10, 0.50),
          "each point is a sampled token thrown away; a tenth means the rollout and training policies have drifted "
          "apart"),
    Measure("no_uid", "every token of a group estimator without `uid`", (0.0, 0.0), "nothing can be learned"),
    Measure("singleton_group", "share in one-row groups", (0.05, 0.50),
          "a healthy batch has none; one prompt in 400 sampled once (0.25%) is a note, 5% means prompts are dropped "
          "or the uid is wrong"),
    Measure("all_equal_group", "share in all-equal groups", (0.50, 0.75), "see below"),
    Measure("kl_only_group", "share whose groups differ only by KL", (0.05, 0.50),
          "the update pulls toward the reference with no task signal"),
    Measure("epsilon_tie_group", "share whose groups nearly tie", (0.05, 0.50),
          "epsilon and rounding, not the task, set those advantages"),
    Measure("zero_advantage", "other tokens with advantage exactly 0", (0.10, 0.50),
          "the estimator's own zeros (grpo_passk's non-best rows) are expected, a tenth is worth a look"),
    Measure("length_bias", "how much more (or less) a token of the longest tenth of the rows weighs than the average, "
          "as a factor ≥ 1", (2.0, None),
          "twice the average is where the aggregation (or the advantages) clearly favours long or short answers; it "
          "never fails: training still learns"),
    Measure("mass_concentration", "share of the gradient mass on the heaviest 5% of the rows (with 20 rows or more)",
          (0.50, None), "a handful of rows steer the update"),
    Measure("truncated_negative_mass", "share of the negative mass on truncated rows, counted when it is at least twice "
          "their share of the tokens", (0.50, None),
          "the update mostly pushes away from answers cut at the length limit: a length penalty in disguise"),
)})


# ==================================================================================== docs/debugging.md
def _limit(x: Optional[float], factor: bool) -> str:
    if x is None:
        return "–"
    return f"{x:g}" if factor else "any" if x == 0 else f"{x:.0%}"


def checks_table() -> str:
    """The Markdown table of every check, in the debugging order."""
    lines = ["| step | check | flags | raised by | for |", "|---|---|---|---|---|"]
    for c in sorted(CHECKS.values(), key=lambda c: c.step):
        lines.append(f"| {c.step} {STEP_TITLES[c.step]} | `{c.code}` | {c.title} | {' and '.join(c.by)} | "
                     f"{c.applies.words()} |")
    return "\n".join(lines) + "\n"


def levels_table() -> str:
    """The Markdown table of the verdict's levels."""
    lines = ["| check | measure | warn | fail | why there |", "|---|---|---|---|---|"]
    for v in MEASURES.values():
        factor = v.code == "length_bias"
        lines.append(f"| `{v.code}` | {v.measure} | {_limit(v.limits[0], factor)} | {_limit(v.limits[1], factor)} | "
                     f"{v.why} |")
    return "\n".join(lines) + "\n"


TABLES = {"checks": checks_table, "levels": levels_table}


def with_tables(doc: str) -> str:
    """``doc`` with each table of ``TABLES`` written between its ``<!-- NAME:begin -->`` and ``<!-- NAME:end -->``."""
    for name, render in TABLES.items():
        begin, end = f"<!-- {name}:begin -->\n", f"<!-- {name}:end -->"
        head, found, rest = doc.partition(begin)
        if not found or end not in rest:
            raise ValueError(f"no {begin.strip()} ... {end} in the document")
        doc = head + begin + render() + end + rest.split(end, 1)[1]
    return doc


if __name__ == "__main__":  # python -m rladv_cli.report.checks docs/debugging.md
    with open(sys.argv[1], encoding="utf-8") as f:
        text = with_tables(f.read())
    with open(sys.argv[1], "w", encoding="utf-8") as f:
        f.write(text)
