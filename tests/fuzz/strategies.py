"""Strategy files (JSON): exported strategies changed value by value (degrees and
devices of 0, -1, NaN, 1e400, huge; names with control characters; a wrong or null
fingerprint; keys missing or unknown) or damaged as text (cut, bit flips, NaN and
Infinity literals, numbers of thousands of digits, nesting thousands deep), and files
that are not files; then shown, simulated, searched from and launched (a dry run)."""

from __future__ import annotations

import json
import random
from pathlib import Path

from fuzz.bases import STRATEGIES, Bases
from fuzz.clusters import special
from fuzz.oracle import FLEXTUI, Case
from fuzz.values import mutate, mutate_bytes, paths

CATEGORY = "strategies"
#: text that JSON's own writer never makes, put where a number is
LITERALS = ["NaN", "Infinity", "-Infinity", "1e400", "-1e400", "1" * 5000, "0.0", "-0",
            "1E2", "2.0", "1e-400", "0x10", "[" * 5000 + "]" * 5000, "null", "true"]


def _text(rng: random.Random, data: dict) -> tuple[str, str]:
    done = []
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        places = [p for p in paths(data) if p]
        if rng.random() < 0.3:  # the devices or a degree of an op
            places = [p for p in places if p[0] == "ops" and len(p) >= 3] or places
        if rng.random() < 0.15:
            places = [p for p in places if p[0] in ("graph", "devices", "cluster", "model",
                                                     "format", "version", "name")] or places
        data, what = mutate(rng, data, places)
        done.append(what)
    try:
        text = json.dumps(data, indent=1, default=repr)
    except (ValueError, TypeError, RecursionError):
        text = json.dumps({"ops": None})
    if rng.random() < 0.25:  # a number JSON cannot hold, written in
        numbers = [i for i, c in enumerate(text) if c.isdigit() and not text[i - 1].isalnum()]
        if numbers:
            at = rng.choice(numbers)
            end = at
            while end < len(text) and (text[end].isdigit() or text[end] in ".e-"):
                end += 1
            literal = rng.choice(LITERALS)
            text = text[:at] + literal + text[end:]
            done.append(f"the number at {at} written {literal[:20]}")
    return text, "; ".join(done)


def case(rng: random.Random, index: int, bases: Bases, work: Path) -> Case:
    base = rng.choice(STRATEGIES)
    path = work / "strategy.json"
    roll = rng.random()
    if roll < 0.08:
        kind = rng.choice(["/dev/zero", "fifo", "directory", "missing", "link-to-zero",
                           "empty", "binary", "link-loop"])
        path = special(rng, work, kind, "strategy.json")
        what = f"a strategy file that is {kind}"
    elif roll < 0.25:
        data, what = mutate_bytes(rng, bases.strategy(base).read_bytes())
        path.write_bytes(data)
        what = f"{base}: {what}"
    else:
        text, what = _text(rng, json.loads(bases.strategy(base).read_text()))
        path.write_text(text, errors="surrogatepass")
        what = f"{base}: {what}"
    target = str(path) if not path.is_relative_to(work) else path.name
    command = rng.choice(["show", "show-json", "simulate", "search", "launch"])
    cluster = rng.choice(["local-cpu-4", "local-cpu-4", "local-cpu-2", "p100-4x4@1node"])
    argv = {
        "show": ["show", "-m", "lenet", "-c", cluster, "-s", target],
        "show-json": ["show", "-m", "lenet", "-c", cluster, "-s", target, "--json"],
        "simulate": ["simulate", "-m", "lenet", "-c", cluster, "-s", target, "--json"],
        "search": ["search", "-m", "lenet", "-c", cluster, "--init", target, "--budget", "20",
                   "--no-log"],
        "launch": ["launch", "--dry-run", "-m", "lenet", "-s", target],
    }[command]
    return Case(CATEGORY, index, f"{what}; {command}", [FLEXTUI, *argv], work,
                json=command in ("show-json", "simulate"), long=command == "search",
                codes=frozenset({0, 2, 130}))
