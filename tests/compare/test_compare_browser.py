"""``rladv compare --html`` in a real browser, with the run report's checks (tests/report/test_html_browser.py):
headless Chromium draws the page, which is not blank, logs nothing, and follows the colour scheme. Skipped when
no ``chromium`` is installed."""
from __future__ import annotations

import sys

import numpy as np
import pytest

from conftest import SAMPLES, TESTS, rladv

sys.path.insert(0, str(TESTS / "report"))
from test_html_browser import CHROMIUM, screenshot  # noqa: E402 - the run report's browser checks

pytestmark = [pytest.mark.skipif(CHROMIUM is None, reason="no chromium installed"), pytest.mark.slow]


@pytest.mark.parametrize("dark", [False, True])
def test_the_comparison_page_renders_in_chromium(tmp_path, dark):
    page = tmp_path / "compare.html"
    res = rladv("compare", SAMPLES / "multiturn.parquet", "--run", "gae: --estimator gae",
                "--run", "lam: --estimator gae --lam 0.5", "-q", "--html", page)
    assert res.exit_code == 0, res.output
    pixels, console = screenshot(page, tmp_path, dark)
    assert console == []
    assert len(np.unique((pixels.reshape(-1, 3) * 255).round().astype(np.uint8), axis=0)) > 200  # text, charts
    assert (np.abs(pixels - pixels[0, 0]).sum(axis=2) > 0.1).mean() > 0.03  # not blank
    # the scatters' points: translucent blue dots, bluer than anything else on the page
    assert ((pixels[..., 2] - pixels[..., 0]) > 0.15).sum() > 3000  # ~1,100 without them (the links)
    assert (pixels[0, 0].mean() < 0.2) if dark else (pixels[0, 0].mean() > 0.95)
