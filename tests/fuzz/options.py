"""Command-line options: every option of every subcommand (read from the parser, so a
new option is fuzzed too), given absurd numbers (negative, nan, inf, 1e400, 20 digits),
strings (huge, unicode, control characters, empty), paths that are missing, a
directory, a FIFO, /dev/zero or a file of another format, and model options (-o) past
their ranges; on top of a cheap base command (a dry run, a short budget)."""

from __future__ import annotations

import argparse
import os
import random
import shutil
from pathlib import Path

from fuzz.bases import CLUSTERS, Bases
from fuzz.oracle import FLEXTUI, Case
from fuzz.values import ESCAPES

CATEGORY = "options"
NUMBERS = ["-1", "0", "1", "2", "nan", "inf", "-inf", "1e400", "-1e400", "1e23", "1e-400",
           "99999999999999999999", "1_000", "0x10", "३", " 7 ", "", "2.5", "-0", "65536",
           "70000", "4096", "1025", "1e308", "+3", "\u0661"]
TEXT = ["", " ", "x" * 10_000, "é☃", "a/" * 3000, "--", "-", "-x", "名前"] + \
    [f"x{e}" for e in ESCAPES[:4]]
BUDGETS = ["1e400s", "nans", "-5s", "0s", "1e9", "infs", "30 s", "2m", "1h", "1e-9s", "0",
           "-1", "5", "1e23", "3x", "s", "2 h", "1e6m"]
SIZES = ["12GiB", "-1GiB", "nan GiB", "0", "1e400 GB", "12 parsecs", "1", "inf GB", "1e30 TiB",
         "12gib", ""]
MODEL_OPTIONS = ["batch_size", "hidden", "image_size", "num_classes", "layers", "depth",
                 "width", "seq_len", "steps", "vocab", "embed_dim", "heads", "in_features",
                 "num_tables", "rows_per_table", "interaction", "aux_logits", "nonexistent"]
MODELS = ["lenet", "mlp", "alexnet", "rnnlm", "dlrm", "transformer", "inception", "resnet",
          "nonexistent", "torchvision:resnet18", "torchvision:nonexistent", "os:system",
          "os.path:join", "flextui.cli:main", "missing.py", "pkg.mod:factory", "", ":", "a:b:c"]
#: options whose value names a file or directory
PATH_DESTS = {"cluster", "strategy", "run_log", "hostfile", "profiles", "show", "export",
              "trace", "resume", "init", "export_strategy", "remote_python", "out", "log",
              "merge", "model", "ssh"}
#: the base of each command: cheap, and a dry run where work would start
BASES = {
    "show": ["show", "-m", "lenet"],
    "simulate": ["simulate", "-m", "lenet", "-c", "local-cpu-2"],
    "search": ["search", "-m", "lenet", "-c", "local-cpu-2", "--budget", "20", "--no-log"],
    "replay": ["replay", "--headless", "base.ffsearch"],
    "profile": ["profile", "-m", "lenet", "--device", "cpu", "--repeats", "1", "--warmup", "0",
                "--max-devices", "2", "--profiles", "profiles"],
    "launch": ["launch", "--dry-run", "-m", "lenet"],
    "runs": ["runs", "show", "base.ffrun"],
    "clusters": ["clusters"],
    "models": ["models"],
}


def actions(command: str) -> list[argparse.Action]:
    from flextui.cli import build_parser

    parser = build_parser([command])
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    p = sub.choices[command]
    if command == "runs":
        inner = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
        p = inner.choices["show"]
    return [a for a in p._actions if a.option_strings and a.dest != "help"]


def _paths(rng: random.Random, work: Path, bases: Bases) -> str:
    return rng.choice([
        "missing.json", "/dev/zero", "fifo", "dir", "dir/", "", "x" * 10_000, "a/" * 3000,
        "\x1b[2J.json", "é.json", "/", "/dev/stdin", "-", str(bases.search_log),
        str(bases.run_log), str(bases.cache), str(bases.strategy("random")),
        str(rng.choice(CLUSTERS)), "base.ffsearch", "/proc/self/environ", "~", "~nobody/x",
        "dir/missing/x.json", "/dev/null", "x" * 256 + ".json",
    ])


def value(rng: random.Random, action: argparse.Action, work: Path, bases: Bases) -> list[str]:
    """The words that follow ``action``'s option: a value, or two for --merge."""
    if action.nargs == 0:
        return []
    dest = action.dest
    n = action.nargs if isinstance(action.nargs, int) else 1
    out = []
    for _ in range(n):
        roll = rng.random()
        if action.choices and roll < 0.4:
            out.append(str(rng.choice(list(action.choices))))
        elif dest == "budget" and roll < 0.8:
            out.append(rng.choice(BUDGETS))
        elif dest == "memory_budget" and roll < 0.8:
            out.append(rng.choice(SIZES))
        elif dest == "option" and roll < 0.9:
            name = rng.choice(MODEL_OPTIONS)
            out.append(f"{name}={rng.choice(NUMBERS + TEXT[:6] + ['true', 'cat', 'dot'])}"
                       if rng.random() < 0.9 else rng.choice([name, "=", "=1", f"{name}=="]))
        elif dest == "model" and roll < 0.6:
            out.append(rng.choice(MODELS))
        elif dest in PATH_DESTS and roll < 0.8:
            out.append(_paths(rng, work, bases))
        elif action.type in (int, float) or roll < 0.6:
            out.append(rng.choice(NUMBERS))
        else:
            out.append(rng.choice(TEXT))
    return out


def case(rng: random.Random, index: int, bases: Bases, work: Path) -> Case:
    os.mkfifo(work / "fifo")
    (work / "dir").mkdir()
    shutil.copy(bases.search_log, work / "base.ffsearch")
    shutil.copy(bases.run_log, work / "base.ffrun")
    command = rng.choice(list(BASES))
    argv = list(BASES[command])
    if command == "launch" and rng.random() < 0.15:
        argv = ["launch", "--headless", "-m", "lenet", "--steps", "2", "--run-log", "run.ffrun"]
    chosen = rng.sample(actions(command), k=min(len(actions(command)), rng.choice([1, 1, 2, 3])))
    what = []
    for action in chosen:
        words = value(rng, action, work, bases)
        flag = rng.choice(action.option_strings)
        if words and words[0].startswith("-") and rng.random() < 0.5:
            argv += [f"{flag}={words[0]}", *words[1:]] if flag.startswith("--") else \
                [flag + words[0], *words[1:]]
        else:
            argv += [flag, *words]
        what.append(" ".join([flag, *(repr(w)[:40] for w in words)]))
    if command in ("replay", "runs") and rng.random() < 0.2:
        argv[-1 if command == "runs" else 2] = _paths(rng, work, bases)
    as_json = "--json" in argv
    return Case(CATEGORY, index, f"{command}: {'; '.join(what)}", [FLEXTUI, *argv], work,
                json=as_json, long=True,
                codes=frozenset({0, 1, 2, 130} if command == "launch" else {0, 2, 130}))
