"""Hosts: ``--hosts`` lists and hostfiles (names starting with '-', ports, case and
trailing dots, users, IPv6, empty entries, control characters, thousands of hosts,
slots of 0, -1, NaN or 999999, lines that are not 'HOST slots=N', files that are not
files) and ``--ssh``/``--remote-python`` values, on a dry run through the tests' fake
ssh, whose host names act out a host that is down, locked, mute (never answers), runs
another torch, or never starts its node program; now and then a real two-node launch."""

from __future__ import annotations

import random
from pathlib import Path

from fuzz.bases import FAKE_SSH, Bases
from fuzz.clusters import special
from fuzz.oracle import FLEXTUI, PYTHON, Case
from fuzz.values import ESCAPES

CATEGORY = "hosts"
GOOD = ["localhost", "127.0.0.1", "LOCALHOST", "localhost.", "me@localhost", "localhost:22",
        "::1", "[::1]:22", "ip6-localhost", "127.0.0.2"]
BAD = ["-Fevil@h1", "-oProxyCommand=sh", "h1:0", "h1:65536", "h1:99999", "h1:-1", "h1:abc",
       "", " ", "h 1", "@h1", "me@", "h1@h2@h3", "[::1", "::1]", "h\x1b[2J", "é.example",
       "a" * 300, "h1,", "..", ".", "h1/x", "h1;rm -rf x", "$(id)", "h1\th2", "nohost.invalid",
       "down1", "locked1", "old1", "h1", "0", "-"]
RARE = ["mute1", "silent1"]  # a minute each: preflight's and the node start's time-outs
SLOTS = ["slots=0", "slots=-1", "slots=nan", "slots=1e400", "slots=999999", "slots=1",
         "slots=2", "slots=1025", "slots=", "slots=1 slots=2", "gpus=2", "slots=٢", "slots=0x2",
         "slots= 2", "SLOTS=2"]
SSH = [None, None, None, "", "false", "nonexistent-ssh-command", "sh -c", "true",
       f"{PYTHON} {FAKE_SSH} -o", "\x1b[2J", "ssh -o ProxyCommand=none", '"unclosed']


def _name(rng: random.Random) -> str:
    roll = rng.random()
    if roll < 0.03:
        return rng.choice(RARE)
    if roll < 0.5:
        return rng.choice(GOOD)
    name = rng.choice(BAD)
    return name + rng.choice(ESCAPES) if rng.random() < 0.1 else name


def _hosts(rng: random.Random) -> tuple[str, str]:
    if rng.random() < 0.05:
        n = rng.choice([4096, 4097, 5000])
        return ",".join(f"localhost:{1 + i % 65535}" for i in range(n)), f"{n} hosts"
    names = [_name(rng) for _ in range(rng.choice([1, 2, 2, 2, 3]))]
    sep = rng.choice([",", ",", ", ", ",,", ";", " "])
    text = sep.join(names)
    return text, repr(text)[:80]


def _hostfile(rng: random.Random, work: Path) -> tuple[Path, str]:
    path = work / "hostfile"
    if rng.random() < 0.1:
        kind = rng.choice(["/dev/zero", "fifo", "directory", "missing", "link-to-zero", "empty",
                           "binary", "huge"])
        return special(rng, work, kind, "hostfile"), f"a hostfile that is {kind}"
    lines = []
    for _ in range(rng.choice([1, 2, 2, 3, 5])):
        line = _name(rng)
        if rng.random() < 0.5:
            line += " " + rng.choice(SLOTS)
        if rng.random() < 0.1:
            line = rng.choice(["# a comment", "", "   ", "\t", line + "  # trailing"])
        lines.append(line)
    ending = rng.choice(["\n", "\r\n", "\n\n", ""])
    text = ending.join(lines) + ending
    data = (b"\xef\xbb\xbf" if rng.random() < 0.05 else b"") + \
        text.encode(errors="surrogatepass")
    if rng.random() < 0.05:
        data += b"\xff\xfe"
    path.write_bytes(data)
    return path, repr(text)[:80]


def case(rng: random.Random, index: int, bases: Bases, work: Path) -> Case:
    argv = ["launch", "--dry-run", "-m", "lenet"]
    real = rng.random() < 0.08
    if real:
        argv = ["launch", "--headless", "-m", "lenet", "--steps", "2", "--run-log", "run.ffrun"]
    if rng.random() < 0.3:
        path, what = _hostfile(rng, work)
        target = str(path) if not path.is_relative_to(work) else path.name
        argv += ["--hostfile", target]
        what = f"hostfile {what}"
    else:
        text, what = _hosts(rng)
        argv += [f"--hosts={text}"]
        what = f"--hosts {what}"
    ssh = rng.choice(SSH)
    argv += ["--ssh", f"{PYTHON} {FAKE_SSH}" if ssh is None else ssh]
    if ssh is not None:
        what += f"; --ssh {ssh!r:.40}"
    if rng.random() < 0.3:
        argv += ["--nproc-per-node", rng.choice(["1", "2", "0", "3", "1025"])]
    if rng.random() < 0.1:
        python = rng.choice(["/nonexistent/python", "", "python3", "\x1b[2J", "/dev/null",
                             "/bin/false"])
        argv += ["--remote-python", python]
        what += f"; --remote-python {python!r}"
    if rng.random() < 0.1:
        argv += ["--port", rng.choice(["0", "1", "22", "65535", "65536", "-1"])]
    return Case(CATEGORY, index, f"{what}{' (real)' if real else ''}", [FLEXTUI, *argv], work,
                long=True, codes=frozenset({0, 1, 2, 130}))
