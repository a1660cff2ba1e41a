"""Import hygiene (DESIGN.md, Layout): packages import only the layers below them and
the core never imports Textual, as the import-linter contracts in pyproject.toml state;
and the core imports and runs with Textual unavailable."""

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from helpers import HANG_S

ROOT = Path(__file__).resolve().parents[1]


def test_the_import_contracts_hold(tmp_path, monkeypatch):
    from importlinter.cli import lint_imports

    monkeypatch.chdir(ROOT)   # lint-imports reads the contracts from pyproject.toml here
    assert lint_imports(cache_dir=str(tmp_path), no_logo=True) == 0


def test_core_imports_without_textual():
    code = textwrap.dedent("""
        import importlib, pkgutil, sys

        class BlockTextual:
            def find_spec(self, name, path=None, target=None):
                if name == "textual" or name.startswith("textual."):
                    raise ImportError("textual is blocked")

        sys.meta_path.insert(0, BlockTextual())
        import flextui
        core = [m.name for m in pkgutil.walk_packages(flextui.__path__, "flextui.")
                if not m.name.startswith(("flextui.tui", "flextui.cli", "flextui.__main__"))]
        for name in core:
            importlib.import_module(name)
        from flextui.graph.library import load_model
        from flextui.machine import load_named_cluster
        from flextui.strategy import builtin_strategy
        graph, cluster = load_model("lenet"), load_named_cluster("p100-4x4")
        builtin_strategy("expert", graph, cluster).check(graph, cluster.num_devices)
        assert not any(m == "textual" or m.startswith("textual.") for m in sys.modules)
        print(len(core))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=HANG_S)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout) >= 20  # every core module was imported


HEAVY = {"numpy", "networkx", "torch", "textual"}


def started(*argv: str) -> tuple[str, set[str]]:
    """``flextui ARGV``'s output, and the top-level packages its process imported (as
    Python reports them with -X importtime: what a real start-up loaded)."""
    out = subprocess.run([sys.executable, "-X", "importtime", "-m", "flextui", *argv],
                         capture_output=True, text=True, timeout=HANG_S)
    assert out.returncode == 0, out.stderr
    imported = {line.rpartition("|")[2].strip() for line in out.stderr.splitlines()
                if line.startswith("import time:")}
    assert "flextui.cli" in imported
    return out.stdout, {name.partition(".")[0] for name in imported}


@pytest.mark.parametrize(("argv", "shows"), [
    (["--help"], "replay a saved search"),          # every command listed, with its help
    (["models"], "transformer"),                      # every library model described
    (["models", "--json"], '"name": "inception_v3"'),
])
def test_light_commands_start_without_heavy_imports(argv, shows):
    """`flextui --help` and `flextui models` start fast because they import none of
    numpy, networkx, torch or Textual (issue 20: they took 0.5-2 s with them)."""
    stdout, imported = started(*argv)
    assert shows in stdout
    assert imported & HEAVY == set()


def test_a_simulation_with_analytic_costs_starts_without_torch():
    """torch (over a second to import) is for profiling and the runtime only."""
    stdout, imported = started("simulate", "-m", "lenet", "-c", "p100-4x4")
    assert "iteration" in stdout
    assert "torch" not in imported and "textual" not in imported


def test_the_app_imports_without_torch():
    """The app's module tree leaves torch (over a second to import) to what needs it:
    detecting GPUs, profiling and launching, all after the first frame."""
    code = "import sys, flextui.tui.app; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=HANG_S)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
