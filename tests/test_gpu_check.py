"""benchmarks/gpu_check.py, the one command a machine with a GPU runs first: its CPU dry
run does every step (profile, plain timings, copies, two launches) and reports them; on
a machine without a GPU the real run refuses in one line."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import HANG_S

SCRIPT = Path(__file__).parent.parent / "benchmarks" / "gpu_check.py"


@pytest.mark.slow
def test_the_dry_run_reports_every_step(tmp_path):
    proc = subprocess.run([sys.executable, str(SCRIPT), "--dry-run", "--steps", "2",
                           "--repeats", "3", "--out", str(tmp_path)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=HANG_S,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    # the MLP's two linear shapes, each timed by the profile and plainly
    assert len(report["referee"]) == 2
    assert all(row["profiled_s"] > 0 and row["plain_s"] > 0 for row in report["referee"])
    assert report["copies_gb_s"]["host to host"] > 0
    # every distinct task the run recorded (making the two inputs, two linear shapes,
    # the ReLU, the softmax with its loss) was profiled alone too, under the same key;
    # the inputs have no backward pass
    assert report["per_kind"]["forward"]["tasks"] == 6
    assert report["per_kind"]["backward"]["tasks"] == 4
    step = report["step"]
    assert step["iteration_s"] > 0 and step["simulated_iteration_s"] > 0
    assert step["gpu_util"] is None
    assert "step:" in proc.stdout and "copies:" in proc.stdout


def test_without_a_gpu_the_real_run_says_so_in_one_line(tmp_path):
    proc = subprocess.run([sys.executable, str(SCRIPT)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=HANG_S)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == "gpu_check: no CUDA GPU here; --dry-run runs the same steps on the CPU\n"
