"""A launch over several hosts, on one machine: a fake ssh (``fake_hosts/fake_ssh.py``)
runs each host's node program here, so two "nodes" of two CPU ranks each train over
loopback. Hostfiles and preflight failures end with one line naming the host, exit 2,
nothing started; a node killed mid-run or a failing rank ends the launch on every
host; every process a test starts is checked gone by its PID."""

import io
import ipaddress
import json
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from flextui.cli import main
from flextui.cost.analytic import AnalyticCostModel
from flextui.errors import FlextuiError
from flextui.machine.detect import cpu_ranks, usable_cpus
from flextui.runtime import nodes
from flextui.runtime.hosts import Host, parse_host_list, parse_hostfile, place
from flextui.runtime.job import prepare
from flextui.runtime.launch import RunStatus, free_port
from flextui.runtime.metrics import Start
from flextui.runtime.node import (
    NODE_REQUEST,
    HostFacts,
    PreflightRequest,
    RunRequest,
    frame,
    read_request,
)
from flextui.runtime.runlog import read_run_log
from flextui.runtime.spec import LaunchSpec, Training
from flextui.runtime.target import SSH_ENV, LaunchTarget, Remote
from flextui.session.launching import launch_request
from flextui.strategy import builtin_strategy
from helpers import HANG_S, model
from processes import Follow, children, end, listening, wait_gone

FAKE_SSH = f"{sys.executable} {Path(__file__).parent / 'fake_hosts' / 'fake_ssh.py'}"
SESSION = "fake_ssh.py"  # in the command line of a session the fake ssh holds
TWO_NODES = "localhost,127.0.0.1"


# -- hosts ------------------------------------------------------------------------------


def test_a_hostfile_reads_hosts_and_slots_as_deepspeed_writes_them():
    text = "# the cluster\nnode-1 slots=4\n\n  node-2   slots=4  # spare\nuser@node-3\n"
    assert parse_hostfile(text, "hf") == [Host("node-1", 4), Host("node-2", 4),
                                          Host("user@node-3")]
    assert Host("user@node-3").address == "node-3"
    assert parse_host_list(" a, b ,c") == [Host("a"), Host("b"), Host("c")]


@pytest.mark.parametrize("text, problem", [
    ("node-1 slots=4\nnode-2 gpus=4\n", "line 2: 'node-2 gpus=4' is not 'HOST' or"),
    ("node-1 slots=x\n", "line 1: 'node-1 slots=x' is not"),
    ("node-1 slots=0\n", "line 1: slots=0: give from 1 to 1,024 ranks on one host"),
    ("node-1 slots=2 slots=2\n", "line 1:"),
    ("-oProxyCommand=evil\n", "line 1: '-oProxyCommand=evil' starts with '-', which ssh"),
    ("a\nb\na\n", "host a is listed twice"),
    ("# nothing\n\n", "lists no host"),
])
def test_a_bad_hostfile_names_its_line(text, problem):
    with pytest.raises(FlextuiError, match=f"hostfile hf.*{problem}".replace("(", r"\(")):
        parse_hostfile(text, "hf")


def test_hosts_must_match_the_clusters_nodes():
    cluster = cpu_ranks(2, nodes=2)
    assert place([Host("a"), Host("b", 2)], cluster) == [2, 2]
    with pytest.raises(FlextuiError, match="3 hosts for cluster 'cpu-2x2', which has 2 nodes"):
        place([Host("a"), Host("b"), Host("c")], cluster)
    with pytest.raises(FlextuiError, match="host b has slots=3, but its node .* has 2"):
        place([Host("a"), Host("b", 3)], cluster)


def test_the_ssh_command_comes_from_the_flag_then_the_environment(monkeypatch):
    monkeypatch.setenv(SSH_ENV, "ssh -p 2222")
    assert Remote.choose().command(Host("n1"))[:3] == ["ssh", "-p", "2222"]
    assert Remote.choose("myssh -F cfg", "/opt/py").command(Host("n1")) == [
        "myssh", "-F", "cfg", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "--", "n1",
        "/opt/py -m flextui.runtime.node"]
    with pytest.raises(FlextuiError, match="--ssh \"'\": No closing quotation"):
        Remote.choose("'")


@pytest.mark.parametrize("name", ["-Fevil@h1", "-oProxyCommand=evil", "me@-h1", "-h1:22"])
def test_a_host_never_reaches_ssh_as_an_option(name):
    """A host starting with '-' was passed to ssh, which read it as an option."""
    with pytest.raises(FlextuiError, match="--hosts: .* (starts with '-'|is not a host name)"):
        parse_host_list(f"h0,{name}")
    with pytest.raises(FlextuiError, match="hostfile hf line 2: "):
        parse_hostfile(f"h0\n{name}\n", "hf")
    ssh = Remote.choose("ssh").command(Host("me@h1"))
    assert ssh[ssh.index("--") + 1:] == ["me@h1", f"{sys.executable} -m flextui.runtime.node"]


def test_a_host_given_with_its_port_is_reached_there():
    assert Host.parse("me@h1:2222", "x").destination == "ssh://me@h1:2222"
    assert Host.parse("[fe80::1]:22", "x").destination == "ssh://[fe80::1]:22"
    assert (Host("me@h1:2222").port, Host("[fe80::1]:22").port, Host("h1").port) == \
        (2222, 22, None)
    assert [Host.parse(n, "x").address for n in ("me@h1:22", "[fe80::1]:22", "fe80::1")] == \
        ["h1", "fe80::1", "fe80::1"]
    with pytest.raises(FlextuiError, match="'h1:99999' is not a host name"):
        Host.parse("h1:99999", "x")


@pytest.mark.parametrize("hosts, twice", [
    ("h1,H1", "H1 is listed twice (as h1)"), ("h1,h1.", "h1. is listed twice (as h1)"),
    ("h1,h1:22", "h1:22 is listed twice (as h1)"), ("me@h1,you@H1.:2222", "twice (as me@h1)"),
])
def test_one_host_named_two_ways_is_listed_twice(hosts, twice):
    with pytest.raises(FlextuiError, match=re.escape(twice)):
        parse_host_list(hosts)


def test_the_host_count_and_slots_are_bounded_before_any_work(tmp_path, capsys):
    """5,000 hosts started 5,000 ssh sessions at once; slots=999999 built a cluster of
    two million devices (118 s, 4 GB) before preflight refused it."""
    many = ",".join(f"h{i}" for i in range(5000))
    with pytest.raises(FlextuiError, match="--hosts lists more than 4,096 hosts"):
        parse_host_list(many)
    with pytest.raises(FlextuiError, match="hostfile hf lists more than 4,096 hosts"):
        parse_hostfile("\n".join(many.split(",")), "hf")
    for lines, problem in ((["h1 slots=999999", "h2 slots=999999"],
                            "line 1: slots=999,999: give from 1 to 1,024 ranks on one host"),
                           ([f"h{i} slots=1024" for i in range(100)],
                            "100 hosts of 1,024 ranks: 102,400 devices in one cluster is "
                            "over flextui's limit")):
        code = main(["launch", "-m", "lenet", "--hostfile", hostfile(tmp_path, *lines),
                     "--ssh", FAKE_SSH, "--headless"])
        err = capsys.readouterr().err
        assert code == 2 and problem in err and len(err.strip().splitlines()) == 1, err


def framed(body: dict) -> io.BytesIO:
    data = NODE_REQUEST.encode(body)
    return io.BytesIO(struct.pack(">I", len(data)) + data)


def test_a_node_request_is_decoded_once_into_its_class():
    graph = model("lenet")
    plan = LaunchSpec(graph, builtin_strategy("data-parallel", graph, cpu_ranks(2, nodes=2)),
                      4, Training()).encode()
    run = RunRequest(plan, 2, 1, 2, "10.0.0.1", 29500, "abc")
    preflight = PreflightRequest("h1", None)
    assert read_request(io.BytesIO(frame(run))) == run
    assert read_request(io.BytesIO(frame(preflight))) == preflight
    assert run.torchrun(Path("d")).command()[-1] == str(Path("d") / "plan.msgpack")
    for change, problem in (({"node_rank": 2}, "node_rank: expected a whole number <= 1"),
                            ({"port": 0}, "port: expected a whole number >= 1"),
                            ({"plan": "text"}, "plan: expected bytes"),
                            ({"ranks": 10**6}, "ranks: expected a whole number <= 4"),
                            ({"plan": b"\0" * 64}, "plan: not a flextui launch plan"),
                            ({"nnodes": 1, "node_rank": 0},
                             "ranks: 2 ranks on the only node of a plan for 4"),
                            ({"extra": 1}, "unknown 'extra'"),
                            ({"action": "exec"}, "action: expected one of preflight, run")):
        with pytest.raises(FlextuiError, match=f"request: {re.escape(problem)}"):
            read_request(framed({**run.to_dict(), **change}))


def test_a_hosts_facts_are_checked_when_they_arrive():
    facts = HostFacts("n1", "1.0", "2.0", "3.11", 0, 4, 29500, True, ("10.0.0.1",))
    said = json.loads(json.dumps(facts.to_dict()))
    versions = {"flextui": "1.0", "torch": "2.0"}
    assert HostFacts.decode(said, "host n1", versions) == facts
    with pytest.raises(FlextuiError, match="host n1 has flextui 0.9 and torch 2.0, this"):
        HostFacts.decode({**said, "flextui": "0.9"}, "host n1", versions)
    with pytest.raises(FlextuiError, match="host n1: cpus: expected a whole number >= 0"):
        HostFacts.decode({**said, "cpus": -1}, "host n1", versions)
    with pytest.raises(FlextuiError, match="host n1: facts: missing first_addresses"):
        HostFacts.decode({k: v for k, v in said.items() if k != "first_addresses"},
                         "host n1", versions)


# -- preflight: one line naming the host, exit 2, nothing started -------------------------


def hostfile(tmp_path, *lines) -> str:
    path = tmp_path / "hosts"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


@pytest.mark.parametrize("hosts, problem", [
    ("localhost,down-1", "host down-1: cannot reach it over ssh: ssh: connect to host down-1 "
                         "port 22: Connection refused"),
    ("locked-1,localhost", "host locked-1: ssh cannot log in without a password (BatchMode)"),
    ("localhost,old-1", "host old-1 has flextui 0.1.0 and torch 1.13.1, this machine"),
    ("first.invalid,localhost", "host localhost cannot resolve first.invalid, the first "
                                "host, where every node meets"),
])
def test_preflight_names_the_host_that_is_not_ready(tmp_path, capsys, hosts, problem):
    log = tmp_path / "never.ffrun"
    code = main(["launch", "-m", "lenet", "-b", "8", "--hosts", hosts, "--ssh", FAKE_SSH,
                 "--headless", "--run-log", str(log)])
    err = capsys.readouterr().err
    assert code == 2 and problem in err and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1 and not log.exists()


def test_preflight_counts_a_hosts_cores_against_its_ranks(tmp_path, capsys):
    slots = usable_cpus() + 1
    hosts = hostfile(tmp_path, f"localhost slots={slots}", f"127.0.0.1 slots={slots}")
    code = main(["launch", "-m", "lenet", "-b", "8", "--hostfile", hosts, "--ssh", FAKE_SSH,
                 "--headless"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"host localhost has {usable_cpus()} CPU cores; the launch puts {slots} ranks" in err


def test_preflight_says_when_flextui_is_missing_on_a_host(capsys):
    code = main(["launch", "-m", "lenet", "--hosts", TWO_NODES, "--ssh", FAKE_SSH,
                 "--remote-python", "/bin/false", "--headless"])
    err = capsys.readouterr().err
    assert code == 2 and "host localhost: the node program did not answer" in err, err


def test_preflight_refuses_a_busy_rendezvous_port_on_the_first_host(capsys):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        code = main(["launch", "-m", "lenet", "--hosts", TWO_NODES, "--ssh", FAKE_SSH,
                     "--port", str(port), "--dry-run"])
    err = capsys.readouterr().err
    assert code == 2 and f"port {port} is in use on host localhost" in err, err


def test_a_bad_hostfile_or_host_list_exits_2(tmp_path, capsys):
    bad = hostfile(tmp_path, "node-1 slots=two")
    assert main(["launch", "-m", "lenet", "--hostfile", bad, "--headless"]) == 2
    assert f"hostfile {bad} line 1: 'node-1 slots=two'" in capsys.readouterr().err
    assert main(["launch", "-m", "lenet", "--hosts", "a,,a", "--headless"]) == 2
    assert "--hosts: host a is listed twice" in capsys.readouterr().err
    assert main(["launch", "-m", "lenet", "--ssh", "ssh -p 2", "--headless"]) == 2
    assert "--ssh and --remote-python are for a launch over hosts" in capsys.readouterr().err


def test_a_dry_run_over_hosts_prints_each_hosts_command(capsys):
    assert main(["launch", "-m", "lenet", "-b", "8", "--hosts", TWO_NODES, "--ssh", FAKE_SSH,
                 "--dry-run"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) >= 2
    for k, host in enumerate(TWO_NODES.split(",")):
        assert f"ConnectTimeout=10 -- {host} " in out[k] and f"--rdzv-conf rank={k}" in out[k]
        assert "--rdzv-backend flextui" in out[k] and "--rdzv-endpoint 127.0.0.1:" in out[k]


def mute_hosts(count: int) -> LaunchTarget:
    """Hosts whose connections hang: preflight waits on each until it ends it."""
    return LaunchTarget(tuple(Host(f"mute-{i}") for i in range(count)), Remote.choose(FAKE_SSH))


def test_preflight_holds_a_few_sessions_at_once_and_ends_them_when_stopped(monkeypatch):
    """Preflight started every host's ssh at once (5,000 hosts: load 41), and a stopped
    launcher left them running."""
    monkeypatch.setattr(nodes, "PREFLIGHT_SESSIONS", 3)
    stop, raised, seen = threading.Event(), [], set()

    def ask() -> None:
        try:
            nodes.preflight(mute_hosts(12), [1] * 12, Training(), stop=stop)
        except BaseException as exc:  # noqa: BLE001 (what preflight raised, checked below)
            raised.append(exc)
    thread = threading.Thread(target=ask)
    thread.start()
    try:
        counts = []
        while len(counts) < 20 and thread.is_alive():  # sessions open, seen by PID
            now = children(running=SESSION)
            seen.update(now)
            if len(now) >= 3 or counts:
                counts.append(len(now))
            time.sleep(0.05)
        assert counts and max(counts) == 3, counts
    finally:
        stop.set()
        thread.join(HANG_S)
    assert not thread.is_alive() and isinstance(raised[0], nodes.PreflightStopped), raised
    assert wait_gone(seen) == [] and children(running=SESSION) == []


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_launcher_stopped_during_preflight_ends_every_session_it_started(tmp_path, signum):
    """A launcher stopped during preflight left every ssh session it had started
    running (1,340 of 5,000 hosts')."""
    hosts = ",".join(f"mute-{i}" for i in range(3))
    proc = subprocess.Popen([sys.executable, "-m", "flextui", "launch", "-m", "lenet",
                             "--hosts", hosts, "--ssh", FAKE_SSH, "--headless"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen: set[int] = set()
    try:
        while len(seen) < 3 and proc.poll() is None:  # every session open, seen by PID
            seen.update(children(proc.pid, running=SESSION))
            time.sleep(0.05)
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=HANG_S)
        assert proc.returncode == 128 + signum, err
        assert "stopped during preflight; every ssh session it started has ended" in err
        assert wait_gone(seen) == []
    finally:
        end([proc.pid, *seen])


@pytest.mark.slow
def test_a_host_that_never_starts_its_node_program_ends_the_launch(tmp_path, monkeypatch):
    """A host that passed preflight and then said nothing gave 120 s of silence."""
    monkeypatch.setattr(nodes, "NODE_START_S", 3.0)
    graph, cluster = model("lenet", batch_size=8), cpu_ranks(1, nodes=1)
    target = LaunchTarget((Host("silent-1"),), Remote.choose(FAKE_SSH))
    prepared = prepare(graph, builtin_strategy("data-parallel", graph, cluster), cluster,
                       Training(steps=3, warmup=1), AnalyticCostModel(), target,
                       run_log=tmp_path / "run.ffrun")
    with Follow(prepared) as follow:
        outcome, _, _ = follow.finish()
        assert outcome.status == RunStatus.FAILED
        assert outcome.message.startswith("host silent-1 did not start its node program in "
                                          "3 s"), outcome.message
        assert wait_gone(follow.pids()) == []
    assert read_run_log(tmp_path / "run.ffrun").final.status == RunStatus.FAILED


def test_the_baseline_runs_on_the_same_hosts_port_and_python(tmp_path):
    """``b`` on the Launch screen ran data parallelism here, or refused a cluster of two
    nodes (it prepared the baseline without the launch's hosts)."""
    graph, cluster = model("lenet", batch_size=8), cpu_ranks(2, nodes=2)
    remote = Remote.choose(FAKE_SSH, sys.executable)
    port = free_port()
    target = LaunchTarget(tuple(parse_host_list(TWO_NODES)), remote, port)
    request = launch_request(graph, builtin_strategy("expert", graph, cluster), cluster,
                             AnalyticCostModel(), "lenet", tmp_path,
                             Training(steps=3, warmup=1), target)
    baseline = request.baseline().prepared
    assert baseline.spec.strategy.name == "data-parallel"
    assert (baseline.target.hosts, baseline.target.remote, baseline.target.port) == \
        (target.hosts, remote, port) == \
        (request.prepared.target.hosts, request.prepared.target.remote,
         request.prepared.target.port)
    assert baseline.target.run_id != request.prepared.target.run_id
    assert baseline.nodes is not None and baseline.nodes.ranks == (2, 2)
    assert all(f"--rdzv-endpoint 127.0.0.1:{port}" in " ".join(command)
               for command in baseline.commands())


# -- real runs over two fake nodes ------------------------------------------------------


@pytest.fixture
def two_nodes(monkeypatch):
    """A launch of LeNet, data parallel, over two fake nodes of two CPU ranks each."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    graph, cluster = model("lenet", batch_size=8), cpu_ranks(2, nodes=2)

    def launch(tmp_path, steps: int, **env):
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        return prepare(graph, builtin_strategy("data-parallel", graph, cluster), cluster,
                       Training(steps=steps, warmup=1), AnalyticCostModel(),
                       LaunchTarget(tuple(parse_host_list(TWO_NODES)), Remote.choose(FAKE_SSH)),
                       run_log=tmp_path / "run.ffrun")
    return launch


@pytest.mark.slow
@pytest.mark.xdist_group("gloo")
def test_two_nodes_train_over_ssh_and_report_every_device(tmp_path, capsys):
    log = tmp_path / "two.ffrun"
    hosts = hostfile(tmp_path, "localhost slots=2", "127.0.0.1 slots=2")
    code = main(["launch", "-m", "lenet", "-b", "8", "--hostfile", hosts, "--ssh", FAKE_SSH,
                 "--steps", "3", "--warmup", "1", "--headless", "--run-log", str(log)])
    out = " ".join(capsys.readouterr().out.split())  # unwrapped
    assert code == 0, out
    assert "over localhost, 127.0.0.1" in out and "finished in" in out and "on 2 hosts" in out
    for device in ("n0.rank0", "n0.rank1", "n1.rank0", "n1.rank1"):
        assert device in out
    run = read_run_log(log)
    assert run.header.target.host_names() == ["localhost", "127.0.0.1"]
    assert run.header.target.remote is not None and run.header.target.port is not None
    assert run.header.cluster.name == "cpu-2x2" and run.final.status == RunStatus.FINISHED
    starts = {r.rank: r.pid for r in run.records if isinstance(r, Start)}
    assert sorted(starts) == [0, 1, 2, 3]
    assert wait_gone(starts.values()) == []


@pytest.mark.slow
@pytest.mark.xdist_group("gloo")
def test_a_node_killed_mid_run_ends_the_launch_on_every_host(tmp_path, two_nodes):
    with Follow(two_nodes(tmp_path, steps=100_000)) as follow:
        follow.wait_for_steps()
        os.kill(follow.run.pids()["node"][1], signal.SIGKILL)
        outcome, _, _ = follow.finish()
        assert outcome.status == RunStatus.FAILED
        assert outcome.message.startswith("lost host 127.0.0.1: its node program or ssh "
                                          "session ended"), outcome.message
        assert wait_gone(follow.pids()) == []
        assert read_run_log(tmp_path / "run.ffrun").final.status == RunStatus.FAILED


@pytest.mark.slow
@pytest.mark.xdist_group("gloo")
def test_a_failing_rank_on_the_second_node_is_named_with_its_host(tmp_path, two_nodes):
    """Rank 3 (local rank 1 of the second node) fails; what it printed is filed under
    rank 3 (torchrun tagged its lines with the local rank, so they went to rank 1)."""
    with Follow(two_nodes(tmp_path, steps=1000, FLEXTUI_RANK_FAULT="3:2")) as follow:
        outcome, _, _ = follow.finish()
        assert outcome.status == RunStatus.FAILED and outcome.failed_rank == 3
        assert outcome.message.startswith("rank 3 on 127.0.0.1 failed"), outcome.message
        assert "fails at step 2" in outcome.message
        assert wait_gone(follow.pids()) == []
    said = {rank for rank, line in read_run_log(tmp_path / "run.ffrun").output
            if "RuntimeError: rank 3 fails at step 2" in line and rank >= 0}  # -1: torchrun
    assert said == {3}, said


@pytest.mark.slow
@pytest.mark.xdist_group("gloo")
def test_two_nodes_listen_on_the_first_hosts_address_only(tmp_path, two_nodes):
    """torchrun's rendezvous store listened on every interface (``*:PORT``), without
    authentication, for the whole run; now the first host's store listens on the
    address the other hosts reach it at, and the ranks' sockets on their hosts'."""
    with Follow(two_nodes(tmp_path, steps=100_000)) as follow:
        follow.wait_for("start", 4)
        found = listening(follow.pids())
        first = follow.run.pids()["torchrun"][0]
        assert [(address, port) for address, port, pid in found if pid == first] == \
            [("127.0.0.1", follow.run.nodes.target.port)]
        assert not [f for f in found if ipaddress.ip_address(f[0]).is_unspecified], found


@pytest.mark.slow
@pytest.mark.xdist_group("gloo")
def test_stopping_closes_every_session_and_every_rank_ends(tmp_path, two_nodes):
    with Follow(two_nodes(tmp_path, steps=100_000)) as follow:
        follow.wait_for_steps()
        follow.stop.set()
        outcome, summary, _ = follow.finish()
        assert outcome.status == RunStatus.STOPPED
        assert [d.name for d in summary.devices] == ["n0.rank0", "n0.rank1", "n1.rank0",
                                                     "n1.rank1"]
        assert wait_gone(follow.pids()) == []
        assert read_run_log(tmp_path / "run.ffrun").final.status == RunStatus.STOPPED


# -- the model's code on every host ------------------------------------------------------

PERCEPTRON = Path(__file__).with_name("torch_models") / "perceptron.py"


def test_preflight_says_when_a_host_cannot_import_the_models_module(tmp_path, capsys,
                                                                    monkeypatch):
    """``package.module:factory`` is imported by name on every host: here it is on this
    Python's path only, so preflight names the first host that cannot import it."""
    (tmp_path / "only_here_models.py").write_text(PERCEPTRON.read_text())
    monkeypatch.syspath_prepend(str(tmp_path))
    code = main(["launch", "-m", "only_here_models:model", "--hosts", TWO_NODES, "--ssh",
                 FAKE_SSH, "--dry-run"])
    err = capsys.readouterr().err
    assert code == 2 and "host localhost cannot import only_here_models" in err, err


@pytest.mark.slow
@pytest.mark.xdist_group("gloo")
def test_a_model_file_travels_with_the_launch_to_hosts_that_lack_it(tmp_path, monkeypatch):
    """The hosts never read the model file: it is gone from its path (as on a host
    without it) before the node programs start, and the ranks still build the module
    from the bytes the plan carries."""
    from flextui.graph.library import load_model

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    folder = tmp_path / "models"
    folder.mkdir()
    (folder / "tiny.py").write_text(PERCEPTRON.read_text())
    graph, cluster = load_model(str(folder / "tiny.py")), cpu_ranks(2, nodes=2)
    prepared = prepare(graph, builtin_strategy("data-parallel", graph, cluster), cluster,
                       Training(steps=2, warmup=1), AnalyticCostModel(),
                       LaunchTarget(tuple(parse_host_list(TWO_NODES)), Remote.choose(FAKE_SSH)),
                       run_log=tmp_path / "run.ffrun")
    (folder / "tiny.py").unlink()
    folder.rmdir()
    with Follow(prepared) as follow:
        outcome, _, _ = follow.finish()
        assert outcome.status == RunStatus.FINISHED, outcome.message
        assert wait_gone(follow.pids()) == []
