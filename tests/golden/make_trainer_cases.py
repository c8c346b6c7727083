"""Golden cases of the estimators verl does not have (grpo_norm, pkpo, passk_analytic, vapo): each expected file
is what the named trainer's own function gives on a golden input, or the oracle (tests/reference.py) where no
trainer function can be called on its own. README.md says which; each case's "reference" field too.

    python tests/golden/make_trainer_cases.py --areal DIR --roll DIR --passk DIR

DIR: AReaL 1.0.4's wheel unpacked (``pip download --no-deps areal==1.0.4``), a checkout of alibaba/ROLL and one
of RUCAIBox/Passk_Training (scipy importable: its function calls ``scipy.special.comb``). Each trainer's function
is loaded from its file with stubs for the modules it imports but never calls; nothing of it is copied here.
Writes ``inputs/binary.parquet`` (mix.parquet with one 0/1 outcome per row, ``conftest.binary_scores``), the
expected files, and the cases into cases.json (replacing earlier ones of these estimators).
"""
from __future__ import annotations

import argparse
import ast
import dataclasses
import importlib.util
import json
import sys
import types
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import reference as ref
from conftest import binary_scores

F32 = pa.list_(pa.float32())
ESTIMATORS = ("grpo_norm", "pkpo", "passk_analytic", "vapo")


def areal_normalization(root: Path):
    """AReaL's ``Normalization`` and ``NormConfig``: ``areal/utils/data.py`` loaded with its imports it never
    calls stubbed; ``NormConfig`` executed from its class in ``areal/api/cli_args.py``."""
    tree = ast.parse((root / "areal/api/cli_args.py").read_text())
    node = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "NormConfig")
    scope = {"dataclass": dataclasses.dataclass, "field": dataclasses.field}
    exec(compile(ast.Module([node], []), "cli_args.py", "exec"), scope)  # noqa: S102 (the trainer's own class)
    stubs = {
        "einops": {"rearrange": None}, "torchdata": {}, "torchdata.stateful_dataloader": {"StatefulDataLoader": None},
        "areal": {}, "areal.api": {}, "areal.api.cli_args": {"MicroBatchSpec": None, "NormConfig": scope["NormConfig"]},
        "areal.infra": {}, "areal.infra.platforms": {"current_platform": None}, "areal.utils": {},
        "areal.utils.logging": {"getLogger": lambda name: None}, "areal.utils.seqpack": {"get_allocate_fn": None},
        "areal.utils.math": {"align": None},
    }
    for name, attrs in stubs.items():
        module = sys.modules.setdefault(name, types.ModuleType(name))
        for key, value in attrs.items():
            setattr(module, key, value)
    sys.modules["areal.utils"].logging = sys.modules["areal.utils.logging"]
    sys.modules["areal.utils"].seqpack = sys.modules["areal.utils.seqpack"]
    spec = importlib.util.spec_from_file_location("areal_data", root / "areal/utils/data.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.Normalization, scope["NormConfig"]


def function_from(path: Path, name: str, **scope):
    """The top-level function ``name`` of the Python file ``path``, executed alone in ``scope``."""
    tree = ast.parse(path.read_text())
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
    exec(compile(ast.Module([node], []), str(path), "exec"), scope)  # noqa: S102 (the trainer's own function)
    return scope[name]


def by_group(uids: list, total: torch.Tensor, trainer) -> np.ndarray:
    """``trainer(totals (B,), group size) -> (B,)`` on the rows reordered so that each uid's rows are consecutive
    (AReaL's and ROLL's groups are fixed-size blocks), its result put back in dataset order."""
    order = np.argsort(np.asarray(uids, dtype=object), kind="stable")
    size = len(uids) // len(set(uids))
    assert all(uids.count(u) == size for u in set(uids)), "every group must have one size"
    out = np.empty(len(uids), dtype=np.float32)
    out[order] = np.asarray(trainer(total[torch.from_numpy(order)], size), dtype=np.float32)
    return out


def totals(table: pa.Table) -> np.ndarray:
    """R_i of each row: its rm_scores summed in float32 (one non-zero per row on these inputs: exact)."""
    return np.array([np.float32(np.sum(np.asarray(r, np.float32), dtype=np.float32)) for r in table["rm_scores"].to_pylist()])


def expected(table: pa.Table, advantages, returns) -> pa.Table:
    """The golden layout (README.md): uid, token_level_rewards, response_mask (float), advantages, returns, row_id."""
    return pa.table({"uid": table["uid"], "token_level_rewards": pa.array(table["rm_scores"].to_pylist(), F32),
                     "response_mask": pa.array([[float(x) for x in m] for m in table["response_mask"].to_pylist()], F32),
                     "advantages": pa.array([np.asarray(a, np.float32) for a in advantages], F32),
                     "returns": pa.array([np.asarray(r, np.float32) for r in returns], F32), "row_id": table["row_id"]})


def broadcast(table: pa.Table, a: np.ndarray) -> list[np.ndarray]:
    """a_i · m per row, float32."""
    return [(np.float32(x) * np.asarray(m, np.float32)).astype(np.float32)
            for x, m in zip(a, table["response_mask"].to_pylist())]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--areal", type=Path, required=True)
    parser.add_argument("--roll", type=Path, required=True)
    parser.add_argument("--roll-commit", default="8eb27cc2", help="the ROLL commit, for the cases' reference field")
    parser.add_argument("--passk", type=Path, required=True)
    args = parser.parse_args()

    mix = pq.read_table(HERE / "inputs/mix.parquet")
    binary = binary_scores(mix)
    pq.write_table(binary, HERE / "inputs/binary.parquet")
    uids = mix["uid"].to_pylist()
    masks = [np.asarray(m, np.float32) for m in mix["response_mask"].to_pylist()]
    cases = []

    def add(table_name, table, stem, rladv_args, reference, advantages, returns=None):
        path = f"expected/{stem}.parquet"
        pq.write_table(expected(table, advantages, advantages if returns is None else returns), HERE / path)
        cases.append({"input": f"inputs/{table_name}.parquet", "expected": path, "rladv_args": rladv_args,
                      "metrics": {}, "reference": reference})

    # grpo_norm: AReaL's Normalization (float64 statistics) for the matrix's diagonal, ROLL's reward_norm for the rest
    Normalization, NormConfig = areal_normalization(args.areal)
    reward_norm = function_from(args.roll / "roll/utils/functionals.py", "reward_norm", torch=torch)
    R = torch.from_numpy(totals(mix))
    for level, stem in (("group", "grpo_norm__plain"), ("batch", "grpo_norm_batch__plain")):
        def areal(x, n, level=level):
            return Normalization(NormConfig(mean_level=level, std_level=level, group_size=n, eps=1e-6))(x)
        flags = [] if level == "group" else ["--mean-level", "batch", "--std-level", "batch"]
        add("mix", mix, f"mix__{stem}", ["--estimator", "grpo_norm", *flags],
            f"AReaL 1.0.4 Normalization(NormConfig(mean_level={level!r}, std_level={level!r}, eps=1e-6)), CPU, "
            "float64 statistics, float32 output", broadcast(mix, by_group(uids, R, areal)))
    # ROLL cannot take a batch mean with a group std (its shapes do not broadcast); the oracle-based tests cover it
    for mean, std in (("group", "batch"), ("group", "none"), ("none", "batch")):
        def roll(x, n, mean=mean, std=std):
            return reward_norm(x, n_sample=n, norm_mean_type=None if mean == "none" else mean,
                               norm_std_type=None if std == "none" else std)
        add("mix", mix, f"mix__grpo_norm_{mean}_{std}__plain",
            ["--estimator", "grpo_norm", "--mean-level", mean, "--std-level", std],
            f"ROLL (alibaba/ROLL {args.roll_commit}) roll/utils/functionals.py reward_norm(norm_mean_type={mean!r}, "
            f"norm_std_type={std!r}), CPU, float32", broadcast(mix, by_group(uids, R, roll)))

    # passk_analytic: the authors' compute_advantage (RUCAIBox/Passk_Training code/passk_adv.py)
    from scipy.special import comb
    calc_adv = function_from(args.passk / "code/passk_adv.py", "calc_adv", np=np, comb=comb)
    compute_advantage = function_from(args.passk / "code/passk_adv.py", "compute_advantage", np=np, torch=torch,
                                      calc_adv=calc_adv, defaultdict=__import__("collections").defaultdict,
                                      print=lambda *a: None)
    scores = binary["rm_scores"].to_pylist()
    width = max(len(r) for r in scores)
    padded = torch.zeros(len(scores), width)
    mask = torch.zeros(len(scores), width)
    for i, (r, m) in enumerate(zip(scores, masks)):
        padded[i, :len(r)], mask[i, :len(m)] = torch.tensor(r), torch.from_numpy(m)
    for k in (2, 4):
        adv, _ = compute_advantage(padded, mask, np.asarray(uids, dtype=object), k)
        rows = [adv[i, :len(m)].numpy() for i, m in enumerate(masks)]
        add("binary", binary, f"binary__passk_analytic_k{k}__plain", ["--estimator", "passk_analytic", "--k", str(k)],
            "Chen et al. 2025 (arXiv:2508.10751), RUCAIBox/Passk_Training code/passk_adv.py compute_advantage, "
            "CPU, float64 statistics, float32 output", rows)

    # pkpo and vapo: no trainer function to call; the oracle (tests/reference.py)
    rewards = mix["rm_scores"].to_pylist()
    for k in (2, 4):
        adv, _ = ref.pkpo(rewards, masks, uids, k)
        add("mix", mix, f"mix__pkpo_k{k}__plain", ["--estimator", "pkpo", "--k", str(k)],
            "oracle: tests/reference.py pkpo (every k-subset enumerated, float64, rounded once)", adv)
    values = mix["values"].to_pylist()
    for stem, settings in (("vapo__plain", {"gamma": 1.0}),
                           ("vapo_g0.99_a0.1_v0.95__plain", {"gamma": 0.99, "alpha": 0.1, "value_lam": 0.95})):
        adv, ret = ref.vapo(rewards, values, masks, **settings)
        flags = [] if len(settings) == 1 else ["--gamma", "0.99", "--vapo-alpha", "0.1", "--value-lam", "0.95"]
        add("mix", mix, f"mix__{stem}", ["--estimator", "vapo", *flags],
            "oracle: tests/reference.py vapo (verl's GAE recurrence with VAPO's two lambdas, float32)", adv, ret)

    listing = HERE / "cases.json"
    document = json.loads(listing.read_text())
    ours = {case["expected"] for case in cases}
    document["cases"] = [c for c in document["cases"] if c["expected"] not in ours] + cases
    listing.write_text(json.dumps(document, indent=1) + "\n")


if __name__ == "__main__":
    main()
