"""docs/screenshots.py makes the documentation's screenshots again: its pages, and with chromium the images at
the sizes the docs show."""
from __future__ import annotations

import runpy
import shutil

import pytest
from conftest import ROOT

SCRIPT = runpy.run_path(str(ROOT / "docs" / "screenshots.py"))
pytestmark = pytest.mark.slow  # an rladv run per page


def test_the_pages_hold_their_parts(tmp_path):
    SCRIPT["main"](["--pages", str(tmp_path)])
    for shot in SCRIPT["SHOTS"]:
        page = (tmp_path / shot.png.replace(".png", ".html")).read_text()
        assert 'id="verdict"' in page and (shot.part is None or f'id="{shot.part}"' in page)
        assert ("display: none" in page) == (shot.part is not None)
    made = (tmp_path / "report-verdict.html").read_text()
    assert "rollouts.parquet" in made and "singleton_group" in made and "all_equal_group" in made


@pytest.mark.skipif(shutil.which("chromium") is None, reason="no chromium installed")
def test_the_images_are_drawn_at_the_docs_sizes(tmp_path):
    from PIL import Image

    SCRIPT["main"](["--out", str(tmp_path)])
    for shot in SCRIPT["SHOTS"]:
        with Image.open(tmp_path / shot.png) as image:
            assert image.size == (SCRIPT["WIDTH"], shot.height)
            assert len(image.convert("RGB").getcolors(1 << 20) or []) > 50  # drawn, not blank
