"""The README's and the docs' examples work as written: each file's Python examples run in
order in one namespace (a block headed ``# NAME.py:`` is a file the text names, written
out instead), every ``flextui`` command line in them is one the command line takes, every
TOML example is a cluster, and the README's tour runs and prints what it shows."""

from __future__ import annotations

import os
import re
import runpy
import shlex
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from doc_files import DOCS, README, Block, blocks, name, section
from flextui.cli import build_parser, command_named
from flextui.graph.library import load_model
from flextui.machine import load_cluster
from flextui.runtime.metrics import Start
from flextui.runtime.runlog import read_run_log
from helpers import HANG_S
from processes import wait_gone

FILE_HEADER = re.compile(r"#\s*([\w-]+\.py):")


def file_named(block: Block) -> str | None:
    """The file a Python block is, when its first line names one (``# mycnn.py: ...``)."""
    found = FILE_HEADER.search(block.text.split("\n", 1)[0])
    return found.group(1) if found else None


def check_python_api(namespace: dict, here: Path) -> None:
    assert namespace["cost"] > 0 and namespace["timeline"].makespan > 0
    assert namespace["result"].best_cost <= namespace["result"].initial_cost
    assert (here / "lenet.ffsearch").exists()


def check_own_model(namespace: dict, here: Path) -> None:
    """The model file of "Your own model" is a model flextui imports: its ops, its
    default batch and exactly the module's parameters."""
    graph = load_model(str(here / "mycnn.py"))
    module = runpy.run_path(str(here / "mycnn.py"))["model"]()
    assert graph.param_count == sum(p.numel() for p in module.parameters())
    assert {"conv2d", "linear", "softmax_ce"} <= {op.type for op in graph.ops}
    assert graph.batch_size == 64


#: what each doc's Python examples must leave behind, beyond running
CHECKS: dict[str, Callable[[dict, Path], None]] = {
    "docs/python.md": check_python_api, "docs/models.md": check_own_model}
WITH_PYTHON = [doc for doc in DOCS
               if any(b.lang == "python" for b in blocks(doc.read_text()))
               or name(doc) in CHECKS]


@pytest.mark.parametrize("doc", WITH_PYTHON, ids=name)
def test_python_examples_run(doc, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the examples write files
    python = [b for b in blocks(doc.read_text()) if b.lang == "python"]
    assert python, f"{name(doc)} has no Python examples left to check"
    namespace: dict = {}
    for block in python:
        file = file_named(block)
        if file is not None:
            (tmp_path / file).write_text(block.text)
        else:
            exec(compile(block.text, name(doc), "exec"), namespace)
    CHECKS.get(name(doc), lambda namespace, here: None)(namespace, tmp_path)


def command_lines(text: str) -> Iterator[str]:
    """The ``flextui`` command lines of ``text``: in ``sh`` blocks, and after a ``$``
    prompt in any block (a block without one shows output, which may start with the
    word)."""
    for block in blocks(text):
        for line in _joined(block.text.splitlines()):
            if line.startswith("$ "):
                line = line[2:]
            elif block.lang != "sh":
                continue
            if line == "flextui" or line.startswith("flextui "):
                yield line


def _joined(lines: list[str]) -> Iterator[str]:
    """The lines, a line ending in a backslash joined with the next (a long command)."""
    held = ""
    for line in lines:
        if line.endswith("\\"):
            held += line[:-1] + " "
        else:
            yield held + line.strip() if held else line
            held = ""


WITH_COMMANDS = [doc for doc in DOCS if any(command_lines(doc.read_text()))]


@pytest.mark.parametrize("doc", WITH_COMMANDS, ids=name)
def test_command_lines_parse(doc, capsys):
    """Every command line shown names options the command has, with values it takes."""
    refused = []
    for line in command_lines(doc.read_text()):
        argv = shlex.split(line, comments=True)[1:]
        try:
            build_parser(command_named(argv)).parse_args(argv)
        except SystemExit:
            refused.append(f"{line}\n  {capsys.readouterr().err.strip().splitlines()[-1]}")
    assert refused == []


def test_toml_examples_are_clusters(tmp_path):
    examples = [(doc, b.text) for doc in DOCS for b in blocks(doc.read_text())
                if b.lang == "toml"]
    assert examples
    for i, (doc, text) in enumerate(examples):
        path = tmp_path / f"example-{i}.toml"
        path.write_text(text)
        assert load_cluster(path).num_devices > 0, name(doc)


def tour() -> list[tuple[str, list[str]]]:
    """The README tour's commands, each with the lines of output it shows."""
    steps: list[tuple[str, list[str]]] = []
    for block in blocks(section(README.read_text(), "A 5-minute tour")):
        for line in block.text.splitlines():
            if line.startswith("$ "):
                steps.append((line[2:], []))
            else:
                steps[-1][1].append(line)
    return steps


def shape(text: str) -> str:
    """``text`` with every number masked and its whitespace collapsed: times, dates and
    the terminal's width differ from the tour's run; the words and their order do not."""
    return " ".join(re.sub(r"\d+(?:[.,]\d+)*", "#", text).split())


@pytest.mark.slow
@pytest.mark.xdist_group("gloo")   # its launch starts gloo ranks
def test_the_tour_runs_as_shown(tmp_path):
    steps = tour()
    assert [cmd.split()[1] for cmd, _ in steps] == [
        "search", "simulate", "launch", "replay"]
    for command, shown in steps:
        proc = subprocess.run(
            [sys.executable, "-m", "flextui", *shlex.split(command)[1:]], cwd=tmp_path,
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, timeout=HANG_S, env={**os.environ, "COLUMNS": "80"})
        assert proc.returncode == 0, f"{command}\n{proc.stdout[-3000:]}"
        printed = shape(proc.stdout)
        missing = [line for line in shown
                   if re.search(r"\w", line) and shape(line) not in printed]
        assert missing == [], f"{command} printed\n{proc.stdout}"
    run_log, = tmp_path.glob("*.ffrun")
    ranks = [r.pid for r in read_run_log(run_log).records if isinstance(r, Start)]
    assert len(ranks) == 2 and wait_gone(ranks) == []
