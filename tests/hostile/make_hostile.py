"""A seeded generator of hostile inputs for ``rladv compute`` (issue 7, item 1).

``build_cases(root, seed)`` writes every dataset it needs under ``root/<case id>/`` (one folder per case, so a
test can check that nothing appears in it and that nothing in it changes) and returns the cases: the argument
list to give ``rladv``, what must happen, and what the one-line message must name. Nothing binary is committed:
every file is made here, at test time, from ``seed``.

Run as a script to materialise the cases and print them::

    python tests/hostile/make_hostile.py /tmp/hostile [--seed N]

Categories (``Case.category``): ``contract`` (docs/contract.md §1 row/column errors), ``missing`` (inputs the chosen
stages need), ``types`` (wrong Arrow types), ``empty`` (zero rows, rows of length 0), ``files`` (truncated,
non-Parquet, folders), ``schemas`` (files of one dataset that disagree), ``options`` (out of range or unknown),
``output`` (``-o``/``--report`` that cannot be written), ``raises`` (docs/semantics.md: where verl raises), and
``accepted`` (legal but unusual data that must be computed, e.g. integer scores).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

SEED = 20250607

F32 = pa.list_(pa.float32())
I8 = pa.list_(pa.int8())
ESTIMATOR_COLUMNS = ("uid", "response_mask", "rm_scores", "values", "old_log_probs", "ref_log_prob",
                     "rollout_log_probs", "sum_pi_squared", "reward_baselines", "acc", "fmt", "step", "note")


@dataclass
class Case:
    """One hostile run: ``rladv *args`` inside folder ``dir``.

    expect:  ``error`` (non-zero exit, one short message) or ``ok`` (exit 0, output written).
    named:   substrings the error message must contain (a file path, an option, a column, a path).
    row, column: the 0-based row within the file and the column the message must name (``row N`` /
             ``column C``), when the problem sits in one row / column.
    output:  for ``ok`` cases, where the output must appear.
    xfail:   a reason when the case shows a known rladv bug (the test then expects the failure, strictly).
    """

    id: str
    category: str
    dir: Path
    args: list[str]
    expect: str = "error"
    named: tuple[str, ...] = ()
    row: Optional[int] = None
    column: Optional[str] = None
    output: Optional[Path] = None
    xfail: Optional[str] = None
    note: str = ""

    def as_json(self) -> dict:
        return {k: (str(v) if isinstance(v, Path) else v) for k, v in self.__dict__.items()}


# ----------------------------------------------------------------------------------------------- data
def base_columns(rng: np.random.Generator, n: int = 8) -> dict:
    """A valid dataset that every estimator accepts: ``n`` rows (``n`` even) in uid groups of two, ragged rows
    of 3..9 tokens with tool-observation spans (every row keeps at least two actor tokens), token-level scores,
    every optional column an estimator or stage reads, two batches in ``step``, and a carried-through ``note``."""
    lengths = [int(x) for x in rng.integers(3, 10, n)]
    masks = []
    for L in lengths:
        m = [1] * L
        if L >= 5:  # a tool observation in the middle
            a = int(rng.integers(1, L - 3))
            m[a:a + 2] = [0, 0]
        masks.append(m)

    def floats(lo, hi):
        return [[float(np.float32(x)) for x in rng.uniform(lo, hi, L)] for L in lengths]

    scores = [[0.0] * (L - 1) + [float(rng.integers(0, 3))] for L in lengths]
    return {
        "uid": [f"q{i // 2}" for i in range(n)],
        "response_mask": masks,
        "rm_scores": scores,
        "values": floats(-1, 1),
        "old_log_probs": floats(-2, -0.1),
        "ref_log_prob": floats(-2, -0.1),
        "rollout_log_probs": floats(-2, -0.1),
        "sum_pi_squared": floats(0.1, 1),
        "reward_baselines": [float(np.float32(x)) for x in rng.uniform(0, 1, n)],
        "acc": [float(x) for x in rng.integers(0, 2, n)],
        "fmt": [float(np.float32(x)) for x in rng.uniform(0, 1, n)],
        "step": [i % 2 for i in range(n)],
        "note": [f"row-{i}" for i in range(n)],
    }


DEFAULT_TYPES = {
    "uid": pa.string(), "note": pa.string(), "step": pa.int64(), "score": pa.float32(),
    "reward_baselines": pa.float32(), "acc": pa.float64(), "fmt": pa.float64(),
    "response_mask": I8, "attention_mask": I8, "loss_mask": I8, "responses": pa.list_(pa.int32()),
    "session_id": pa.string(), "output_index": pa.int64(),
}


def write_table(path: Path, cols: dict, types: Optional[dict] = None) -> Path:
    """Write ``cols`` (name -> python list) as one Parquet file; types default to ``DEFAULT_TYPES``, other
    columns to ``list<float32>``."""
    types = {**DEFAULT_TYPES, **(types or {})}
    arrays = {name: pa.array(values, type=types.get(name, F32)) for name, values in cols.items()}
    pq.write_table(pa.table(arrays), path)
    return path


def copy_cols(cols: dict) -> dict:
    return {k: [list(v) if isinstance(v, list) else v for v in vals] for k, vals in cols.items()}


# ------------------------------------------------------------------------------------------- builder
class Builder:
    """Collects cases; each ``add_*`` helper makes the case folder and the files in it."""

    def __init__(self, root: Path, seed: int):
        self.root = Path(root)
        self.rng = np.random.default_rng(seed)
        self.cases: list[Case] = []

    # folders and files
    def folder(self, case_id: str) -> Path:
        d = self.root / case_id
        if d.exists():
            shutil.rmtree(d)
        d.mkdir(parents=True)
        return d

    def cols(self, n: int = 8) -> dict:
        return base_columns(self.rng, n)

    def row(self, n: int = 8) -> int:
        """A seeded row to break, never row 0 (so an off-by-one or a missing row number shows)."""
        return int(self.rng.integers(1, n))

    def pos(self, cols: dict, row: int, column: str = "response_mask") -> int:
        return int(self.rng.integers(0, len(cols[column][row])))

    def add(self, case: Case) -> Case:
        assert case.id not in {c.id for c in self.cases}, case.id
        self.cases.append(case)
        return case

    # one bad file, one run
    def data_case(self, case_id: str, category: str, mutate: Callable[[dict], None], estimator: str,
                  *extra: str, row: Optional[int] = None, column: Optional[str] = None,
                  types: Optional[dict] = None, n: int = 8, named: tuple[str, ...] = (), expect: str = "error",
                  xfail: Optional[str] = None, note: str = "") -> Case:
        d = self.folder(case_id)
        cols = copy_cols(self.cols(n))
        mutate(cols)
        path = write_table(d / "data.parquet", cols, types)
        out = d / "out.parquet"
        args = ["compute", str(path), "--estimator", estimator, "-o", str(out), "--report", str(d / "report.json"),
                "-q", *extra]
        # a dataset-wide computation error (category "raises") names its cause (estimator, batch, group), not a file
        names = (str(path), *named) if expect == "error" and category != "raises" else named
        return self.add(Case(case_id, category, d, args, expect=expect, named=names, row=row, column=column,
                             output=out if expect == "ok" else None, xfail=xfail, note=note))

    def option_case(self, case_id: str, named: tuple[str, ...], *options: str, estimator: Optional[str] = "grpo",
                    xfail: Optional[str] = None, note: str = "") -> Case:
        d = self.folder(case_id)
        path = write_table(d / "data.parquet", self.cols())
        args = ["compute", str(path), *(["--estimator", estimator] if estimator else []), "-o", str(d / "out.parquet"),
                "--report", str(d / "report.json"), "-q", *options]
        return self.add(Case(case_id, "options", d, args, named=named, xfail=xfail, note=note))


# -------------------------------------------------------------------------------------------- cases
def _set(column, row, value):
    def f(c):
        c[column][row] = value
    return f


def _set_token(column, row, pos, value):
    def f(c):
        c[column][row][pos] = value
    return f


def _drop(*columns):
    def f(c):
        for name in columns:
            del c[name]
    return f


def _all(*mutations):
    def f(c):
        for m in mutations:
            m(c)
    return f


def _scalar_score(c):
    c["score"] = [float(r[-1]) for r in c.pop("rm_scores")]


def _padded(c):
    """An ``attention_mask`` of ones (no padding yet); the caller then breaks it."""
    c["attention_mask"] = [[1] * len(r) for r in c["response_mask"]]


def contract_cases(b: Builder) -> None:
    """docs/contract.md §1: null lists, nulls in lists, length mismatches, masks outside {0,1}, NaN/inf, padding."""
    n = 8
    r = b.row(n)
    b.data_case("null-response_mask", "contract", _set("response_mask", r, None), "grpo", row=r, column="response_mask")
    r = b.row(n)
    b.data_case("null-rm_scores", "contract", _set("rm_scores", r, None), "grpo", row=r, column="rm_scores")
    r = b.row(n)
    b.data_case("null-values", "contract", _set("values", r, None), "gae", row=r, column="values")
    r = b.row(n)
    b.data_case("null-in-rm_scores", "contract", _set_token("rm_scores", r, 0, None), "grpo", row=r, column="rm_scores")
    r = b.row(n)
    b.data_case("null-in-response_mask", "contract", _set_token("response_mask", r, 0, None), "grpo", row=r,
                column="response_mask")
    r = b.row(n)
    b.data_case("null-uid", "contract", _set("uid", r, None), "grpo", row=r, column="uid")
    r = b.row(n)
    b.data_case("null-uid-rloo", "contract", _set("uid", r, None), "rloo", row=r, column="uid")
    r = b.row(n)
    b.data_case("null-score", "contract", _all(_scalar_score, _set("score", r, None)), "grpo", row=r, column="score")
    r = b.row(n)
    b.data_case("null-batch-key", "contract", _set("step", r, None), "grpo", "--batch-key", "step", row=r,
                column="step")
    r = b.row(n)
    b.data_case("null-reward_baselines", "contract", _set("reward_baselines", r, None), "remax", row=r,
                column="reward_baselines")

    def longer(column, row):
        def f(c):
            c[column][row] = c[column][row] + [0.5]
        return f

    r = b.row(n)
    b.data_case("length-rm_scores", "contract", longer("rm_scores", r), "grpo", row=r, column="rm_scores")
    r = b.row(n)
    b.data_case("length-values", "contract", longer("values", r), "gae", row=r, column="values")
    r = b.row(n)
    b.data_case("length-old_log_probs", "contract", longer("old_log_probs", r), "grpo", "--kl-coef", "0.1", row=r,
                column="old_log_probs")

    def shorter_responses(row):
        def f(c):
            c["responses"] = [[7] * len(m) for m in c["response_mask"]]
            c["responses"][row] = c["responses"][row][:-1]
        return f

    r = b.row(n)
    b.data_case("length-responses", "contract", shorter_responses(r), "grpo", row=r, column="responses")

    def mask_value(column, value, make=None):
        def f(c):
            if make:
                make(c)
            row = rows[column]
            c[column][row][b.pos(c, row)] = value
        return f

    rows = {"response_mask": b.row(n)}
    b.data_case("mask-2", "contract", mask_value("response_mask", 2), "grpo", row=rows["response_mask"],
                column="response_mask")
    rows = {"response_mask": b.row(n)}
    b.data_case("mask-minus-1", "contract", mask_value("response_mask", -1), "rloo", row=rows["response_mask"],
                column="response_mask")
    rows = {"loss_mask": b.row(n)}
    b.data_case("loss_mask-3", "contract",
                mask_value("loss_mask", 3, lambda c: c.__setitem__("loss_mask", [list(m) for m in c["response_mask"]])),
                "grpo", row=rows["loss_mask"], column="loss_mask")
    rows = {"attention_mask": b.row(n)}
    b.data_case("attention_mask-2", "contract", mask_value("attention_mask", 2, _padded), "grpo",
                row=rows["attention_mask"], column="attention_mask")

    def gap(row):
        def f(c):
            _padded(c)
            L = len(c["response_mask"][row])
            c["attention_mask"][row] = [1] + [0] + [1] * (L - 2)
            c["response_mask"][row] = [1] + [0] + [1] * (L - 2)
        return f

    r = b.row(n)
    b.data_case("padding-not-suffix", "contract", gap(r), "grpo", row=r, column="attention_mask")

    def actor_on_padding(row):
        def f(c):
            _padded(c)
            L = len(c["response_mask"][row])
            c["attention_mask"][row] = [1] * (L - 1) + [0]
            c["response_mask"][row] = [1] * L
        return f

    r = b.row(n)
    b.data_case("response_mask-on-padding", "contract", actor_on_padding(r), "grpo", row=r, column="response_mask")

    for column, value, est, extra in [
        ("rm_scores", float("nan"), "grpo", ()),
        ("rm_scores", float("inf"), "rloo", ()),
        ("rm_scores", float("-inf"), "reinforce_plus_plus", ()),
        ("values", float("nan"), "gae", ()),
        ("old_log_probs", float("-inf"), "grpo", ("--kl-coef", "0.1")),
        ("ref_log_prob", float("nan"), "grpo", ("--kl-coef", "0.1", "--kl-penalty", "low_var_kl")),
        ("rollout_log_probs", float("nan"), "grpo", ("--rollout-is", "token")),
        ("sum_pi_squared", float("inf"), "optimal_token_baseline", ()),
    ]:
        r = b.row(n)
        tag = "nan" if value != value else ("inf" if value > 0 else "minus-inf")
        b.data_case(f"{tag}-{column}", "contract", lambda c, column=column, r=r, v=value: c[column][r].__setitem__(
            b.pos(c, r), v), est, *extra, row=r, column=column)
    r = b.row(n)
    b.data_case("nan-score", "contract", _all(_scalar_score, _set("score", r, float("nan"))), "grpo", row=r,
                column="score")
    r = b.row(n)
    b.data_case("inf-score", "contract", _all(_scalar_score, _set("score", r, float("-inf"))), "rloo", row=r,
                column="score")
    r = b.row(n)
    b.data_case("nan-reward_baselines", "contract", _set("reward_baselines", r, float("nan")), "remax", row=r,
                column="reward_baselines")
    r = b.row(n)
    b.data_case("inf-reward-component", "contract", _set("fmt", r, float("inf")), "gdpo", "--reward-components",
                "acc,fmt", row=r, column="fmt")
    r = b.row(n)
    b.data_case("null-reward-component", "contract", _set("acc", r, None), "gdpo", "--reward-components", "acc,fmt",
                row=r, column="acc")
    # several outputs of one agent session (grpo folds them): the fold keys are checked like any column
    def sessions(c):
        c["session_id"] = [f"s{i // 2}" for i in range(len(c["uid"]))]
        c["output_index"] = [i % 2 for i in range(len(c["uid"]))]

    r = b.row(n)
    b.data_case("null-output_index", "contract", _all(sessions, _set("output_index", r, None)), "grpo", row=r,
                column="output_index")
    r = b.row(n)
    b.data_case("null-session_id", "contract", _all(sessions, _set("session_id", r, None)), "grpo", row=r,
                column="session_id")
    r = b.row(n)
    b.data_case("nan-output_index", "contract", _all(sessions, _set("output_index", r, float("nan"))), "grpo", row=r,
                column="output_index", types={"output_index": pa.float64()})
    # a float64 value that is finite but overflows float32 (everything is float32, docs/semantics.md §0): it would
    # become inf inside rladv, i.e. the same poisoning a NaN causes.
    r = b.row(n)
    b.data_case("float32-overflow-rm_scores", "contract", _set_token("rm_scores", r, 0, 1e39), "grpo", row=r,
                column="rm_scores", types={"rm_scores": pa.list_(pa.float64())})
    r = b.row(n)
    b.data_case("float32-overflow-score", "contract", _all(_scalar_score, _set("score", r, -3e38 * 10)), "grpo",
                row=r, column="score", types={"score": pa.float64()})


def missing_cases(b: Builder) -> None:
    """A column the chosen stages need is absent (docs/contract.md §1: names file and column)."""
    for case_id, drop, est, extra, column in [
        ("missing-response_mask", ("response_mask",), "grpo", (), "response_mask"),
        ("missing-scores", ("rm_scores",), "grpo", (), "rm_scores"),
        ("missing-uid", ("uid",), "grpo", (), "uid"),
        ("missing-uid-rloo_vectorized", ("uid",), "rloo_vectorized", (), "uid"),
        ("missing-values-gae", ("values",), "gae", (), "values"),
        ("missing-reward_baselines-remax", ("reward_baselines",), "remax", (), "reward_baselines"),
        ("missing-sum_pi_squared-otb", ("sum_pi_squared",), "optimal_token_baseline", (), "sum_pi_squared"),
        ("missing-old_log_probs-tir-otb", ("old_log_probs",), "tir_optimal_token_baseline", (), "old_log_probs"),
        ("missing-ref_log_prob-kl", ("ref_log_prob",), "grpo", ("--kl-coef", "0.05"), "ref_log_prob"),
        ("missing-reward-component-gdpo", ("fmt",), "gdpo", ("--reward-components", "acc,fmt"), "fmt"),
        ("missing-rollout_log_probs-rs", ("rollout_log_probs",), "grpo",
         ("--rollout-rs", "token_k1", "--rollout-rs-threshold", "2.0"), "rollout_log_probs"),
        ("missing-rollout_log_probs-is", ("rollout_log_probs",), "rloo", ("--rollout-is", "sequence"),
         "rollout_log_probs"),
        ("missing-batch-key", (), "grpo", ("--batch-key", "epoch"), "epoch"),
    ]:
        b.data_case(case_id, "missing", _drop(*drop), est, *extra, column=column)


def types_cases(b: Builder) -> None:
    """Wrong Arrow types are errors naming the column; integer scores and the other accepted spellings work."""
    for case_id, mutate, types, est, extra, column in [
        ("string-score", _all(_scalar_score, lambda c: c.__setitem__("score", [str(x) for x in c["score"]])),
         {"score": pa.string()}, "grpo", (), "score"),
        ("string-rm_scores", lambda c: c.__setitem__("rm_scores", [[str(x) for x in r] for r in c["rm_scores"]]),
         {"rm_scores": pa.list_(pa.string())}, "grpo", (), "rm_scores"),
        ("nested-rm_scores", lambda c: c.__setitem__("rm_scores", [[[x] for x in r] for r in c["rm_scores"]]),
         {"rm_scores": pa.list_(pa.list_(pa.float32()))}, "grpo", (), "rm_scores"),
        ("nested-response_mask", lambda c: c.__setitem__("response_mask", [[[x] for x in r] for r in c["response_mask"]]),
         {"response_mask": pa.list_(pa.list_(pa.int8()))}, "grpo", (), "response_mask"),
        ("half-float-response_mask", lambda c: c["response_mask"][1].__setitem__(0, 0.5),
         {"response_mask": pa.list_(pa.float32())}, "grpo", (), "response_mask"),
        ("scalar-response_mask", lambda c: c.__setitem__("response_mask", [1] * len(c["uid"])),
         {"response_mask": pa.int8()}, "grpo", (), "response_mask"),
        ("scalar-rm_scores", lambda c: c.__setitem__("rm_scores", [r[-1] for r in c["rm_scores"]]),
         {"rm_scores": pa.float32()}, "grpo", (), "rm_scores"),
        ("list-score", _all(_scalar_score, lambda c: c.__setitem__("score", [[x] for x in c["score"]])),
         {"score": F32}, "grpo", (), "score"),
        ("float-uid", lambda c: c.__setitem__("uid", [i / 2 for i in range(len(c["uid"]))]),
         {"uid": pa.float64()}, "grpo", (), "uid"),
        ("list-uid", lambda c: c.__setitem__("uid", [[u] for u in c["uid"]]), {"uid": pa.list_(pa.string())}, "grpo",
         (), "uid"),
        ("float-responses", lambda c: c.__setitem__("responses", [[1.5] * len(m) for m in c["response_mask"]]),
         {"responses": F32}, "grpo", (), "responses"),
        ("string-values", lambda c: c.__setitem__("values", [[str(x) for x in r] for r in c["values"]]),
         {"values": pa.list_(pa.string())}, "gae", (), "values"),
        ("string-reward_baselines", lambda c: c.__setitem__("reward_baselines", [str(x) for x in c["reward_baselines"]]),
         {"reward_baselines": pa.string()}, "remax", (), "reward_baselines"),
        ("string-reward-component", lambda c: c.__setitem__("acc", [str(x) for x in c["acc"]]), {"acc": pa.string()},
         "gdpo", ("--reward-components", "acc,fmt"), "acc"),
        ("bool-rm_scores", lambda c: c.__setitem__("rm_scores", [[x > 0 for x in r] for r in c["rm_scores"]]),
         {"rm_scores": pa.list_(pa.bool_())}, "grpo", (), "rm_scores"),
    ]:
        b.data_case(case_id, "types", mutate, est, *extra, types=types, column=column)

    for case_id, mutate, types, est, extra, column in [
        ("list-output_index", lambda c: c.update(session_id=[f"s{i // 2}" for i in range(8)],
                                                 output_index=[[i % 2] for i in range(8)]),
         {"output_index": pa.list_(pa.int64())}, "grpo", (), "output_index"),
        ("reward-component-is-uid", lambda c: None, {}, "gdpo", ("--reward-components", "uid"), "uid"),
        ("reward-component-is-list", lambda c: None, {}, "gdpo", ("--reward-components", "acc,values"), "values"),
    ]:
        b.data_case(case_id, "types", mutate, est, *extra, types=types, column=column)
    # columns whose values cannot label rows (batches, sessions): lists and structs
    b.data_case("batch-key-list-column", "types", lambda c: None, "gae", "--batch-key", "values",
                named=("values",))
    b.data_case("batch-key-struct-column", "types", lambda c: c.__setitem__("meta", [{"k": i % 2} for i in range(8)]),
                "grpo", "--batch-key", "meta", types={"meta": pa.struct([("k", pa.int64())])}, named=("meta",))
    b.data_case("list-session_id", "types", lambda c: c.update(session_id=[[i // 2] for i in range(8)],
                                                              output_index=[i % 2 for i in range(8)]),
                "grpo", types={"session_id": pa.list_(pa.int64())}, column="session_id")

    # duplicate column names: Arrow and Parquet allow them, a name lookup does not
    d = b.folder("duplicate-column")
    cols = b.cols()
    names = list(cols) + ["rm_scores"]
    arrays = [pa.array(v, type=DEFAULT_TYPES.get(k, F32)) for k, v in cols.items()] + [
        pa.array(cols["rm_scores"], type=F32)]
    path = d / "data.parquet"
    pq.write_table(pa.Table.from_arrays(arrays, names=names), path)
    b.add(Case("duplicate-column", "types", d,
               ["compute", str(path), "--estimator", "grpo", "-o", str(d / "out.parquet"), "-q"],
               named=(str(path), "rm_scores")))

    # accepted: integer scores (docs/contract.md §1: "integers are fine"), other mask/uid spellings
    for case_id, mutate, types, est in [
        ("int-score", _all(_scalar_score, lambda c: c.__setitem__("score", [int(x) for x in c["score"]])),
         {"score": pa.int64()}, "grpo"),
        ("int32-score", _all(_scalar_score, lambda c: c.__setitem__("score", [int(x) for x in c["score"]])),
         {"score": pa.int32()}, "rloo"),
        ("int-rm_scores", lambda c: c.__setitem__("rm_scores", [[int(x) for x in r] for r in c["rm_scores"]]),
         {"rm_scores": pa.list_(pa.int32())}, "grpo"),
        ("int64-rm_scores-gae", lambda c: c.__setitem__("rm_scores", [[int(x) for x in r] for r in c["rm_scores"]]),
         {"rm_scores": pa.list_(pa.int64())}, "gae"),
        ("int-reward_baselines", lambda c: c.__setitem__("reward_baselines", [int(x > .5) for x in c["reward_baselines"]]),
         {"reward_baselines": pa.int64()}, "remax"),
        ("int-uid", lambda c: c.__setitem__("uid", [i // 2 for i in range(len(c["uid"]))]), {"uid": pa.int64()}, "grpo"),
        ("float-response_mask", lambda c: None, {"response_mask": pa.list_(pa.float32())}, "grpo"),
        ("bool-response_mask", lambda c: c.__setitem__("response_mask", [[bool(x) for x in r] for r in c["response_mask"]]),
         {"response_mask": pa.list_(pa.bool_())}, "gae"),
        ("uint8-response_mask", lambda c: None, {"response_mask": pa.list_(pa.uint8())}, "reinforce_plus_plus"),
        ("int32-response_mask", lambda c: None, {"response_mask": pa.list_(pa.int32())}, "grpo"),
        ("float64-lists", lambda c: None, {"rm_scores": pa.list_(pa.float64()), "values": pa.list_(pa.float64())}, "gae"),
        ("large_list-rm_scores", lambda c: None, {"rm_scores": pa.large_list(pa.float32())}, "grpo"),
        ("dictionary-uid", lambda c: None, {"uid": pa.dictionary(pa.int32(), pa.string())}, "grpo"),
        ("int-reward-components", lambda c: c.__setitem__("fmt", [int(x > .5) for x in c["fmt"]]), {"fmt": pa.int64()},
         "gdpo"),
        ("float16-score", _scalar_score, {"score": pa.float16()}, "grpo"),
        ("large_list-response_mask", lambda c: None, {"response_mask": pa.large_list(pa.int8())}, "gae"),
        ("large_string-uid", lambda c: None, {"uid": pa.large_string()}, "rloo"),
        ("uint64-uid-huge", lambda c: c.__setitem__("uid", [2**64 - 1 - i // 2 for i in range(8)]),
         {"uid": pa.uint64()}, "grpo_vectorized"),
        ("negative-int-uid", lambda c: c.__setitem__("uid", [-(i // 2) - 1 for i in range(8)]), {"uid": pa.int64()},
         "grpo_vectorized"),
        ("fixed-size-list-extra", lambda c: c.__setitem__("emb", [[1.0, 2.0]] * 8), {"emb": pa.list_(pa.float32(), 2)},
         "grpo"),
        ("struct-extra", lambda c: c.__setitem__("meta", [{"k": i} for i in range(8)]),
         {"meta": pa.struct([("k", pa.int64())])}, "rloo"),
        ("sessions-folded", lambda c: c.update(session_id=[f"s{i // 4}" for i in range(8)],
                                               output_index=[i % 2 for i in range(8)]), {}, "grpo"),
    ]:
        extra = ("--reward-components", "acc,fmt") if est == "gdpo" else ()
        b.data_case(f"ok-{case_id}", "accepted", mutate, est, *extra, types=types, expect="ok")


def empty_cases(b: Builder) -> None:
    """Zero rows and rows of length 0."""
    def zero_rows(c):
        for k in c:
            c[k] = []

    b.data_case("zero-rows", "empty", zero_rows, "grpo")
    b.data_case("zero-rows-gae", "empty", zero_rows, "gae")

    def empty_row(row):
        def f(c):
            for name, vals in c.items():
                if isinstance(vals[row], list):
                    vals[row] = []
        return f

    r = b.row()
    # every list column has length 0 there, so any of them may be named: the test checks "column " is named
    b.data_case("empty-row", "empty", empty_row(r), "grpo", row=r)

    def all_empty(c):
        for name, vals in c.items():
            for i, v in enumerate(vals):
                if isinstance(v, list):
                    vals[i] = []

    b.data_case("all-rows-empty", "empty", all_empty, "rloo", row=0)
    r = b.row()
    b.data_case("empty-mask-only", "empty", _set("response_mask", r, []), "grpo", row=r)

    # a folder of two Parquet files with zero rows each
    d = b.folder("zero-rows-folder")
    (d / "in").mkdir()
    cols = {k: [] for k in b.cols()}
    write_table(d / "in" / "a.parquet", cols)
    write_table(d / "in" / "b.parquet", cols)
    b.add(Case("zero-rows-folder", "empty", d, ["compute", str(d / "in"), "--estimator", "grpo", "-o",
                                                 str(d / "out.parquet"), "-q"], named=("a.parquet", "no rows")))


def file_cases(b: Builder) -> None:
    """Truncated and non-Parquet files, folders without Parquet files, missing paths."""
    good = b.cols()

    def one(case_id, make: Callable[[Path], Path | list[Path]], named_fn=lambda p: (str(p),)):
        d = b.folder(case_id)
        path = make(d)
        paths = path if isinstance(path, list) else [path]
        b.add(Case(case_id, "files", d, ["compute", *map(str, paths), "--estimator", "grpo", "-o",
                                         str(d / "out.parquet"), "-q"], named=named_fn(paths[-1])))

    def truncated(frac):
        def make(d):
            full = write_table(d / "full.tmp.parquet", good).read_bytes()
            (d / "full.tmp.parquet").unlink()
            p = d / "data.parquet"
            p.write_bytes(full[: int(len(full) * frac)])
            return p
        return make

    one("truncated-half", truncated(0.5))
    one("truncated-footer", lambda d: _write_bytes(d / "data.parquet", write_table(d / "x", good).read_bytes()[:-3], d / "x"))
    one("truncated-to-magic", lambda d: _write_bytes(d / "data.parquet", b"PAR1"))
    one("empty-file", lambda d: _write_bytes(d / "data.parquet", b""))
    one("text-file", lambda d: _write_bytes(d / "data.parquet", b"uid,response_mask\nq0,[1,1]\n"))
    one("random-bytes", lambda d: _write_bytes(d / "data.parquet", b.rng.bytes(4096)))
    one("bad-footer-magic", lambda d: _write_bytes(d / "data.parquet", write_table(d / "x", good).read_bytes()[:-4] + b"PARX", d / "x"))

    def bad_footer_length(d):
        data = bytearray(write_table(d / "x", good).read_bytes())
        (d / "x").unlink()
        data[-8:-4] = (len(data) * 4).to_bytes(4, "little")  # footer length past the start of the file
        return _write_bytes(d / "data.parquet", bytes(data))

    one("bad-footer-length", bad_footer_length)

    def garbled_footer(d):
        data = bytearray(write_table(d / "x", good).read_bytes())
        (d / "x").unlink()
        n = int.from_bytes(data[-8:-4], "little")
        start = len(data) - 8 - n
        data[start:start + n // 2] = b.rng.bytes(n // 2)  # Thrift metadata garbled
        return _write_bytes(d / "data.parquet", bytes(data))

    one("garbled-footer", garbled_footer)
    def name_not_utf8(d):
        # a column name in the footer's schema that is not UTF-8 (same byte length, so the Thrift stays valid)
        path = d / "data.parquet"
        pq.write_table(pa.table({**{k: pa.array(v, DEFAULT_TYPES.get(k, F32)) for k, v in good.items()},
                                 "zzznote": pa.array(["x"] * len(good["uid"]))}), path, store_schema=False)
        data = bytearray(path.read_bytes())
        n = int.from_bytes(data[-8:-4], "little")
        footer = bytes(data[len(data) - 8 - n:-8]).replace(b"zzznote", b"\xff\xfe\xfdnote")
        data[len(data) - 8 - n:-8] = footer
        return _write_bytes(path, bytes(data))

    one("column-name-not-utf8", name_not_utf8)
    def fewer_rows_than_footer(d):
        # the last row group's uid data page header gets a wrong Thrift field id: pyarrow then yields no row for
        # that row group, without an error, so the file reads as fewer rows than its footer declares
        path = d / "data.parquet"
        pq.write_table(pa.table({k: pa.array(v, DEFAULT_TYPES.get(k, F32)) for k, v in good.items()}), path,
                       compression="snappy", row_group_size=3)
        meta = pq.ParquetFile(path).metadata
        offset = meta.row_group(meta.num_row_groups - 1).column(0).data_page_offset  # column 0 is uid
        data = bytearray(path.read_bytes())
        data[offset + 1] = 0x45
        return _write_bytes(path, bytes(data))

    one("fewer-rows-than-footer", fewer_rows_than_footer)
    b.cases[-1].args += ["--chunk-rows", "1"]
    one("missing-file", lambda d: d / "nope.parquet")
    one("missing-file-among-two", lambda d: [write_table(d / "a.parquet", good), d / "b.parquet"])

    def folder_no_parquet(d):
        f = d / "in"
        f.mkdir()
        (f / "notes.txt").write_text("no data")
        (f / "data.csv").write_text("uid\nq0\n")
        (f / "data.parquet.bak").write_bytes(write_table(d / "x", good).read_bytes())
        (d / "x").unlink()
        (f / "sub.parquet").mkdir()  # a folder named like a file
        return f

    one("folder-without-parquet", folder_no_parquet)
    one("empty-folder", lambda d: (d / "in").mkdir() or d / "in")

    def truncated_second(d):
        f = d / "in"
        f.mkdir()
        write_table(f / "a.parquet", good)
        full = write_table(f / "b.parquet", good).read_bytes()
        (f / "b.parquet").write_bytes(full[: len(full) // 3])
        return f

    one("folder-second-file-truncated", truncated_second, named_fn=lambda p: (str(p / "b.parquet"),))

    def text_in_folder(d):
        f = d / "in"
        f.mkdir()
        write_table(f / "a.parquet", good)
        (f / "z.parquet").write_text("this is not parquet\n")
        return f

    one("folder-text-named-parquet", text_in_folder, named_fn=lambda p: (str(p / "z.parquet"),))


def _write_bytes(path: Path, data: bytes, remove: Optional[Path] = None) -> Path:
    path.write_bytes(data)
    if remove is not None and remove.exists():
        remove.unlink()
    return path


def schema_cases(b: Builder) -> None:
    """Files of one dataset whose schemas disagree: the message names the second file (and the column)."""
    def two(case_id, second: Callable[[dict], tuple[dict, dict]], named=(), column=None, as_folder=True):
        d = b.folder(case_id)
        cols = b.cols()
        first = {k: v[:4] for k, v in cols.items()}
        rest, types = second({k: v[4:] for k, v in cols.items()})
        f = d / "in"
        f.mkdir()
        a = write_table(f / "a.parquet", first)
        c = write_table(f / "b.parquet", rest, types)
        inputs = [str(f)] if as_folder else [str(a), str(c)]
        b.add(Case(case_id, "schemas", d, ["compute", *inputs, "--estimator", "gae", "-o", str(d / "out.parquet"), "-q"],
                   named=(str(c), *named), column=column))

    two("schema-missing-column", lambda c: ({k: v for k, v in c.items() if k != "values"}, {}), named=("values",))
    two("schema-extra-column", lambda c: ({**c, "extra": [1] * 4}, {"extra": pa.int64()}), named=("extra",))
    # (another column order, or float64 scores beside float32 ones, are one dataset: tests/io/test_dataset_schemas.py)
    two("schema-type-differs", lambda c: ({**c, "rm_scores": [["x"] * len(r) for r in c["rm_scores"]]},
                                          {"rm_scores": pa.list_(pa.string())}), column="rm_scores")
    two("schema-uid-type-differs", lambda c: ({**c, "uid": [7, 7, 8, 8]}, {"uid": pa.int64()}), column="uid")

    # a row error in the second file names that file and the row within it
    d = b.folder("second-file-row-error")
    cols = b.cols()
    r = int(b.rng.integers(1, 4))
    second = copy_cols({k: v[4:] for k, v in cols.items()})
    second["response_mask"][r][0] = 5
    f = d / "in"
    f.mkdir()
    write_table(f / "a.parquet", {k: v[:4] for k, v in cols.items()})
    p = write_table(f / "b.parquet", second)
    b.add(Case("second-file-row-error", "schemas", d, ["compute", str(f), "--estimator", "grpo", "--chunk-rows", "3",
                                                       "-o", str(d / "out.parquet"), "-q"],
               named=(str(p),), row=r, column="response_mask"))


def option_cases(b: Builder) -> None:
    """Options out of range, unknown names and inconsistent combinations: the message names the option."""
    o = b.option_case
    o("gamma-above-1", ("--gamma",), "--gamma", "1.5")
    o("gamma-negative", ("--gamma",), "--gamma", "-0.1", estimator="gae")
    o("gamma-nan", ("--gamma",), "--gamma", "nan", estimator="gae")
    o("gamma-not-a-number", ("--gamma",), "--gamma", "abc")
    o("lam-above-1", ("--lam",), "--lam", "1.01", estimator="gae")
    o("lam-negative", ("--lam",), "--lam", "-1", estimator="gae")
    o("lam-inf", ("--lam",), "--lam", "inf", estimator="gae")
    o("chunk-rows-0", ("--chunk-rows",), "--chunk-rows", "0")
    o("chunk-rows-negative", ("--chunk-rows",), "--chunk-rows", "-5")
    o("chunk-rows-not-int", ("--chunk-rows",), "--chunk-rows", "1.5")
    o("estimator-unknown", ("--estimator", "ppo"), estimator="ppo")
    o("estimator-case", ("--estimator", "GRPO"), estimator="GRPO")
    o("estimator-missing", ("--estimator",), estimator=None)
    o("kl-penalty-unknown", ("--kl-penalty", "k9"), "--kl-coef", "0.1", "--kl-penalty", "k9")
    o("kl-penalty-full", ("--kl-penalty", "full"), "--kl-coef", "0.1", "--kl-penalty", "full")
    o("kl-ctrl-unknown", ("--kl-ctrl",), "--kl-ctrl", "pid")
    o("kl-horizon-0", ("--kl-horizon",), "--kl-coef", "0.1", "--kl-ctrl", "adaptive", "--kl-horizon", "0")
    o("kl-target-0", ("--kl-target",), "--kl-coef", "0.1", "--kl-ctrl", "adaptive", "--kl-target", "0")
    o("epsilon-0", ("--epsilon",), "--epsilon", "0")
    o("epsilon-negative", ("--epsilon",), "--epsilon", "-1e-6")
    o("threads-0", ("--threads",), "--threads", "0")
    o("rpp-mask-mode-unknown", ("--rpp-mask-mode",), "--rpp-mask-mode", "skip", estimator="reinforce_plus_plus")
    o("device-unknown", ("--device",), "--device", "tpu")
    o("rollout-is-unknown", ("--rollout-is",), "--rollout-is", "batch")
    o("rollout-is-threshold-negative", ("--rollout-is-threshold",), "--rollout-is", "token",
      "--rollout-is-threshold", "-2")
    o("rollout-is-threshold-text", ("--rollout-is-threshold",), "--rollout-is", "token", "--rollout-is-threshold", "two")
    o("rollout-is-threshold-lo-gt-hi", ("--rollout-is-threshold",), "--rollout-is", "sequence",
      "--rollout-is-threshold", "3_0.5")
    o("overlong-without-max-resp-len", ("--max-resp-len",), "--overlong-buffer-len", "4")
    o("overlong-max-below-buffer", ("--max-resp-len",), "--overlong-buffer-len", "8", "--max-resp-len", "4")
    o("overlong-buffer-0", ("--overlong-buffer-len",), "--overlong-buffer-len", "0", "--max-resp-len", "4")
    o("reward-weights-count", ("--reward-weights",), "--reward-components", "acc,fmt", "--reward-weights", "1",
      estimator="gdpo")
    o("reward-weights-text", ("--reward-weights",), "--reward-components", "acc,fmt", "--reward-weights", "1,x",
      estimator="gdpo")
    o("reward-weights-without-components", ("--reward-weights",), "--reward-weights", "1,1", estimator="gdpo")
    o("reward-components-not-gdpo", ("--reward-components",), "--reward-components", "acc,fmt")
    o("unknown-option", ("--gama",), "--gama", "0.9")
    o("rollout-rs-without-threshold", ("--rollout-rs",), "--rollout-rs", "token_k1")
    o("rollout-rs-threshold-without-rs", ("--rollout-rs",), "--rollout-rs-threshold", "2.0")
    # integers beyond int64: typer and pydantic take them, torch / pyarrow cannot
    o("max-resp-len-beyond-int64", ("--max-resp-len",), "--overlong-buffer-len", "4", "--max-resp-len", str(10**20))
    o("chunk-rows-beyond-int64", ("--chunk-rows",), "--chunk-rows", str(10**20))
    # non-finite numbers that no range check rejects: they turn every reward into NaN
    o("kl-coef-nan", ("--kl-coef",), "--kl-coef", "nan")
    o("kl-coef-inf", ("--kl-coef",), "--kl-coef", "inf")
    o("overlong-penalty-factor-nan", ("--overlong-penalty-factor",), "--overlong-buffer-len", "2", "--max-resp-len",
      "6", "--overlong-penalty-factor", "nan")
    o("reward-weights-nan", ("--reward-weights",), "--reward-components", "acc,fmt", "--reward-weights", "1,nan",
      estimator="gdpo")

    # --config: a verl trainer YAML
    def config_case(case_id, text: Optional[str], named_extra=()):
        d = b.folder(case_id)
        path = write_table(d / "data.parquet", b.cols())
        cfg = d / "algo.yaml"
        if text is not None:
            cfg.write_text(text)
        b.add(Case(case_id, "options", d, ["compute", str(path), "--config", str(cfg), "-o", str(d / "out.parquet"), "-q"],
                   named=(str(cfg), *named_extra)))

    config_case("config-missing-file", None)
    config_case("config-not-yaml", "algorithm: [unclosed\n  gamma: {\n")
    config_case("config-unknown-estimator", "algorithm:\n  adv_estimator: ppo_magic\n", ("ppo_magic",))
    config_case("config-gamma-out-of-range", "algorithm:\n  adv_estimator: gae\n  gamma: 2.0\n", ("gamma",))
    config_case("config-not-a-mapping", "- just\n- a list\n")


def output_cases(b: Builder) -> None:
    """``-o`` / ``--report`` equal to an input, in a missing folder, or on a path that cannot be written.

    Tests run as root, where a read-only folder is still writable; the unwritable paths here are a path under a
    regular file and an existing directory."""
    good = b.cols()

    def case(case_id, make: Callable[[Path, Path], tuple[list[str], tuple[str, ...]]]):
        d = b.folder(case_id)
        inp = write_table(d / "data.parquet", good)
        extra, named = make(d, inp)
        b.add(Case(case_id, "output", d, ["compute", str(inp), "--estimator", "grpo", "-q", *extra], named=named))

    case("o-is-input", lambda d, i: (["-o", str(i)], (str(i), "input")))
    case("o-is-input-dotdot", lambda d, i: ((d / "sub").mkdir() or ["-o", str(d / "sub" / ".." / "data.parquet")],
                                            ("input",)))

    def via_symlink(d, i):
        (d / "link.parquet").symlink_to(i)
        return ["-o", str(d / "link.parquet")], ("link.parquet", "input")

    case("o-is-input-via-symlink", via_symlink)

    def via_relative(d, i):
        return ["-o", os.path.relpath(i)], ("input",)

    case("o-is-input-relative", via_relative)

    def second_input(d, i):
        j = write_table(d / "other.parquet", good)
        return [str(j), "-o", str(j)], (str(j), "input")

    case("o-is-second-input", second_input)

    def in_input_folder(d, i):
        f = d / "in"
        f.mkdir()
        write_table(f / "a.parquet", good)
        write_table(f / "b.parquet", good)
        i.unlink()
        return ["-o", str(f / "b.parquet")], ("b.parquet", "input")

    case("o-is-file-of-input-folder", in_input_folder)
    last = b.cases[-1]
    last.args = ["compute", str(last.dir / "in"), "--estimator", "grpo", "-q", "-o", str(last.dir / "in" / "b.parquet")]
    case("o-missing-folder", lambda d, i: (["-o", str(d / "nope" / "out.parquet")], (str(d / "nope"),)))
    case("o-existing-directory", lambda d, i: ((d / "out.parquet").mkdir() or ["-o", str(d / "out.parquet")],
                                               (str(d / "out.parquet"),)))
    case("o-under-regular-file", lambda d, i: (["-o", str(i / "out.parquet")], (str(i),)))
    case("o-under-other-file", lambda d, i: ((d / "file.txt").write_text("x") and ["-o", str(d / "file.txt" / "o.parquet")],
                                             ("file.txt",)))
    case("o-empty-string", lambda d, i: (["-o", ""], ("-o",)))
    case("report-missing-folder", lambda d, i: (["-o", str(d / "out.parquet"), "--report", str(d / "no" / "r.json")],
                                                (str(d / "no"),)))
    case("report-under-regular-file", lambda d, i: (["-o", str(d / "out.parquet"), "--report", str(i / "r.json")],
                                                    ("--report", str(i))))
    case("report-is-input", lambda d, i: (["-o", str(d / "out.parquet"), "--report", str(i)], ("--report", "input")))
    case("report-is-output", lambda d, i: (["-o", str(d / "same"), "--report", str(d / "same")], ("same",)))
    case("report-existing-directory", lambda d, i: ((d / "r").mkdir() or ["-o", str(d / "out.parquet"), "--report",
                                                                          str(d / "r")], (str(d / "r"),)))

    def default_is_dir(d, i):
        (d / "data.adv.parquet").mkdir()
        return [], ("data.adv.parquet",)

    case("default-output-is-directory", default_is_dir)

    def several_inputs(d, i):
        j = write_table(d / "other.parquet", good)
        return [str(j)], ("-o",)

    case("several-inputs-without-o", several_inputs)

    def folder_without_o(d, i):
        f = d / "in"
        f.mkdir()
        i.rename(f / "data.parquet")
        return [], ("-o",)

    case("folder-without-o", folder_without_o)
    last = b.cases[-1]
    last.args = ["compute", str(last.dir / "in"), "--estimator", "grpo", "-q"]


def raises_cases(b: Builder) -> None:
    """Where verl raises (docs/semantics.md, "rladv's position": where the reference would raise): rladv stops
    with one line, before writing anything."""
    def one_token(c):
        for i, m in enumerate(c["response_mask"]):
            c["response_mask"][i] = [0] * len(m)
        c["response_mask"][3][0] = 1

    def no_token(c):
        for i, m in enumerate(c["response_mask"]):
            c["response_mask"][i] = [0] * len(m)

    # one batch (the rows' step column would make two, one of them empty, which rollout correction refuses first)
    for est, extra in [("gae", ()), ("reinforce_plus_plus", ()), ("reinforce_plus_plus_baseline", ()),
                       ("gdpo", ("--reward-components", "acc,fmt"))]:
        b.data_case(f"whiten-one-token-{est}", "raises", one_token, est, *extra, "--batch-key", "none", named=(est,))
    # without rollout log-probs (with them, rollout correction refuses the empty batch first, as verl does)
    no_correction = _drop("rollout_log_probs")
    b.data_case("whiten-no-token-gae", "raises", _all(no_token, no_correction), "gae", named=("gae",))
    b.data_case("whiten-no-token-rpp-carry", "raises", _all(no_token, no_correction), "reinforce_plus_plus",
                "--rpp-mask-mode", "carry", named=("reinforce_plus_plus",))

    def one_token_in_step_1(c):
        for i, m in enumerate(c["response_mask"]):
            if c["step"][i] == 1:
                c["response_mask"][i] = [0] * len(m)
        c["response_mask"][1][0] = 1

    b.data_case("whiten-one-token-in-batch", "raises", one_token_in_step_1, "gae", "--batch-key", "step",
                named=("gae", "step=1"), note="the batch is named by its --batch-key value")

    def singleton(c):
        # one row leaves its pair for "lonely", its partner joins another pair: exactly one singleton group
        k = int(b.rng.integers(0, len(c["uid"]) // 2))
        c["uid"][2 * k] = "lonely"
        c["uid"][2 * k + 1] = c["uid"][(2 * k + 2) % len(c["uid"])]

    b.data_case("grpo_passk-singleton", "raises", singleton, "grpo_passk", "--batch-key", "none",
                named=("grpo_passk", "lonely"))  # one batch: the rows' steps would split every pair
    b.data_case("grpo_passk-all-singletons", "raises",
                lambda c: c.__setitem__("uid", [f"u{i}" for i in range(len(c["uid"]))]), "grpo_passk",
                named=("grpo_passk",))
    b.data_case("rollout-correction-no-valid-token", "raises", no_token, "grpo", "--rollout-is", "token",
                named=("rollout",))

    rs = lambda *a: ("--rollout-rs", a[0], "--rollout-rs-threshold", a[1])  # noqa: E731
    o = b.option_case
    for case_id, options, threshold, named in [
        ("rs-k1-lo-above-hi", "token_k1", "2.0_0.5", ("--rollout-rs-threshold",)),
        ("rs-negative", "token_k2", "-1", ("--rollout-rs-threshold",)),
        ("rs-zero", "seq_sum_k1", "0", ("--rollout-rs-threshold",)),
        ("rs-not-a-number", "token_k1", "abc", ("--rollout-rs-threshold", "abc")),
        ("rs-nan", "token_k1", "nan", ("--rollout-rs-threshold",)),
        ("rs-bool", "token_k3", "True", ("--rollout-rs-threshold",)),
        ("rs-k2-with-band", "token_k2", "0.5_2.0", ("--rollout-rs-threshold",)),
        ("rs-count-mismatch", "token_k1,seq_max_k2", "0.5_2.0,2.5,3", ("--rollout-rs-threshold",)),
        ("rs-empty-threshold", "token_k1", " , ", ("--rollout-rs-threshold",)),
        ("rs-unknown-option", "seq_max_k1", "2.0", ("--rollout-rs", "seq_max_k1")),
        ("rs-no-option", " , ", "2.0", ("--rollout-rs",)),
    ]:
        o(case_id, named, *rs(options, threshold))
    for c in b.cases[-11:]:
        c.category = "raises"


def build_cases(root: Path, seed: int = SEED) -> list[Case]:
    """Write every hostile dataset under ``root`` and return the cases (same seed, same files and cases)."""
    b = Builder(Path(root), seed)
    for make in (contract_cases, missing_cases, types_cases, empty_cases, file_cases, schema_cases, option_cases,
                 output_cases, raises_cases):
        make(b)
    return b.cases


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path, help="folder to write the cases into")
    parser.add_argument("--seed", type=int, default=SEED)
    args = parser.parse_args(argv)
    cases = build_cases(args.root, args.seed)
    (args.root / "cases.json").write_text(json.dumps([c.as_json() for c in cases], indent=2))
    by = {}
    for c in cases:
        by[c.category] = by.get(c.category, 0) + 1
    print(f"{len(cases)} cases in {args.root}: " + ", ".join(f"{k} {v}" for k, v in by.items()))


if __name__ == "__main__":
    main()
