"""torchrun's guard: ``python -m flextui.runtime.guard COMMAND...``, what a launch on this
machine starts in torchrun's place, so that torchrun ends when its launcher does,
however the launcher ends (SIGKILL included).

The launcher starts the guard in a session of its own with a pipe on its stdin that it
never writes to. The guard runs COMMAND (torchrun) in its process group and waits for
it. When stdin reaches its end (the launcher's end of the pipe closed: the kernel closes
it when the launcher dies), the guard ends the group: SIGTERM, SIGKILL after GRACE_S.
The signals a launcher stops a run with (SIGTERM to the whole group) reach torchrun; the
guard only waits for torchrun's end and exits with its status (128 + N for signal N).

It imports nothing of flextui, so it starts at once. (A death signal set with
``PR_SET_PDEATHSIG`` would follow the thread that started torchrun, not the launcher:
the app starts launches from a worker thread.)
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time

GRACE_S = 5.0


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m flextui.runtime.guard COMMAND... (started by flextui launch)",
              file=sys.stderr)
        return 2
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        # a handler, not SIG_IGN, which torchrun and its ranks would inherit
        signal.signal(signum, lambda *_: None)
    child = subprocess.Popen(argv, stdin=subprocess.DEVNULL)
    threading.Thread(target=_end_with_stdin, name="flextui-guard", daemon=True).start()
    code = child.wait()
    return code if code >= 0 else 128 - code


def _end_with_stdin() -> None:
    """When stdin ends, end the process group; the guard exits as soon as torchrun has
    (this thread with it), so the SIGKILL only comes to a torchrun still there."""
    with contextlib.suppress(OSError):
        while os.read(0, 4096):
            pass
    os.killpg(0, signal.SIGTERM)
    time.sleep(GRACE_S)
    os.killpg(0, signal.SIGKILL)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
