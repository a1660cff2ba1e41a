"""A stand-in for ssh in tests: ``fake_ssh.py [-o OPTION]... [--] DESTINATION COMMAND``
runs COMMAND on this machine through a shell, its stdin and stdout those of the
session, as ssh runs it on the destination (``[user@]host`` or ``ssh://[user@]host[:port]``).
Some host names act out what goes wrong on a cluster:

- ``down*``: nothing answers (ssh's "Connection refused", exit 255);
- ``locked*``: the host wants a password, which BatchMode refuses (exit 255);
- ``old*``: the host runs another torch (``old/sitecustomize.py``);
- ``mute*``: the connection hangs: nothing is said, nothing ends, until it is killed;
- ``silent*``: answers preflight, but never starts its node program for a run (it
  reads the run's request and says nothing until its stdin closes).
"""

import os
import re
import subprocess
import sys
import time
from pathlib import Path

args = sys.argv[1:]
while args and args[0].startswith("-"):
    option = args.pop(0)
    if option == "--":
        break
    if option == "-o":
        args.pop(0)
if not args:
    print("usage: fake_ssh.py [-o OPTION]... [--] DESTINATION COMMAND", file=sys.stderr)
    sys.exit(255)
destination, command = args[0], " ".join(args[1:])
host = re.sub(r":\d+$", "", destination.removeprefix("ssh://").rpartition("@")[2])
if host.startswith("down"):
    print(f"ssh: connect to host {host} port 22: Connection refused", file=sys.stderr)
    sys.exit(255)
if host.startswith("locked"):
    print(f"tester@{host}: Permission denied (publickey,password).", file=sys.stderr)
    sys.exit(255)
if host.startswith("mute"):
    while True:
        time.sleep(60)
env = dict(os.environ)
if host.startswith("old"):
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(__file__).parent / "old"),
                                                      env.get("PYTHONPATH")]))
if host.startswith("silent"):
    from flextui.runtime.node import PreflightRequest, frame, read_request

    request = read_request(sys.stdin.buffer)
    if isinstance(request, PreflightRequest):
        sys.exit(subprocess.run(["sh", "-c", command], input=frame(request), env=env).returncode)
    while sys.stdin.buffer.read(4096):
        pass
    sys.exit(255)
os.execvpe("sh", ["sh", "-c", command], env)
