"""Hosts reached over real ssh, on this machine: each "host" is a network namespace with
its own address on a private subnet, its own hostname and its own sshd (Debian's
openssh-server), so that a launch over hosts meets a real ssh client, a real sshd, a
real login and ranks that meet over an address other than 127.0.0.1.

The layout (everything made by this module, under names of its own, and removed by it)::

    namespace <tag>-hub: bridge br0, 10.228.28.1/24 (the launcher's side: its ssh
                         connections leave from here, through a ProxyCommand relay)
    namespace <tag>-h0:  eth0 10.228.28.11/24, hostname flextui-host0, sshd on :22
    namespace <tag>-h1:  eth0 10.228.28.12/24, ...

Each host's eth0 is one end of a veth pair whose other end is on the hub's bridge; the
pairs are made inside the hub, so this machine's own namespace gets no link, address or
route. The subnet is the same for every set of hosts (their networks never meet), and
the tag (this process's PID and a count) keeps the names of sets made by parallel test
workers apart. A host's sshd runs as root in its namespace (``ip netns exec``, and
``unshare --uts`` for the hostname) with a host key, an authorized key and a config made
in a directory of the caller's. The client side is one ssh config (``ssh -F CONFIG``:
``--ssh`` of a launch) naming the test's key, a known_hosts file with the host keys, and
a ProxyCommand that runs a relay (this file, ``relay ADDRESS PORT``) in the hub.

Processes share this machine's PID namespace, so what runs on a host is seen here by
PID: every process whose network namespace is the host's (``/proc/PID/ns/net``),
orphans included. Run as a script, it brings hosts up until Ctrl-C::

    sudo python tests/netns_hosts.py --hosts 2
"""

from __future__ import annotations

import argparse
import contextlib
import enum
import getpass
import itertools
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

SUBNET = "10.228.28"
HUB_ADDRESS = f"{SUBNET}.1"
SSHD = "/usr/sbin/sshd"
#: the directory sshd needs for privilege separation (Debian's service makes it)
PRIVSEP = Path("/run/sshd")
_count = itertools.count()


class Kind(enum.Enum):
    """What a host is like to log in to."""

    #: its host key is known here and it lets the test's key in
    TRUSTED = "trusted"
    #: it asks for a password only (BatchMode refuses to give one)
    PASSWORD = "password"
    #: its host key is not in the client's known_hosts
    UNKNOWN_KEY = "unknown key"
    #: its logins find another flextui first: its sshd sets PYTHONPATH to a copy of
    #: flextui whose version is OTHER_VERSION (as a user's own older install would be)
    OTHER_FLEXTUI = "other flextui"


OTHER_VERSION = "0.0.1"


def unavailable() -> str | None:
    """Why hosts cannot be made here, None when they can."""
    if os.geteuid() != 0:
        return "network namespaces and sshd need root"
    for tool in ("ip", "ss", "unshare", "ssh", "ssh-keygen"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    if not Path(SSHD).exists():
        return f"sshd is not installed ({SSHD}): apt-get install openssh-server"
    probe = f"flextui-probe-{os.getpid()}-{next(_count)}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"this kernel refuses network namespaces: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


class NetnsHosts:
    """Hosts of ``kinds`` (host *k* at ``SUBNET``.1k), their files under ``root``. As a
    context, made on entry and removed on exit; ``down`` removes every namespace and
    process it made, by name and PID, whatever ``up`` got to."""

    def __init__(self, root: Path, kinds: list[Kind] | tuple[Kind, ...],
                 tag: str | None = None) -> None:
        self.root = Path(root)
        self.kinds = tuple(kinds)
        self.tag = tag or f"flextui-{os.getpid()}-{next(_count)}"
        self.hub = f"{self.tag}-hub"
        self.names = [f"{self.tag}-h{k}" for k in range(len(kinds))]
        self.addresses = [f"{SUBNET}.{11 + k}" for k in range(len(kinds))]
        self.config = self.root / "ssh_config"
        self._made: list[str] = []          # namespaces, in the order made
        self._sshd: dict[int, subprocess.Popen[bytes]] = {}

    # -- what a test uses ---------------------------------------------------------------

    @property
    def ssh(self) -> str:
        """The launch's ``--ssh``."""
        return f"ssh -F {shlex.quote(str(self.config))}"

    def hostname(self, k: int) -> str:
        return f"flextui-host{k}"

    def sshd_pid(self, k: int) -> int:
        return self._sshd[k].pid

    def stop_sshd(self, k: int) -> None:
        """Stop host *k*'s sshd (its sessions go on, as when sshd is restarted)."""
        proc = self._sshd[k]
        proc.terminate()
        proc.wait()

    def start_sshd(self, k: int) -> None:
        """Start host *k*'s sshd (again), and wait until it listens."""
        if k in self._sshd and self._sshd[k].poll() is None:
            return
        log = self.root / f"sshd{k}.log"
        command = ["ip", "netns", "exec", self.names[k], "unshare", "--uts", "sh", "-c",
                   f"hostname {self.hostname(k)} && exec {SSHD} -D -e -f "
                   f"{shlex.quote(str(self.root / f'sshd{k}.conf'))}"]
        with log.open("ab") as out:
            self._sshd[k] = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out,
                                             stderr=out, start_new_session=True)
        self._wait_listening(k, log)

    def processes(self, k: int | None = None) -> list[int]:
        """What runs on host *k* (every host, and the hub, by default) now, by PID:
        every process in its namespace but its sshd."""
        names = [self.names[k]] if k is not None else [self.hub, *self.names]
        inodes = {_inode(Path("/var/run/netns") / name) for name in names if name in self._made}
        sshd = {proc.pid for proc in self._sshd.values()}
        found = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit() and int(entry.name) not in sshd:
                with contextlib.suppress(OSError):
                    if _inode(entry / "ns" / "net") in inodes and not _zombie(entry):
                        found.append(int(entry.name))
        return sorted(found)

    def survivors(self, timeout: float | None = None) -> list[int]:
        """The processes still on any host (sshd aside) once ``timeout`` seconds (HANG_S
        by default: a hang) have passed, or none as soon as none is there."""
        from helpers import HANG_S

        deadline = time.monotonic() + (HANG_S if timeout is None else timeout)
        while (left := self.processes()) and time.monotonic() < deadline:
            time.sleep(0.1)
        return left

    def listeners(self, k: int) -> list[tuple[str, int, tuple[int, ...]]]:
        """The TCP sockets listening on host *k*, as (address, port, the PIDs that hold
        it), as ``ss`` lists them ("*" or "0.0.0.0": every address)."""
        said = subprocess.run(["ip", "netns", "exec", self.names[k], "ss", "-Hltnp"],
                              capture_output=True, text=True, check=True).stdout
        found = []
        for line in said.splitlines():
            fields = line.split()
            address, _, port = fields[3].rpartition(":")
            pids = tuple(int(pid) for pid in re.findall(r"pid=(\d+)", line))
            found.append((address.strip("[]"), int(port), pids))
        return found

    def run(self, k: int, command: str) -> subprocess.CompletedProcess[str]:
        """``command`` run on host *k* through ssh, as a launch reaches it."""
        return subprocess.run(["ssh", "-F", str(self.config), "-o", "BatchMode=yes",
                               self.addresses[k], command], capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, timeout=600)

    # -- making and removing -------------------------------------------------------------

    def __enter__(self) -> NetnsHosts:
        self.up()
        return self

    def __exit__(self, *_: object) -> None:
        self.down()

    def up(self) -> None:
        try:
            self._network()
            self._keys()
            for k in range(len(self.kinds)):
                self._sshd_config(k)
                self.start_sshd(k)
            self._client_config()
        except BaseException:
            self.down()
            raise

    def down(self) -> None:
        """End every process on the hosts and the hub (sessions, node programs, ranks,
        relays: whatever is in their namespaces), then the sshds, then remove the
        namespaces (their links go with them)."""
        for pid in self.processes():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for proc in self._sshd.values():
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        self.survivors(timeout=60)
        for name in reversed(self._made):
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
        self._made.clear()

    def _network(self) -> None:
        self._netns(self.hub)
        self._ip(self.hub, "link", "add", "br0", "type", "bridge")
        self._ip(self.hub, "addr", "add", f"{HUB_ADDRESS}/24", "dev", "br0")
        for link in ("lo", "br0"):
            self._ip(self.hub, "link", "set", link, "up")
        for k, name in enumerate(self.names):
            self._netns(name)
            port = f"p{k}"
            self._ip(self.hub, "link", "add", port, "type", "veth", "peer", "name", "eth0",
                     "netns", name)
            self._ip(self.hub, "link", "set", port, "master", "br0")
            self._ip(self.hub, "link", "set", port, "up")
            self._ip(name, "addr", "add", f"{self.addresses[k]}/24", "dev", "eth0")
            for link in ("lo", "eth0"):
                self._ip(name, "link", "set", link, "up")

    def _netns(self, name: str) -> None:
        subprocess.run(["ip", "netns", "add", name], check=True, capture_output=True)
        self._made.append(name)

    @staticmethod
    def _ip(namespace: str, *args: str) -> None:
        done = subprocess.run(["ip", "-n", namespace, *args], capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"ip -n {namespace} {' '.join(args)}: {done.stderr.strip()}")

    def _keys(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        keys = [("client_key", None), *((f"host_key{k}", k) for k in range(len(self.kinds)))]
        for name, _ in keys:
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f",
                            str(self.root / name)], check=True, capture_output=True)
        (self.root / "authorized_keys").write_text((self.root / "client_key.pub").read_text())
        known = [f"{self.addresses[k]} {_public(self.root / f'host_key{k}.pub')}\n"
                 for k, kind in enumerate(self.kinds) if kind != Kind.UNKNOWN_KEY]
        (self.root / "known_hosts").write_text("".join(known))
        PRIVSEP.mkdir(mode=0o755, exist_ok=True)
        if Kind.OTHER_FLEXTUI in self.kinds:
            self._other_flextui()

    def _other_flextui(self) -> None:
        """A copy of flextui whose version is OTHER_VERSION, for an OTHER_FLEXTUI host."""
        import flextui

        copy = self.root / "other" / "flextui"
        shutil.copytree(Path(flextui.__file__).parent, copy,
                        ignore=shutil.ignore_patterns("__pycache__"))
        init = copy / "__init__.py"
        text = init.read_text()
        assert f'__version__ = "{flextui.__version__}"' in text
        init.write_text(text.replace(f'__version__ = "{flextui.__version__}"',
                                     f'__version__ = "{OTHER_VERSION}"'))

    def _sshd_config(self, k: int) -> None:
        kind = self.kinds[k]
        password = kind == Kind.PASSWORD
        lines = [f"ListenAddress {self.addresses[k]}:22",
                 f"HostKey {self.root / f'host_key{k}'}",
                 f"PidFile {self.root / f'sshd{k}.pid'}",
                 f"AuthorizedKeysFile {self.root / 'authorized_keys'}",
                 "StrictModes no", "UsePAM no",
                 f"PermitRootLogin {'yes' if password else 'prohibit-password'}",
                 f"PubkeyAuthentication {'no' if password else 'yes'}",
                 f"PasswordAuthentication {'yes' if password else 'no'}",
                 "KbdInteractiveAuthentication no",
                 "AcceptEnv FLEXTUI_*"]
        if kind == Kind.OTHER_FLEXTUI:
            lines.append(f"SetEnv PYTHONPATH={self.root / 'other'}")
        (self.root / f"sshd{k}.conf").write_text("\n".join(lines) + "\n")

    def _client_config(self) -> None:
        relay = " ".join(shlex.quote(word) for word in (
            "ip", "netns", "exec", self.hub, sys.executable, str(Path(__file__).resolve()),
            "relay"))
        self.config.write_text(
            "Host *\n"
            f"  User {getpass.getuser()}\n"
            f"  IdentityFile {self.root / 'client_key'}\n"
            "  IdentitiesOnly yes\n"
            f"  UserKnownHostsFile {self.root / 'known_hosts'}\n"
            "  GlobalKnownHostsFile /dev/null\n"
            "  SendEnv FLEXTUI_*\n"
            f"  ProxyCommand {relay} %h %p\n")

    def _wait_listening(self, k: int, log: Path) -> None:
        from helpers import HANG_S

        proc, deadline = self._sshd[k], time.monotonic() + HANG_S
        while "Server listening on" not in log.read_text(errors="replace"):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"sshd of host {k} did not start: {log.read_text()}")
            time.sleep(0.05)


def _public(path: Path) -> str:
    kind, key, *_ = path.read_text().split()
    return f"{kind} {key}"


def _inode(path: Path) -> int:
    return os.stat(path).st_ino


def _zombie(proc: Path) -> bool:
    return (proc / "stat").read_text().split(") ")[1].startswith("Z")


def relay(address: str, port: int) -> None:
    """ssh's ProxyCommand: stdin to a TCP connection to ``address``:``port``, and what
    comes back to stdout; the process ends when the connection does (or breaks)."""
    try:
        sock = socket.create_connection((address, port))
    except OSError as exc:  # as ssh says it when it connects itself
        print(f"ssh: connect to host {address} port {port}: {exc.strerror or exc}",
              file=sys.stderr)
        sys.exit(255)

    def back() -> None:
        try:
            while data := sock.recv(65536):
                os.write(1, data)
        finally:
            os._exit(0)
    threading.Thread(target=back, daemon=True).start()
    try:
        while data := os.read(0, 65536):
            sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
    except OSError:
        os._exit(0)
    threading.Event().wait()  # the answer may still be coming: back() ends the process


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command")
    go = sub.add_parser("relay")
    go.add_argument("address")
    go.add_argument("port", type=int)
    parser.add_argument("--hosts", type=int, default=2, help="how many hosts (default 2)")
    parser.add_argument("--dir", default=None, help="where their files go (default: a "
                        "temporary directory)")
    args = parser.parse_args(argv)
    if args.command == "relay":
        relay(args.address, args.port)
        return 0
    why = unavailable()
    if why is not None:
        print(f"cannot make hosts here: {why}", file=sys.stderr)
        return 2
    import tempfile

    with contextlib.ExitStack() as stack:
        root = Path(args.dir) if args.dir else Path(stack.enter_context(
            tempfile.TemporaryDirectory(prefix="flextui-hosts-")))
        hosts = stack.enter_context(NetnsHosts(root, [Kind.TRUSTED] * args.hosts))
        print(f"hosts: {','.join(hosts.addresses)}\nssh:   {hosts.ssh}\n"
              f"try:   flextui launch -m lenet --hosts {','.join(hosts.addresses)} "
              f"--ssh '{hosts.ssh}' --headless\n(Ctrl-C removes them)", flush=True)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        signal.sigwait({signal.SIGINT, signal.SIGTERM})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
