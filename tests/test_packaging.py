"""A plain (non-editable) install carries the model and cluster libraries and, where a C
compiler is at hand (as in CI), the simulator's compiled core."""

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from helpers import HANG_S

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_wheel_contains_the_libraries(tmp_path):
    # built from a copy of the sources: setuptools writes build/ and *.egg-info/ beside
    # them, and the checkout is left as it was
    source = tmp_path / "source"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "*.egg-info", ".*_cache", "__pycache__", "*.so", "*.pyd"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(tmp_path), str(source)], check=True, timeout=HANG_S,
                   cwd=tmp_path)
    wheel, = tmp_path.glob("flextui-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for model in (ROOT / "library" / "models").glob("*.py"):
        assert f"flextui/library/models/{model.name}" in names
    for toml in (ROOT / "library" / "clusters").glob("*.toml"):
        assert f"flextui/library/clusters/{toml.name}" in names
    for init in (ROOT / "flextui").rglob("__init__.py"):  # every subpackage is found by setup.py
        assert init.relative_to(ROOT).as_posix() in names
    assert any(n.startswith("flextui/sim/_ctaskstore.") and n.endswith((".so", ".pyd"))
               for n in names)
    assert "flextui/sim/_ctaskstore.pyi" in names     # its types, for type checkers
