"""What a ``rladv compute`` run imports before it starts reading its input (docs/performance.md, "Start-up"):
the report's models and rich come later, while the reading thread decodes. A fresh interpreter (marked slow)
runs the command in-process, as the executable does (``cli.app``), with stderr piped. A quiet run, which prints
nothing, never imports rich."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import SAMPLES

# notes which modules are there when the reading thread is made, runs ``rladv ARGS``, prints the notes
COMMAND = """
import json, sys
from rladv_cli.io import read
seen = {}
made = read.ReadOnce.__init__
def noted(self, *args, **kwargs):
    seen.update({name: name in sys.modules for name in ("rich", "rladv_cli.report.model", "rladv_cli.pipeline.driver")})
    made(self, *args, **kwargs)
read.ReadOnce.__init__ = noted
from rladv_cli.cli import app
try:
    app(sys.argv[1:], prog_name="rladv")
except SystemExit as stop:
    assert stop.code in (0, None), f"exit {stop.code}"
seen["rich at the end"] = "rich" in sys.modules
print(json.dumps(seen))
"""


def _run(tmp_path, *flags: str) -> tuple[subprocess.CompletedProcess, dict]:
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE")}
    p = subprocess.run([sys.executable, "-c", COMMAND, "compute", str(SAMPLES / "groups.parquet"), "--estimator",
                        "grpo", "-o", str(tmp_path / "o.parquet"), "--device", "cpu", *flags],
                       capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    assert (tmp_path / "o.parquet").exists()
    return p, json.loads(p.stdout.splitlines()[-1])


@pytest.mark.slow  # a fresh interpreter
def test_the_input_is_read_before_the_report_and_rich_are_imported(tmp_path):
    p, seen = _run(tmp_path)
    assert seen == {"rich": False, "rladv_cli.report.model": False, "rladv_cli.pipeline.driver": False,
                    "rich at the end": True}
    assert "verdict" in p.stdout + p.stderr  # the summary is printed once the run is over


@pytest.mark.slow  # a fresh interpreter
def test_a_quiet_run_never_imports_rich(tmp_path):
    p, seen = _run(tmp_path, "-q")
    assert seen["rich at the end"] is False
    assert "verdict" not in p.stdout + p.stderr
