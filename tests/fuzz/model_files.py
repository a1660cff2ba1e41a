"""Model files: a PyTorch model file or a builder model file written from fragments,
each of which may misbehave: raise (anything, SystemExit and KeyboardInterrupt
included), call sys.exit or os._exit, print at import (to stdout, to stderr, straight to
file descriptor 1), loop forever, return the wrong types (no module, no tuple, a batch
of batch+1 rows, no batch dim, NaN, int tensors, a huge allocation), a BATCH_SIZE,
DEFAULTS or RANGES that are not what they should be, a build() that returns anything.
Then shown, simulated, searched over and launched (a dry run).

What is reasonable for code that is the user's own: whatever it raises or exits with is
one error naming the model (exit status 2), what it prints goes to stderr (--json stays
JSON), and code that never returns (a loop at import) runs until the user stops it:
flextui does not time out a model file, and Ctrl-C then stops it cleanly (status 130, no
traceback). ``os._exit`` ends the process from inside the user's code, before flextui
can say anything; it is the one thing a model file can do that flextui cannot turn into
a message, so its exit status is taken as it comes."""

from __future__ import annotations

import random
from pathlib import Path

from fuzz.bases import Bases
from fuzz.oracle import FLEXTUI, Case

CATEGORY = "models"
#: (code at import, its exit status when it ends the process itself, whether it never
#: returns)
PRELUDES = [
    ("", None, False), ("", None, False), ("", None, False),
    ("raise RuntimeError('at import')", None, False),
    ("import sys; sys.exit(0)", None, False), ("import sys; sys.exit(3)", None, False),
    ("import sys; sys.exit('bye')", None, False), ("raise KeyboardInterrupt", None, False),
    ("raise SystemExit", None, False), ("raise MemoryError", None, False),
    ("raise GeneratorExit", None, False), ("x = 1 / 0", None, False),
    ("def f(): return f()\nf()", None, False), ("import nonexistent_module_xyz", None, False),
    ("print('hello from import')", None, False), ("print('\\x1b]0;title\\x07')", None, False),
    ("import sys; print('to stderr', file=sys.stderr)", None, False),
    ("import os; os.write(1, b'raw write to fd 1\\n')", None, False),
    ("import sys; sys.stdout.write('no newline')", None, False),
    ("while True: pass", None, True), ("import time; time.sleep(10**6)", None, True),
    ("import os; os._exit(0)", 0, False), ("import os; os._exit(7)", 7, False),
    ("import warnings; warnings.warn('careful')", None, False),
    ("import torch; torch.set_default_dtype(torch.float64)", None, False),
    ("raise ValueError('\\x1b[2J' * 3)", None, False),
    ("import sys; sys.setrecursionlimit(50)", None, False),
    ("class E(BaseException): pass\nraise E('custom')", None, False),
]
BATCHES = ["8", "8", "8", "0", "-1", "'8'", "8.5", "None", "10**9", "True", "2**70", "1"]
MODELS = ["return M()", "return M()", "return M()", "return None", "return 5", "return 'x'",
          "return nn.Linear(64, 10)", "return [M()]", "raise ValueError('no model')",
          "import sys; sys.exit(0)", "return M", "return nn.Identity()", "return nn.Sequential()",
          "raise KeyboardInterrupt"]
FORWARDS = ["return self.fc(x.flatten(1))"] * 4 + [
    "return None", "return (self.fc(x.flatten(1)),)", "return {'y': self.fc(x.flatten(1))}",
    "raise RuntimeError('forward')", "return self.fc(x.flatten(1)).sum()", "return x",
    "return self.fc(x.flatten(1))[:1]", "print('in forward'); return self.fc(x.flatten(1))",
    "return torch.cat([self.fc(x.flatten(1))] * 2)", "return self.fc(x.flatten(1)).numpy()",
    "return self.fc(x.flatten(1)) * float('nan')", "return self.fc(x.flatten(1)).double()",
    "import sys; sys.exit(1)", "return self.fc(x.flatten(1)) if x.shape[0] < 3 else None",
    "return self.fc(x.reshape(-1, 64)[: x.shape[0] // 2])",
]
INPUTS = ["return (torch.randn(batch_size, 1, 8, 8),)"] * 4 + [
    "return torch.randn(batch_size, 1, 8, 8)", "return (torch.randn(batch_size + 1, 1, 8, 8),)",
    "return ()", "return None", "return [torch.randn(batch_size, 1, 8, 8)]",
    "return {'x': torch.randn(batch_size, 1, 8, 8)}",
    "return (torch.randn(batch_size, 1, 8, 8), 5)",
    "return (torch.zeros(batch_size, 1, 8, 8, dtype=torch.int64),)",
    "return (torch.randn(0, 1, 8, 8),)", "return (torch.empty(2**40),)",
    "return (torch.randn(batch_size * 4096, 1, 8, 8),)", "return ('text',)",
    "raise RuntimeError('inputs')", "return (torch.full((batch_size, 1, 8, 8), float('nan')),)",
    "return (torch.randn(batch_size, 1, 8, 8).cuda(),)", "return (torch.randn(1, 1, 8, 8),)",
    "return (torch.randn(batch_size, 1, 8, 8, dtype=torch.float16),)",
]
PYTORCH = """\
import torch
from torch import nn
{prelude}
BATCH_SIZE = {batch}


class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(64, 10)

    def forward(self, x):
        {forward}


def model():
    {model}


def example_inputs(batch_size):
    {inputs}
"""
DEFAULTS = ["{'batch_size': 16, 'width': 32}"] * 3 + [
    "5", "None", "{'batch_size': 'x'}", "{1: 2}", "{'batch_size': 16, 'width': [1]}", "{}",
    "{'batch_size': -1, 'width': 32}", "{'batch_size': 16, 'width': float('nan')}",
    "{'batch_size': 16, 'width': 32, '\\x1b[2J': 1}", "{'batch_size': 2**70, 'width': 32}",
    "{'batch_size': 16, 'width': True}", "[('batch_size', 16)]",
]
RANGES = ["{'width': (1, 1024)}"] * 3 + [
    "5", "None", "{'width': (1,)}", "{'width': (10, 1)}", "{'width': ('a', 'b')}",
    "{'width': (float('nan'), 5)}", "{'nope': (1, 2)}", "{'width': (-2**70, 2**70)}", "{}",
    "{'batch_size': (0, 0)}", "{'width': [1, 1024]}",
]
BUILDS = ["""\
    g = GraphBuilder("fuzz", batch_size=batch_size)
    x = g.input((batch_size, 64), name="x")
    g.softmax_ce(g.linear(x, width, name="fc"), g.input((batch_size,), dtype="int64",
                 name="labels"), name="loss")
    return g.build()"""] * 4 + [
    "    return None", "    return 5", "    raise RuntimeError('build')",
    "    import sys; sys.exit(0)", "    return GraphBuilder('empty', batch_size=batch_size).build()",
    "    while True: pass",
]
BUILDER = """\
from flextui.graph import GraphBuilder
{prelude}
DESCRIPTION = {description}
DEFAULTS = {defaults}
RANGES = {ranges}


def build(batch_size=16, width=32, **options):
{build}
"""


def _write(rng: random.Random, path: Path) -> tuple[str, int | None, bool]:
    prelude, exits, forever = rng.choice(PRELUDES)
    if rng.random() < 0.6:
        parts = {"prelude": prelude, "batch": rng.choice(BATCHES),
                 "forward": rng.choice(FORWARDS), "model": rng.choice(MODELS),
                 "inputs": rng.choice(INPUTS)}
        path.write_text(PYTORCH.format(**parts))
        what = "; ".join(f"{k}: {v}" for k, v in parts.items()
                         if v not in ("", "8", "return M()", FORWARDS[0], INPUTS[0]))
    else:
        build = rng.choice(BUILDS)
        forever = forever or "while True" in build
        parts = {"prelude": prelude, "defaults": rng.choice(DEFAULTS),
                 "ranges": rng.choice(RANGES), "build": build,
                 "description": rng.choice(["'a fuzzed builder'", "5", "None",
                                            "'\\x1b[2J'", "'x' * 10000"])}
        path.write_text(BUILDER.format(**parts))
        what = "builder; " + "; ".join(f"{k}: {v[:40]}" for k, v in parts.items()
                                       if v not in ("", DEFAULTS[0], RANGES[0], BUILDS[0],
                                                    "'a fuzzed builder'"))
    return what or "a model file as it should be", exits, forever


def case(rng: random.Random, index: int, bases: Bases, work: Path) -> Case:
    path = work / "model.py"
    what, exits, forever = _write(rng, path)
    options = []
    if rng.random() < 0.2:
        options = ["-o", rng.choice(["width=8", "width=0", "width=1e400", "batch_size=3",
                                     "nope=1", "batch_size=nan"])]
    if rng.random() < 0.15:
        options += ["-b", rng.choice(["1", "2", "3", "0", "1000000"])]
    command = rng.choice(["show", "show-json", "simulate", "search", "launch"])
    argv = {
        "show": ["show", "-m", path.name, *options],
        "show-json": ["show", "-m", path.name, "--json", *options],
        "simulate": ["simulate", "-m", path.name, "-c", "local-cpu-2", "--json", *options],
        "search": ["search", "-m", path.name, "-c", "local-cpu-2", "--budget", "20", "--no-log",
                   *options],
        "launch": ["launch", "--dry-run", "-m", path.name, *options],
    }[command]
    codes = {0, 2, 130} | ({exits} if exits is not None else set())
    return Case(CATEGORY, index, f"{what}; {command} {' '.join(options)}", [FLEXTUI, *argv],
                work, json=command in ("show-json", "simulate") and exits is None,
                long=True, codes=frozenset(codes), escapes_ok="x1b" in what)
