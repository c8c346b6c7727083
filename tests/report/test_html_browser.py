"""The HTML pages in a real browser: headless Chromium renders a report made from ``sample_data/`` at 1280 px,
takes a screenshot, and the page must not be blank and must log no console message; the verdict card is drawn
at the top in its level's colour. Skipped when no ``chromium`` is installed (``.ci/run`` installs Debian's)."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import SAMPLES, runner
from rladv_cli.cli import app
from test_html_verdict import verdict_batch

CHROMIUM = shutil.which("chromium")
pytestmark = [pytest.mark.skipif(CHROMIUM is None, reason="no chromium installed"), pytest.mark.slow]  # slow: headless Chromium
WIDTH, HEIGHT = 1280, 2400


def screenshot(page: Path, tmp_path: Path, dark: bool = False) -> tuple[np.ndarray, list[str]]:
    """The page drawn at WIDTH x HEIGHT (in the dark colour scheme with ``dark``) as an ``(H, W, 3)`` float
    array, and the browser's console lines."""
    shot = tmp_path / f"{page.stem}.png"
    run = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={tmp_path / 'profile'}", "--hide-scrollbars", "--enable-logging=stderr", "--v=0",
         f"--window-size={WIDTH},{HEIGHT}", f"--screenshot={shot}", page.as_uri()]
        + (["--force-dark-mode", "--blink-settings=preferredColorScheme=0"] if dark else []),
        capture_output=True, text=True, timeout=180,
    )
    assert shot.exists(), run.stderr[-3000:]
    from matplotlib.image import imread

    pixels = imread(shot)[..., :3]
    return pixels, [line for line in run.stderr.splitlines() if ":CONSOLE" in line]


def assert_drawn(pixels: np.ndarray) -> None:
    """Not blank: many colours (text, charts) and a good share of pixels unlike the background."""
    assert pixels.shape == (HEIGHT, WIDTH, 3)
    flat = (pixels.reshape(-1, 3) * 255).round().astype(np.uint8)
    colours = np.unique(flat, axis=0)
    background = pixels[0, 0]
    ink = np.abs(pixels - background).sum(axis=2) > 0.1
    assert len(colours) > 200, len(colours)
    assert ink.mean() > 0.03, ink.mean()
    # charts are drawn, not just text: some rows of the page are mostly coloured (bars of the histograms)
    saturated = (pixels.max(axis=2) - pixels.min(axis=2)) > 0.25
    assert saturated.sum() > 5000, saturated.sum()


PAGES = {
    "report": ["compute", str(SAMPLES / "multiturn.parquet"), "--estimator", "grpo", "--kl-coef", "0.05",
               "--rollout-rs", "token_k1", "--rollout-rs-threshold", "1.5", "-o", "{tmp}/out.parquet", "-q"],
    "inspect": ["inspect", str(SAMPLES / "groups.parquet")],
}


@pytest.mark.parametrize("name, dark", [("report", False), ("report", True), ("inspect", False)])
def test_the_page_renders_in_chromium(tmp_path, name, dark):
    html = tmp_path / f"{name}.html"
    args = [a.replace("{tmp}", str(tmp_path)) for a in PAGES[name]] + ["--html", str(html)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    pixels, console = screenshot(html, tmp_path, dark)
    assert console == []
    assert_drawn(pixels)
    # the page follows the colour scheme: a white background in light mode, a dark one in dark mode
    assert (pixels[0, 0].mean() < 0.2) if dark else (pixels[0, 0].mean() > 0.95)


def level_pixels(pixels: np.ndarray, colour: str) -> np.ndarray:
    """Where the page is drawn in ``colour`` (``#rrggbb``), as a boolean ``(H, W)`` mask."""
    rgb = np.array([int(colour[i:i + 2], 16) for i in (1, 3, 5)]) / 255
    return np.abs(pixels - rgb).max(axis=2) < 0.03


def test_the_verdict_card_renders_in_its_levels_colour(tmp_path):
    """The verdict card is drawn at the top of the page in its level's colour: a failing batch's card red
    (badge, border, share bar), a warning's amber, with no red beyond a legend swatch."""
    shots = {}
    # groups.parquet's 17% in tied groups is a note at the default levels; a warning at 10%
    for name, data, levels in (("fail", verdict_batch(tmp_path), []),
                               ("warn", SAMPLES / "groups.parquet", ["--threshold", "all_equal_group=0.1"])):
        html = tmp_path / f"{name}.html"
        result = runner.invoke(app, ["compute", str(data), "--estimator", "grpo", "-o", str(tmp_path / f"{name}.out"),
                                     "--html", str(html), "-q", *levels])
        assert result.exit_code == 0, result.output
        pixels, console = screenshot(html, tmp_path)
        assert console == []
        shots[name] = pixels[:700]  # the first screen's top: the title, the card, the headline cards
    red, amber = "#c0302b", "#a35200"  # --bad and --warn of the light colour scheme
    fail = level_pixels(shots["fail"], red)
    assert fail.sum() > 5000, fail.sum()
    assert np.flatnonzero(fail.any(axis=1))[0] < 200  # the card starts under the title
    assert level_pixels(shots["warn"], amber).sum() > 5000
    assert level_pixels(shots["warn"], red).sum() < 500


def test_the_checks_can_fail(tmp_path):
    """A blank page and a page with a script error are caught: the two checks above can fail."""
    blank = tmp_path / "blank.html"
    blank.write_text("<!DOCTYPE html><html><body><script>console.error('boom')</script></body></html>")
    pixels, console = screenshot(blank, tmp_path)
    assert any("boom" in line for line in console)
    with pytest.raises(AssertionError):
        assert_drawn(pixels)
