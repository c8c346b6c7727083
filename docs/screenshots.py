"""The documentation's screenshots, made again from the sample data: each an ``rladv compute --html`` page drawn by
headless Chromium at 1280 px (Debian's ``chromium``), the whole top of the page or one of its parts.

    .venv/bin/python docs/screenshots.py            # rewrites docs/report-*.png
    .venv/bin/python docs/screenshots.py --pages D  # only the HTML pages, into folder D (no browser needed)

The README and docs/report.md show these files; docs/development.md lists them with the other generated files.
"""
from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "sample_data"
WIDTH = 1280


@dataclass(frozen=True)
class Shot:
    """``png`` (in docs/): the page of ``rladv compute DATA ARGS --html`` (``DATA`` relative to a folder holding a
    copy of sample_data/ and the made data), ``height`` px from its top, showing only the element ``part`` (a
    section's id) under the page's title when given."""

    png: str
    data: str
    args: tuple[str, ...]
    height: int
    part: str | None = None


SHOTS = (
    Shot("report-multiturn.png", "sample_data/multiturn.parquet",
         ("--estimator", "grpo", "--kl-coef", "0.05", "--rollout-rs", "token_k1", "--rollout-rs-threshold", "1.5",
          "--loss-agg-mode", "seq-mean-token-mean"), 1730),
    Shot("report-verdict.png", "rollouts.parquet", ("--estimator", "grpo"), 900),
    Shot("report-advantages.png", "sample_data/multiturn.parquet", ("--estimator", "gae", "--lam", "0.95"), 2180,
         "advantages"),
)


def dead_groups(path: Path) -> Path:
    """groups.parquet with the scores of 10 of its 17 prompts set to 0 on every row, and three rows given a uid of
    their own: a batch whose verdict names several causes."""
    t = pq.read_table(SAMPLES / "groups.parquet")
    uids = sorted(set(t["uid"].to_pylist()))
    dead = pc.is_in(t["uid"], pa.array(uids[:10]))
    score = pc.if_else(dead, pa.scalar(0.0, t["score"].type), t["score"])
    uid = t["uid"].to_pylist()
    alone = [i for i, u in enumerate(uid) if u not in uids[:10]][:3]
    for k, row in enumerate(alone):
        uid[row] = f"solo-{k}"
    t = t.set_column(t.column_names.index("score"), "score", score)
    t = t.set_column(t.column_names.index("uid"), "uid", pa.array(uid, t["uid"].type))
    pq.write_table(t, path)
    return path


def pages(folder: Path) -> dict[str, Path]:
    """Each shot's HTML page in ``folder``, cut to its part (the other elements hidden), by its png's name."""
    shutil.copytree(SAMPLES, folder / "sample_data")
    dead_groups(folder / "rollouts.parquet")
    out = {}
    for shot in SHOTS:
        page = folder / shot.png.replace(".png", ".html")
        subprocess.run([sys.executable, "-m", "rladv_cli", "compute", shot.data, *shot.args, "-q",
                        "-o", "out.parquet", "--html", page.name], check=True, cwd=folder)
        if shot.part is not None:
            hide = (f"header > :not(h1):not(.sub):not(#{shot.part}), main > :not(header):not(#{shot.part}) "
                    "{ display: none !important; }")
            html = page.read_text()
            page.write_text(re.sub("</head>", f"<style>{hide}</style>\n</head>", html, count=1))
        out[shot.png] = page
    return out


def draw(page: Path, png: Path, height: int, profile: Path) -> None:
    chromium = shutil.which("chromium")
    if chromium is None:
        sys.exit("docs/screenshots.py draws with Debian's chromium (apt-get install chromium); --pages DIR writes "
                 "the pages without it")
    subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
                    "--disable-background-networking", "--disable-component-update", "--disable-sync",
                    f"--user-data-dir={profile}", f"--window-size={WIDTH},{height}", f"--screenshot={png}",
                    page.as_uri()], check=True, capture_output=True, timeout=180)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=Path, help="write the HTML pages into this folder and stop")
    parser.add_argument("--out", type=Path, default=ROOT / "docs", help="where the png files go (default docs/)")
    args = parser.parse_args(argv)
    if args.pages is not None:
        args.pages.mkdir(parents=True, exist_ok=True)
        pages(args.pages)
        return
    with tempfile.TemporaryDirectory() as tmp:
        for name, page in pages(Path(tmp)).items():
            shot = next(s for s in SHOTS if s.png == name)
            draw(page, args.out / name, shot.height, Path(tmp) / "profile")
            print(args.out / name)


if __name__ == "__main__":
    main()
