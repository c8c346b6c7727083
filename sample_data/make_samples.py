"""Regenerate rladv's small sample rollout datasets (CONTRACT §1 layout), byte-identically.

Run:  python sample_data/make_samples.py [OUT_DIR]     (default: the folder of this script)

Writes three zstd Parquet files (floats list<float32>, masks list<int8>, token ids list<int32>):

- groups.parquet      outcome-reward GRPO groups: 16 prompts × 4 samples plus one singleton prompt,
                      rows shuffled, ragged lengths 8..48, all-ones response_mask, scalar `score`
                      (0/1 and partial credit; one all-equal group), old/ref log-probs, `responses`,
                      and a carried-through int64 `step` (two values, whole groups per step).
- multiturn.parquet   agent rollouts: response_mask with 1..3 tool-observation spans of 0s (some rows end
                      in one), token-level `rm_scores` with the score on the last position, critic
                      `values` (0 at mask-0 positions, as verl's critic gives), old/ref/rollout log-probs,
                      uid groups of 4, `responses`, and `tool_rewards` (one per tool call, i.e. per
                      observation span; rladv carries them and adds them only with --tool-reward-coef).
- padded.parquet      a padded export: every list has the same width, `attention_mask` zeros form a
                      suffix (response_mask and every other list are 0 there), scalar `score`.

Everything comes from one seeded numpy Generator, so the same numpy/pyarrow versions give the same bytes.
"""

import pathlib
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

SEED = 20240611
VOCAB = 32000

F32_LIST = pa.list_(pa.float32())
I8_LIST = pa.list_(pa.int8())
I32_LIST = pa.list_(pa.int32())


def _log_probs(rng, n):
    """Sampled-token log-probs: mostly confident (near 0), a few surprising tokens."""
    lp = -rng.exponential(0.15, n)
    surprising = rng.random(n) < 0.08
    lp[surprising] -= rng.uniform(1.0, 6.0, surprising.sum())
    return lp.astype(np.float32)


def _near(rng, lp, scale):
    """A second policy's log-probs close to ``lp`` (reference or inference engine); still ≤ 0."""
    return np.minimum(lp + rng.normal(0.0, scale, lp.size), -1e-6).astype(np.float32)


def _tokens(rng, n):
    return rng.integers(0, VOCAB, n, dtype=np.int32)


def _write(rows, schema, path):
    table = pa.Table.from_pylist(rows, schema=schema)
    pq.write_table(table, path, compression="zstd")


def _shuffled(rng, rows):
    return [rows[i] for i in rng.permutation(len(rows))]


def groups_dataset(rng):
    """16 prompts × 4 samples + 1 singleton; group 0 is all-equal (every sample solved)."""
    partial = [0.0, 0.25, 0.5, 0.75, 1.0]
    rows = []
    for p in range(17):
        n_samples = 1 if p == 16 else 4
        step = 100 if p < 8 else 101  # whole groups per step, so --batch-key step never splits one
        for _ in range(n_samples):
            if p == 0:
                score = 1.0
            elif p % 3 == 0:
                score = float(rng.choice(partial))  # partial credit
            else:
                score = float(rng.integers(0, 2))  # pass / fail
            L = int(rng.integers(8, 49))
            old = _log_probs(rng, L)
            rows.append({
                "uid": f"prompt-{p:04d}",
                "responses": _tokens(rng, L),
                "response_mask": np.ones(L, dtype=np.int8),
                "score": score,
                "old_log_probs": old,
                "ref_log_prob": _near(rng, old, 0.05),
                "step": step,
            })
    schema = pa.schema([
        ("uid", pa.string()),
        ("responses", I32_LIST),
        ("response_mask", I8_LIST),
        ("score", pa.float32()),
        ("old_log_probs", F32_LIST),
        ("ref_log_prob", F32_LIST),
        ("step", pa.int64()),
    ])
    return _shuffled(rng, rows), schema


def _turn_mask(rng):
    """Alternate assistant spans (1) and tool-observation spans (0): 1..3 observation spans,
    and about a third of the rows end in an observation (the agent loop hit its turn limit)."""
    n_obs = int(rng.integers(1, 4))
    ends_in_obs = rng.random() < 0.35
    spans = []
    for _ in range(n_obs):
        spans.append(np.ones(int(rng.integers(3, 13)), dtype=np.int8))
        spans.append(np.zeros(int(rng.integers(2, 9)), dtype=np.int8))
    if not ends_in_obs:
        spans.append(np.ones(int(rng.integers(3, 13)), dtype=np.int8))
    return np.concatenate(spans)


def _mismatched(rng, old):
    """Inference-engine log-probs: close to the trainer's, with a few large spikes (~3% of tokens), the
    heavy-tailed mismatch that rollout rejection is for."""
    rollout = _near(rng, old, 0.02)
    spikes = rng.random(old.size) < 0.03
    rollout[spikes] = rollout[spikes] + rng.normal(0.0, 0.7, int(spikes.sum()))
    return np.minimum(rollout, -1e-6).astype(np.float32)


def multiturn_dataset(rng):
    """12 prompts × 4 tool-using rollouts with token-level rm_scores, critic values and tool rewards (drawn
    from a second generator, so that the other columns stay what they were before tool rewards were added)."""
    tools = np.random.default_rng(SEED + 1)
    rows = []
    for p in range(12):
        for _ in range(4):
            m = _turn_mask(rng)
            L = m.size
            rm_scores = np.zeros(L, dtype=np.float32)
            # verl writes the score on the last response position, observation or not (SEMANTICS §1)
            rm_scores[-1] = float(rng.choice([0.0, 0.0, 1.0, 1.0, 0.5, -0.5]))
            old = _log_probs(rng, L)
            values = (rng.normal(0.3, 0.3, L) * m).astype(np.float32)  # critic output × mask
            rows.append({
                "uid": f"task-{p:03d}",
                "responses": _tokens(rng, L),
                "response_mask": m,
                "rm_scores": rm_scores,
                "values": values,
                "old_log_probs": old,
                "ref_log_prob": _near(rng, old, 0.05),
                "rollout_log_probs": _mismatched(rng, old),
                "tool_rewards": tools.choice([0.0, 0.1, 0.2], int(np.sum(np.diff(m, prepend=1) == -1))).astype(np.float32),
            })
    schema = pa.schema([
        ("uid", pa.string()),
        ("responses", I32_LIST),
        ("response_mask", I8_LIST),
        ("rm_scores", F32_LIST),
        ("values", F32_LIST),
        ("old_log_probs", F32_LIST),
        ("ref_log_prob", F32_LIST),
        ("rollout_log_probs", F32_LIST),
        ("tool_rewards", F32_LIST),
    ])
    return _shuffled(rng, rows), schema


def padded_dataset(rng):
    """3 prompts × 4 rows padded to one width T; padding is a zero suffix of attention_mask."""
    T = 24
    rows = []
    for p in range(3):
        for _ in range(4):
            L = int(rng.integers(5, T + 1))  # one row may fill the width: no padding at all
            attention = np.zeros(T, dtype=np.int8)
            attention[:L] = 1
            old = np.zeros(T, dtype=np.float32)
            old[:L] = _log_probs(rng, L)
            ref = np.zeros(T, dtype=np.float32)
            ref[:L] = _near(rng, old[:L], 0.05)
            tokens = np.zeros(T, dtype=np.int32)
            tokens[:L] = _tokens(rng, L)
            rows.append({
                "uid": f"q{p}",
                "responses": tokens,
                "attention_mask": attention,
                "response_mask": attention.copy(),  # padding is never an actor token
                "score": float(rng.integers(0, 2)),
                "old_log_probs": old,
                "ref_log_prob": ref,
            })
    schema = pa.schema([
        ("uid", pa.string()),
        ("responses", I32_LIST),
        ("attention_mask", I8_LIST),
        ("response_mask", I8_LIST),
        ("score", pa.float32()),
        ("old_log_probs", F32_LIST),
        ("ref_log_prob", F32_LIST),
    ])
    return _shuffled(rng, rows), schema


def main(out_dir=None):
    out = pathlib.Path(out_dir) if out_dir else pathlib.Path(__file__).resolve().parent
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(SEED)
    for name, build in [("groups", groups_dataset), ("multiturn", multiturn_dataset),
                        ("padded", padded_dataset)]:
        rows, schema = build(rng)
        _write(rows, schema, out / f"{name}.parquet")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
