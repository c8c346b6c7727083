"""Benchmark: ``rladv convert --from nemo-rl`` on a ~1 GB NeMo-RL training dump, against named baselines, to show
that its memory is bounded by a batch of lines, not proportional to the input (docs/dumps.md, "Converting a large
log").

    .venv/bin/python bench/convert_memory.py [--gb 0.25,1] [--keep]

The dump is synthetic but shaped like NeMo-RL's (``Logger.log_batched_dict_as_jsonl``): ``train_data_step{N}.jsonl``
files of ~256 MB, one line per sample, every field a batch of one, the token lists right-padded to the step's
longest sequence (``token_ids`` with 0, the others with 0), groups of 4 samples sharing their prompt's tokens,
log-probs as NeMo-RL writes floats. It is written to $RLADV_BENCH_DATA/convert_memory (kept) or a temporary
folder (removed). Each measurement is a fresh process (peak resident memory is its own, VmHWM, imports
included), after os.sync():
  import        ``import rladv_cli, polars, pyarrow``: the floor every run pays
  read_ndjson   ``polars.read_ndjson`` of the same files: what reading the input whole holds
  convert       ``rladv convert --from nemo-rl DIR -o OUT`` for each --gb size (every line checked, then read in
                ``TOKEN_CHUNK_ROWS``-line batches and written row group by row group)
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402

FILE_BYTES = 256 << 20
GROUP = 4


def _line(rng: random.Random, idx: int, prompt: list[int], width: int) -> str:
    """One NeMo-RL line: prompt + response tokens, padded to ``width``; the fields in grpo.py's order."""
    n = len(prompt) + rng.randint(width // 4, width - len(prompt))
    tokens = prompt + [rng.randint(100, 150000) for _ in range(n - len(prompt))]
    pad = width - n
    mask = [0] * len(prompt) + [1] * (n - len(prompt))
    gen = [0.0] * len(prompt) + [-rng.randint(1, 640) / 128 for _ in range(n - len(prompt))]
    prev = [0.0] + [-rng.randint(1, 640) / 128 for _ in range(n - 1)]
    reward = float(rng.random() < 0.5)
    adv = [reward - 0.5] * width  # NeMo-RL broadcasts the row's advantage over the padded row
    return json.dumps({
        "content": [[f"prompt {idx // GROUP}", f"answer {idx}"]], "rewards": [reward], "input_lengths": [n],
        "token_ids": [tokens + [0] * pad], "token_loss_mask": [mask + [0] * pad], "sample_loss_mask": [1.0],
        "advantages": [adv], "generation_logprobs": [gen + [0.0] * pad], "prev_logprobs": [prev + [0.0] * pad],
        "idx": idx}) + "\n"


def write_dump(folder: Path, total: int, width: int = 2048) -> tuple[int, int]:
    """NeMo-RL-style files of ~FILE_BYTES each until ``total`` bytes: (bytes, lines)."""
    folder.mkdir(parents=True, exist_ok=True)
    rng, written, lines, step = random.Random(7), 0, 0, 0
    while written < total:
        step += 1
        path, size = folder / f"train_data_step{step}.jsonl", 0
        with open(path, "w") as f:
            idx = 0
            while size < min(FILE_BYTES, total - written):
                prompt = [rng.randint(100, 150000) for _ in range(rng.randint(32, 256))]
                for _ in range(GROUP):
                    text = _line(rng, idx, prompt, width)
                    f.write(text)
                    size, idx, lines = size + len(text), idx + 1, lines + 1
        written += size
    return written, lines


def peak(code: str) -> tuple[float, float]:
    """``code`` in a fresh Python: wall seconds and peak RSS (MiB, VmHWM)."""
    script = code + ("\nprint(next(int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmHWM')))")
    os.sync()
    t0 = time.perf_counter()
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    return time.perf_counter() - t0, int(res.stdout.strip().splitlines()[-1]) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gb", default="0.25,1", help="input sizes in GB (comma-separated)")
    parser.add_argument("--keep", action="store_true", help="keep the generated dump and outputs")
    args = parser.parse_args()
    sizes = [float(x) for x in args.gb.split(",")]
    root = Path(os.environ["RLADV_BENCH_DATA"]) / "convert_memory" if os.environ.get("RLADV_BENCH_DATA") else \
        Path(tempfile.mkdtemp(prefix="rladv-convert-"))
    rows = []
    try:
        t, rss = peak("import rladv_cli, polars, pyarrow")
        rows.append(("import", 0, 0, t, rss))
        for gb in sizes:
            folder = root / f"nemo_rl_{gb:g}gb"
            if not folder.is_dir():
                t0 = time.perf_counter()
                size, lines = write_dump(folder, int(gb * (1 << 30)))
                print(f"wrote {folder}: {size / 1e6:.0f} MB, {lines} lines in {time.perf_counter() - t0:.0f} s",
                      file=sys.stderr)
            files = sorted(folder.glob("train_data_step*.jsonl"))
            size = sum(p.stat().st_size for p in files)
            lines = sum(1 for p in files for _ in open(p, "rb"))
            paths = [str(p) for p in files]
            t, rss = peak(f"import polars as pl\npl.read_ndjson({paths!r}, infer_schema_length=None)")
            rows.append((f"read_ndjson {gb:g} GB", size, lines, t, rss))
            out = root / f"out_{gb:g}gb.parquet"
            t, rss = bench.fresh_process(["convert", "--from", "nemo-rl", str(folder), "-o", str(out)])
            rows.append((f"convert {gb:g} GB ({len(files)} files)", size, lines, t, rss))
    finally:
        if not args.keep and not os.environ.get("RLADV_BENCH_DATA"):
            shutil.rmtree(root, ignore_errors=True)
    print(f"{'run':28} {'input MB':>9} {'rows':>7} {'wall s':>7} {'rows/s':>8} {'MB/s':>6} {'peak RSS MiB':>12}")
    for name, size, lines, t, rss in rows:
        rate = f"{lines / t:8.0f} {size / 1e6 / t:6.1f}" if lines else f"{'-':>8} {'-':>6}"
        print(f"{name:28} {size / 1e6:9.0f} {lines:7d} {t:7.1f} {rate} {rss:12.0f}")


if __name__ == "__main__":
    main()
