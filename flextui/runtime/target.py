"""Where a launch runs: this machine, or hosts reached over ssh (``Remote``), with its
rendezvous port and run id. A ``LaunchTarget`` is made once, from the command line's
options or by the app, and carried: by the prepared launch, by the data-parallel
baseline made for it (the same target, a run id of its own), and into the run log.
"""

from __future__ import annotations

import os
import shlex
import sys
import uuid
from dataclasses import dataclass, field, replace
from typing import Any

from flextui.errors import FieldError, FlextuiError
from flextui.fields import FieldReader, FormFields
from flextui.limits import HOSTS
from flextui.runtime.hosts import Host
from flextui.runtime.spec import Backend, Training

SSH_ENV = "FLEXTUI_SSH"
#: options every ssh session gets: no password prompt, and a bound wait for the host
SSH_OPTIONS = ("-o", "BatchMode=yes", "-o", "ConnectTimeout=10")
#: where the ranks of one node meet: the rendezvous store listens here only
LOOPBACK = "127.0.0.1"


@dataclass(frozen=True)
class Remote:
    """How hosts are reached: the ssh command and the Python that runs flextui there."""

    ssh: tuple[str, ...] = ("ssh",)
    python: str = sys.executable

    @classmethod
    def choose(cls, ssh: str | None = None, python: str | None = None) -> Remote:
        """``--ssh`` (else ``FLEXTUI_SSH``, else ssh) and ``--remote-python``."""
        text = ssh or os.environ.get(SSH_ENV) or "ssh"
        where = "--ssh" if ssh else SSH_ENV if os.environ.get(SSH_ENV) else "ssh"
        try:
            words = tuple(shlex.split(text))
        except ValueError as exc:
            raise FlextuiError(f"{where} {text!r}: {exc}") from None
        if not words:
            raise FlextuiError(f"{where} is empty: give an ssh command, e.g. --ssh 'ssh -p 2222'")
        return cls(words, python or sys.executable)

    def command(self, host: Host) -> list[str]:
        """ssh to ``host`` running the node program; ``--`` ends ssh's options, so
        nothing after it is read as one."""
        return [*self.ssh, *SSH_OPTIONS, "--", host.destination,
                shlex.join([self.python, "-m", "flextui.runtime.node"])]


def new_run_id() -> str:
    return uuid.uuid4().hex[:12]


@dataclass(frozen=True)
class LaunchTarget:
    """Where a launch runs: this machine (no ``hosts``), or ``hosts`` reached through
    ``remote`` (default: ``Remote.choose()``), host *k* running node *k* of the cluster;
    the rendezvous ``port`` (None: a free one, chosen when the launch is prepared) and
    the ``run_id`` its nodes meet under. A bad port is a FieldError naming ``port``."""

    hosts: tuple[Host, ...] = ()
    remote: Remote | None = None
    port: int | None = None
    run_id: str = field(default_factory=new_run_id)

    def __post_init__(self) -> None:
        if self.port is not None:
            FormFields().port(self.port, "port")
        if self.remote is not None and not self.hosts:
            raise FieldError("ssh", "and --remote-python are for a launch over hosts: give "
                             "--hosts or --hostfile")
        if len(self.hosts) > HOSTS.value:
            raise FieldError("hosts", HOSTS.problem(len(self.hosts)) or "")
        if self.hosts and self.remote is None:
            object.__setattr__(self, "remote", Remote.choose())

    @property
    def local(self) -> bool:
        return not self.hosts

    def again(self) -> LaunchTarget:
        """The same target for another run: the port as asked, a run id of its own."""
        return replace(self, run_id=new_run_id())

    def with_port(self, port: int) -> LaunchTarget:
        return replace(self, port=port)

    def host_names(self) -> list[str]:
        return [h.name for h in self.hosts] if self.hosts else ["localhost"]

    def to_dict(self) -> dict[str, Any]:
        """The target as a run log's header keeps it."""
        remote = self.remote
        return {"hosts": [h.name for h in self.hosts], "port": self.port,
                "run_id": self.run_id, "ssh": list(remote.ssh) if remote else None,
                "python": remote.python if remote else None}

    @classmethod
    def read(cls, f: FieldReader, value: object, where: str) -> LaunchTarget:
        """The target ``to_dict`` wrote, checked with ``f`` (a run log's reader): what it
        names is shown, never run."""
        t = f.exact_keys(value, ("hosts", "port", "run_id", "ssh", "python"), where)
        hosts = tuple(Host.parse(f.string(name, f"{where} hosts"), f"{f.source}: {where} hosts")
                      for name in f.items(t["hosts"], f"{where} hosts"))
        ssh, python = t["ssh"], t["python"]
        if (ssh is None) != (python is None) or (ssh is None) != (not hosts):
            f.fail(where, "ssh and python are given for hosts, and only for hosts")
        remote = None if ssh is None else Remote(
            tuple(f.string(word, f"{where} ssh", limit=None)
                  for word in f.items(ssh, f"{where} ssh")),
            f.string(python, f"{where} python", limit=None))
        port = t["port"]
        return cls(hosts, remote, None if port is None else f.port(port, f"{where} port"),
                   f.string(t["run_id"], f"{where} run_id", empty=True))


def check_ranks_fit(where: str, count: int, training: Training, gpus: int, cpus: int) -> None:
    """The rule every launch keeps, on this machine and on each host: a GPU for every
    rank under NCCL, a CPU core for every rank under gloo (a timed run measures
    nothing on shared cores; a check, which times nothing, may share them)."""
    if training.backend == Backend.NCCL:
        devices, what = gpus, "GPUs"
    elif training.check:
        return
    else:
        devices, what = cpus, "CPU cores"
    if devices < count:
        hint = "" if training.backend == Backend.NCCL else "; --check may run more"
        raise FlextuiError(f"{where} has {devices} {what}; the launch puts {count} ranks there "
                           f"(one {what[:-1]} each{hint})")

