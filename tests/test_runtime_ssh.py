"""A launch over hosts through real ssh: each host a network namespace with its own
address, hostname and sshd (``netns_hosts.py``), reached with ``--ssh 'ssh -F CONFIG'``.
Two hosts of two CPU ranks train equal to one process, report every device, and listen
on their own addresses on the hosts' subnet only; a stop, a killed session, a failing
rank and an sshd gone before the run each end with no process left on any host
(every process in a host's namespace, by PID); preflight names a host that wants a
password, whose key is unknown (at once, with a terminal to ask on too), or that runs
another flextui. Skipped, with the reason, where namespaces or sshd cannot be made (not
root, no openssh-server)."""

import asyncio
import fcntl
import ipaddress
import json
import os
import signal
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest
import torch

from flextui import __version__
from flextui.cli import main
from flextui.cost.analytic import AnalyticCostModel
from flextui.errors import FlextuiError
from flextui.machine.detect import cpu_ranks
from flextui.runtime.hosts import Host
from flextui.runtime.job import prepare
from flextui.runtime.launch import RunStatus, Torchrun
from flextui.runtime.metrics import Start, Steps
from flextui.runtime.runlog import read_run_log
from flextui.runtime.spec import Training
from flextui.runtime.target import LaunchTarget, Remote
from flextui.strategy import builtin_strategy
from helpers import HANG_S, model, screen_text, wait_for
from netns_hosts import OTHER_VERSION, SUBNET, Kind, NetnsHosts, unavailable
from processes import Follow, children, end, parent_of, wait_gone

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
    """The hosts; after each test, no process is left on any of them (sshd aside: what
    is, is a failure, and ended by PID) and every sshd runs."""
    yield made
    left = made.survivors()
    end(left)
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


def test_the_ranks_interface_holds_the_hosts_address_toward_the_first(hosts):
    """Without GLOO_SOCKET_IFNAME the ranks' gloo sockets listened on what the host's
    name resolves to (127.0.0.1 here, and in /etc/hosts as Debian writes it), which the
    other hosts cannot reach: gloo's connectFullMesh was refused. A host's environment
    that names an interface keeps it."""
    code = ("import sys; from pathlib import Path; from flextui.runtime.launch import "
            "Torchrun; env = Torchrun(Path('p'), 2, 29500, 'r', Path('l'), sys.argv[1], 2, 1)"
            ".environment(1); print(env.get('GLOO_SOCKET_IFNAME'), "
            "env.get('NCCL_SOCKET_IFNAME'))")

    def ask(env=None):
        return subprocess.run(["ip", "netns", "exec", hosts.names[1], sys.executable, "-c",
                               code, hosts.addresses[0]], capture_output=True, text=True,
                              env={**os.environ, **(env or {})}, check=True).stdout.split()
    assert ask() == ["eth0", "eth0"]
    assert ask({"GLOO_SOCKET_IFNAME": "lo"}) == ["None", "eth0"]
    here = Torchrun(Path("p"), 2, 29500, "r", Path("l")).environment(1)
    assert here["GLOO_SOCKET_IFNAME"] == here["NCCL_SOCKET_IFNAME"] == "lo"


# -- real launches -------------------------------------------------------------------


def test_two_hosts_over_real_ssh_train_equal_to_one_process(hosts, tmp_path, capsys):
    log = tmp_path / "check.ffrun"
    code = main([*launch(hosts), "--check", "--run-log", str(log)])
    out = " ".join(capsys.readouterr().out.split())
    assert code == 0 and "check passed: 4 ranks equal one process" in out, out
    run = read_run_log(log)
    assert run.header.target.host_names() == hosts.addresses[:2]
    assert run.final.status == RunStatus.FINISHED
    assert {r.rank: r.host for r in run.records if isinstance(r, Start)} == {
        0: hosts.hostname(0), 1: hosts.hostname(0), 2: hosts.hostname(1), 3: hosts.hostname(1)}


def test_launch_json_reports_every_device_of_both_hosts(hosts, tmp_path, capsys):
    log = tmp_path / "run.ffrun"
    code = main([*launch(hosts), "--steps", "3", "--warmup", "1", "--json", "--run-log",
                 str(log)])
    captured = capsys.readouterr()
    said = json.loads(captured.out)
    assert code == 0 and said["status"] == "finished", captured.err
    assert said["message"].endswith("on 2 hosts")
    assert [d["name"] for d in said["devices"]] == DEVICES
    assert all(d["samples_per_s"] > 0 for d in said["devices"])
    assert f"over {hosts.addresses[0]}, {hosts.addresses[1]}" in captured.err
    assert read_run_log(log).header.target.host_names() == hosts.addresses[:2]


async def test_the_launch_screen_shows_every_device_of_both_hosts(hosts, tmp_path):
    from flextui.session.launching import launch_request
    from flextui.tui.app import FlextuiApp

    graph, cluster = model("lenet", batch_size=8), cpu_ranks(2, nodes=2)
    target = LaunchTarget(tuple(Host(a) for a in hosts.addresses[:2]), Remote.choose(hosts.ssh))
    request = await asyncio.to_thread(  # preflight asks the hosts
        launch_request, graph, builtin_strategy("data-parallel", graph, cluster), cluster,
        AnalyticCostModel(), "lenet over two hosts", tmp_path,
        Training(steps=100_000, warmup=1), target)
    app = FlextuiApp(launch=request)
    async with app.run_test(size=(100, 40)) as pilot:
        live = app.launches[0]
        await wait_for(pilot, lambda: live.view().steps_done >= 3 or live.done)
        view = live.view()
        assert not live.done, live.outcome
        assert [d.name for d in view.devices] == DEVICES
        assert all(d.samples_per_s > 0 for d in view.devices)
        shown = screen_text(app)
        assert all(name in shown for name in DEVICES), shown
        running = hosts.processes()
        assert running
    # the app has quit: the launch stopped on both hosts
    assert wait_gone(running) == []
    assert read_run_log(request.prepared.run_log).final.status == RunStatus.STOPPED


def wait_for_steps(log: Path, proc: subprocess.Popen, ranks: int = 4) -> None:
    """Until every rank has reported steps in the run log the launcher ``proc`` writes
    (a failure if the launcher ends first; HANG_S: a hang)."""
    deadline = time.monotonic() + HANG_S
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            records = read_run_log(log).records
        except FlextuiError:  # not there yet
            records = []
        if len({r.rank for r in records if isinstance(r, Steps)}) == ranks:
            return
        time.sleep(0.2)
    raise AssertionError(f"the ranks did not report steps (launcher: {proc.poll()})")


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_stopped_launcher_leaves_no_process_on_any_host(hosts, tmp_path, signum):
    log, out = tmp_path / "run.ffrun", tmp_path / "out.txt"
    with out.open("w") as sink:
        proc = subprocess.Popen([sys.executable, "-m", "flextui", *launch(hosts), "--steps",
                                 "100000", "--warmup", "1", "--headless", "--run-log", str(log)],
                                cwd=tmp_path, stdout=sink, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
    try:
        wait_for_steps(log, proc)
        running, sessions = hosts.processes(), children(proc.pid)
        assert len(sessions) == 2 and len(running) >= 6  # a node program and 2 ranks a host
        proc.send_signal(signum)
        assert proc.wait(HANG_S) == 128 + signum, out.read_text()
    finally:
        proc.kill()
    assert "stopped; every rank on every host ended" in out.read_text()
    assert wait_gone([*running, *sessions]) == [] and hosts.survivors() == []
    assert read_run_log(log).final.status == RunStatus.STOPPED


def test_a_killed_sshd_session_ends_the_launch_on_every_host(hosts, tmp_path):
    with Follow(prepared_on(hosts, tmp_path, 100_000)) as follow:
        follow.wait_for_steps()
        session = parent_of(follow.run.pids()["node"][1])  # sshd's process of that login
        assert Path(f"/proc/{session}/cmdline").read_bytes().startswith(b"sshd: ")
        running = hosts.processes()
        os.kill(session, signal.SIGKILL)
        outcome, _, _ = follow.finish()
        assert outcome.status == RunStatus.FAILED
        assert outcome.message.startswith(f"lost host {hosts.addresses[1]}: its node program "
                                          "or ssh session ended"), outcome.message
        assert wait_gone([*running, *follow.pids()]) == [] and hosts.survivors() == []


def test_a_rank_that_raises_on_the_second_host_is_named_and_every_rank_ends(
        hosts, tmp_path, monkeypatch):
    """The fault reaches the hosts' ranks as a user's variables would: ssh's SendEnv
    (the test's config sends FLEXTUI_*, the hosts' sshd accept them)."""
    monkeypatch.setenv("FLEXTUI_RANK_FAULT", "3:2")
    with Follow(prepared_on(hosts, tmp_path, 1000)) as follow:
        outcome, _, _ = follow.finish()
        assert outcome.status == RunStatus.FAILED and outcome.failed_rank == 3
        assert outcome.message.startswith(f"rank 3 on {hosts.addresses[1]} failed: "
                                          "RuntimeError: rank 3 fails at step 2"), outcome.message
        assert wait_gone(follow.pids()) == [] and hosts.survivors() == []


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


def test_the_store_and_the_ranks_listen_on_their_hosts_address_only(hosts, tmp_path):
    """gloo's sockets listened on 127.0.0.1 (what the hostname resolved to), and the
    launch failed; now every listener of the launch, on both hosts, is on the host's
    address on the hosts' subnet, the store on the first host's."""
    subnet = ipaddress.ip_network(f"{SUBNET}.0/24")
    with Follow(prepared_on(hosts, tmp_path, 100_000)) as follow:
        follow.wait_for_steps()
        found = {k: hosts.listeners(k) for k in (0, 1)}
        ranks = {r.rank: r.pid for r in follow.records if isinstance(r, Start)}
        port, torchrun = follow.run.nodes.target.port, follow.run.pids()["torchrun"][0]
        follow.stop.set()
        assert follow.finish()[0].status == RunStatus.STOPPED
    for k, listening in found.items():
        outside = [(a, p) for a, p, _ in listening
                   if a in ("*", "0.0.0.0", "::") or a != hosts.addresses[k]
                   or ipaddress.ip_address(a) not in subnet]
        assert outside == [], (k, listening)
        holders = {pid for *_, pids in listening for pid in pids}
        assert {ranks[2 * k], ranks[2 * k + 1]} <= holders, (k, listening, ranks)
    assert (hosts.addresses[0], port, (torchrun,)) in found[0]


# -- what preflight meets ------------------------------------------------------------


@pytest.mark.parametrize("k, problem", [
    (PASSWORD, "ssh cannot log in without a password (BatchMode): {user}@{address}: "
               "Permission denied (password)"),
    (UNKNOWN_KEY, "ssh does not trust its host key (Host key verification failed: the key "
                  "is unknown here, or it changed): check that the key is the host's, then "
                  "add it to the known_hosts file ssh reads, e.g. ssh-keyscan {address} >> "
                  "~/.ssh/known_hosts"),
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


def test_an_unknown_host_key_is_refused_not_asked_about_at_a_terminal(hosts, tmp_path):
    """With a terminal to ask on, ssh asks whether to trust a new host key and waits;
    the launch's ssh never asks: its preflight ends at once, naming ssh-keyscan."""
    address = hosts.addresses[UNKNOWN_KEY]
    asked = at_a_terminal(["ssh", "-F", str(hosts.config), address, "true"])
    try:
        said = b""
        while b"continue connecting" not in said:  # ssh asks on the terminal
            said += os.read(asked.terminal, 4096)
    finally:
        asked.kill()
        asked.wait()
        os.close(asked.terminal)
    launch = at_a_terminal([sys.executable, "-m", "flextui", "launch", "-m", "lenet",
                            "--hosts", f"{hosts.addresses[0]},{address}", "--ssh",
                            hosts.ssh, "--dry-run"])
    try:
        _, err = launch.communicate(timeout=HANG_S)
    finally:
        launch.kill()
        os.close(launch.terminal)
    assert launch.returncode == 2 and f"ssh-keyscan {address}" in err.decode(), err


def at_a_terminal(command: list[str]) -> subprocess.Popen:
    """``command`` in a session of its own whose controlling terminal is a new pseudo
    terminal (``.terminal``: its other side), as at a person's terminal."""
    terminal, tty = os.openpty()
    proc = subprocess.Popen(command, stdin=tty, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True,
                            preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0))
    os.close(tty)
    proc.terminal = terminal
    return proc
