"""How soon the app shows something: `flextui` and `flextui replay LOG` started in an
80x24 pseudo-terminal, the time until they enter the alternate screen (Python and the
imports), until the first frame with content (the Setup screen's title, or the replay),
and for a replay until the replay shows; the median of several runs each. The log is a
short Inception-v3 search, made first.

    python benchmarks/first_frame.py [--runs 5]
"""

from __future__ import annotations

import argparse
import os
import pty
import select
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from fcntl import ioctl
from pathlib import Path
from termios import TIOCSWINSZ

FLEXTUI = [sys.executable, "-m", "flextui"]
ALT_SCREEN = b"\x1b[?1049h"
SETUP, REPLAY = b"Setup:", b"replay of"   # in the Setup screen's title, the replay's header


def first_frames(args: list[str], cwd: str, timeout: float = 60.0) -> dict[bytes, float]:
    """Seconds from starting ``flextui ARGS`` to what it shows first: its alternate
    screen, the Setup screen and (for a replay) the replay, which may come before the
    Setup screen is ever drawn; the app is killed once the last is shown."""
    master, terminal = pty.openpty()
    ioctl(terminal, TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    start = time.monotonic()
    app = subprocess.Popen([*FLEXTUI, *args], stdin=terminal, stdout=terminal,
                           stderr=terminal, cwd=cwd, start_new_session=True)
    os.close(terminal)
    last = REPLAY if args else SETUP
    output, seen = bytearray(), {}
    try:
        while last not in seen:
            if time.monotonic() - start > timeout:
                raise RuntimeError(f"flextui {' '.join(args)} showed no {last!r} in "
                                   f"{timeout:g} s")
            if select.select([master], [], [], 0.01)[0]:
                output.extend(os.read(master, 65536))
                seen.update({w: time.monotonic() - start for w in (ALT_SCREEN, SETUP, REPLAY)
                             if w not in seen and w in output})
        return seen
    finally:
        os.killpg(app.pid, signal.SIGKILL)
        app.wait()
        os.close(master)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        log = Path(work) / "inception.ffsearch"
        subprocess.run([*FLEXTUI, "search", "-m", "inception_v3", "-c", "p100-4x4",
                        "--budget", "10s", "--out", str(log)], cwd=work, check=True,
                       capture_output=True)
        for label, command in (("flextui", []), ("flextui replay (Inception-v3, 10 s search)",
                                                 ["replay", str(log)])):
            runs = [first_frames(command, work) for _ in range(args.runs)]
            alt = statistics.median(run[ALT_SCREEN] for run in runs)
            first = statistics.median(min(run.get(SETUP, 1e9), run.get(REPLAY, 1e9))
                                      for run in runs)
            replay = f", the replay after {statistics.median(run[REPLAY] for run in runs):.2f} s" \
                if command else ""
            print(f"{label}: alternate screen after {alt:.2f} s, first frame after "
                  f"{first:.2f} s{replay} (median of {args.runs})")


if __name__ == "__main__":
    main()
