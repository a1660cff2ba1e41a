"""A launch over hosts through real ssh: each host a network namespace with its own
address, hostname and sshd (``netns_hosts.py``), reached with ``--ssh 'ssh -F CONFIG'``.
The hosts go with everything on them; a login's PATH lacks the launcher's venv and the
node program still runs; an sshd gone before the run ends it with no process left on
any host (every process in a host's namespace, by PID); preflight names a host that
wants a password or runs another flextui. Skipped, with the reason, where namespaces or
sshd cannot be made (not root, no openssh-server)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from flextui import __version__
from flextui.cli import main
from flextui.cost.analytic import AnalyticCostModel
from flextui.machine.detect import cpu_ranks
from flextui.runtime.hosts import Host
from flextui.runtime.job import prepare
from flextui.runtime.launch import RunStatus
from flextui.runtime.runlog import read_run_log
from flextui.runtime.spec import Training
from flextui.runtime.target import LaunchTarget, Remote
from flextui.strategy import builtin_strategy
from helpers import model
from netns_hosts import OTHER_VERSION, Kind, NetnsHosts, unavailable
from processes import Follow, wait_gone

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("gloo")]

KINDS = (Kind.TRUSTED, Kind.TRUSTED, Kind.PASSWORD, Kind.UNKNOWN_KEY, Kind.OTHER_FLEXTUI)
TRUSTED, PASSWORD, UNKNOWN_KEY, OTHER_FLEXTUI = 0, 2, 3, 4
DEVICES = ["n0.rank0", "n0.rank1", "n1.rank0", "n1.rank1"]


def netns_list() -> list[str]:
    said = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in said.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    why = unavailable()
    if why is not None:
        pytest.skip(f"no hosts in network namespaces here: {why}")
    hosts = NetnsHosts(tmp_path_factory.mktemp("hosts"), KINDS)
    with hosts:
        yield hosts
    sshds = [hosts.sshd_pid(k) for k in range(len(KINDS))]
    assert wait_gone(sshds) == [] and not [n for n in netns_list() if n.startswith(hosts.tag)]


@pytest.fixture
def hosts(made):
    """The hosts; after each test, no process is left on any of them (sshd aside) and
    every sshd runs."""
    yield made
    left = made.survivors()
    for k in range(len(KINDS)):
        made.start_sshd(k)
    assert left == [], f"processes left on the hosts: {left}"


def launch(hosts, *more) -> list[str]:
    """``flextui launch`` of LeNet over the two trusted hosts, two CPU ranks each."""
    return ["launch", "-m", "lenet", "-b", "8", "--hosts", ",".join(hosts.addresses[:2]),
            "--ssh", hosts.ssh, "--nproc-per-node", "2", *more]


def prepared_on(hosts, tmp_path, steps: int):
    """LeNet, data parallel, over the two trusted hosts: prepared (their preflight
    asked), nothing started."""
    graph, cluster = model("lenet", batch_size=8), cpu_ranks(2, nodes=2)
    target = LaunchTarget(tuple(Host(a) for a in hosts.addresses[:2]), Remote.choose(hosts.ssh))
    return prepare(graph, builtin_strategy("data-parallel", graph, cluster), cluster,
                   Training(steps=steps, warmup=1), AnalyticCostModel(), target,
                   run_log=tmp_path / "run.ffrun")


# -- the hosts themselves ------------------------------------------------------------


def test_hosts_are_removed_with_everything_on_them_when_a_test_fails(tmp_path):
    why = unavailable()
    if why is not None:
        pytest.skip(f"no hosts in network namespaces here: {why}")
    with pytest.raises(ZeroDivisionError):
        with NetnsHosts(tmp_path, [Kind.TRUSTED]) as one:
            assert one.run(0, "nohup sleep 600 >/dev/null 2>&1 &").returncode == 0
            left, sshd, names = one.processes(0), one.sshd_pid(0), [one.hub, *one.names]
            assert left and set(names) <= set(netns_list())
            1 / 0  # noqa: B018
    assert wait_gone([*left, sshd]) == [] and not set(names) & set(netns_list())


def test_a_login_without_the_venv_on_its_path_runs_the_node_program(hosts, capsys):
    """A login's PATH lacks the launcher's venv and starts in another directory; the
    node program runs by this Python's path (``--remote-python``'s default)."""
    said = hosts.run(0, 'echo "$PATH"; pwd; hostname')
    path, cwd, name = said.stdout.splitlines()
    assert str(Path(sys.executable).parent) not in path.split(":") and cwd != os.getcwd()
    assert name == hosts.hostname(0)
    assert main([*launch(hosts), "--dry-run"]) == 0  # preflight ran on both hosts
    lines = capsys.readouterr().out.splitlines()
    for k in (0, 1):
        assert f"-- {hosts.addresses[k]} '{sys.executable} -m flextui.runtime.node'" in lines[k]

# -- real launches -------------------------------------------------------------------

def test_an_sshd_stopped_after_preflight_ends_the_launch_on_every_host(hosts, tmp_path):
    prepared = prepared_on(hosts, tmp_path, 100_000)  # preflight reached both hosts
    hosts.stop_sshd(1)
    with Follow(prepared) as follow:
        outcome, _, _ = follow.finish()
        assert outcome.status == RunStatus.FAILED
        assert outcome.message.startswith(f"lost host {hosts.addresses[1]}: "), outcome.message
        assert wait_gone(follow.pids()) == [] and hosts.survivors() == []
    said = [line for _, line in read_run_log(tmp_path / "run.ffrun").output]
    address = hosts.addresses[1]  # each line of a host tagged with its name
    assert f"{address}: ssh: connect to host {address} port 22: Connection refused" in said

# -- what preflight meets ------------------------------------------------------------


@pytest.mark.parametrize("k, problem", [
    (PASSWORD, "ssh cannot log in without a password (BatchMode): {user}@{address}: "
               "Permission denied (password)"),
    (OTHER_FLEXTUI, f"has flextui {OTHER_VERSION} and torch {torch.__version__}, this "
                    f"machine flextui {__version__} and torch {torch.__version__}: install "
                    "the same versions on every host"),
])
def test_preflight_over_real_ssh_names_the_host_that_is_not_ready(hosts, capsys, k, problem):
    import getpass

    address = hosts.addresses[k]
    code = main(["launch", "-m", "lenet", "--hosts", f"{hosts.addresses[0]},{address}",
                 "--ssh", hosts.ssh, "--dry-run"])
    err = capsys.readouterr().err
    assert code == 2 and f"host {address}" in err, err
    assert problem.format(user=getpass.getuser(), address=address) in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
