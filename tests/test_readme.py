"""The README's and the docs' Python examples run as written: each file's in order in one
namespace (a block headed ``# NAME.py:`` is a file the text names, written out
instead)."""

from __future__ import annotations

import re
import runpy
from collections.abc import Callable
from pathlib import Path

import pytest

from doc_files import DOCS, Block, blocks, name
from flextui.graph.library import load_model

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
