"""`rase demo` as a user runs it (shortened): embedded broker, bundled REFIT,
whole pipeline, summary and plot."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def test_demo_runs_the_whole_pipeline_and_writes_the_plot(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "rase.cli", "demo", "--hours", "0.1", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout
    assert "devices 45" in out and "timestamps 45" in out
    assert "windows forwarded 45" in out and "aggregates stored 45" in out
    assert "device mechanism: hybrid" in out
    assert any(line.startswith("mean") for line in out.splitlines())     # Hybrid publishes only the mean
    png = tmp_path / "true_vs_estimated.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000
    lines = (tmp_path / "aggregates.jsonl").read_text().splitlines()
    assert len(lines) == 46 and '"params"' in lines[0]
    # The last progress line counts what the summary counts (it once came before the last windows closed).
    progress = [line for line in proc.stderr.splitlines() if line.lstrip().startswith("replay t")]
    assert progress and "done" in progress[-1], proc.stderr[-2000:]
    last = re.search(r"reports\s+(\d+)\s+aggregates\s+(\d+)", progress[-1])
    assert last.group(2) == re.search(r"aggregates stored (\d+)", out).group(1) == "45"
    assert last.group(1) == re.search(r"reports (\d+)", out).group(1)
