"""Copy one small log per trainer format into sample_data/logs/FORMAT/, in the trainer's own layout, from the
test fixtures that trainer's code wrote (tests/data/make_*_rollouts.py, make_trl_completions.py):

    python sample_data/make_logs.py [OUT_DIR]     (default: sample_data/logs)
    rladv convert --from FORMAT sample_data/logs/FORMAT -o FORMAT.parquet

verl-jsonl, nemo-rl, trl, slime: the first step's file; prime-rl: step 1's effective episodes (the step without a
forked trace, so its advantages replay exactly); areal: the whole ``rollout/`` folder (two versions, 5 tasks).
"""
import pathlib
import shutil
import sys

DATA = pathlib.Path(__file__).resolve().parents[1] / "tests" / "data"
LOGS = {
    "verl-jsonl": ["verl_rollouts/1.jsonl"],
    "nemo-rl": ["nemo_rl_rollouts/train_data_step1.jsonl"],
    "trl": ["trl_completions/completions_00001.parquet"],
    "slime": ["slime_rollouts/0.pt"],
    "prime-rl": ["prime_rl_rollouts/rollouts/step_1/train/effective/traces.jsonl"],
    "areal": [f"areal_rollouts/rollout/{v}/{t}.jsonl" for v, t in ((1, 0), (1, 1), (2, 2), (2, 3), (2, 4))],
}


def main(out: pathlib.Path) -> None:
    for fmt, files in LOGS.items():
        for name in files:
            kept = pathlib.Path(*pathlib.Path(name).parts[1:])  # the trainer's layout below its fixture folder
            target = out / fmt / kept
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(DATA / name, target)


if __name__ == "__main__":
    main(pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent / "logs")
