"""A launch over several hosts, on one machine: a fake ssh (``fake_hosts/fake_ssh.py``)
runs each host's node program here, so two "nodes" of two CPU ranks each train over
loopback. Hostfiles and preflight failures end with one line naming the host, exit 2,
nothing started; a node killed mid-run or a failing rank ends the launch on every
host; every process a test starts is checked gone by its PID."""

import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path

import pytest

from flextui.cli import main
from flextui.cost.analytic import AnalyticCostModel
from flextui.errors import FlextuiError
from flextui.machine.detect import cpu_ranks, usable_cpus
from flextui.runtime.hosts import Host, parse_host_list, parse_hostfile, place
from flextui.runtime.job import execute, prepare
from flextui.runtime.launch import RunStatus
from flextui.runtime.metrics import RankRecord, Start, Steps
from flextui.runtime.nodes import SSH_ENV, Remote
from flextui.runtime.runlog import read_run_log
from flextui.runtime.spec import Training
from flextui.strategy import builtin_strategy
from helpers import model
from processes import end, wait_gone

FAKE_SSH = f"{sys.executable} {Path(__file__).parent / 'fake_hosts' / 'fake_ssh.py'}"
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
    ("node-1 slots=0\n", "line 1: slots must be at least 1"),
    ("node-1 slots=2 slots=2\n", "line 1:"),
    ("-oProxyCommand=evil\n", "line 1: '-oProxyCommand=evil' is not a host name"),
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
        "myssh", "-F", "cfg", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "n1",
        "/opt/py -m flextui.runtime.node"]
    with pytest.raises(FlextuiError, match="--ssh \"'\": No closing quotation"):
        Remote.choose("'")


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
        assert f"ConnectTimeout=10 {host} " in out[k] and f"--node-rank {k}" in out[k]
        assert "--rdzv-backend static --nproc-per-node 2 --rdzv-endpoint localhost:" in out[k]


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
                       run_log=tmp_path / "run.ffrun", hosts=parse_host_list(TWO_NODES),
                       remote=Remote.choose(FAKE_SSH))
    return launch


class Follow:
    """Runs a launch on a thread, keeping its run and records, so a test can act
    mid-run and then check every process of it is gone; as a context, ends them all
    however the test ends."""

    def __init__(self, prepared) -> None:
        self.stop = threading.Event()
        self.records: list[RankRecord] = []
        self.run = None
        self.result = None
        self.thread = threading.Thread(target=self._go, args=(prepared,), daemon=True)
        self.thread.start()

    def _go(self, prepared) -> None:
        self.result = execute(prepared, self.stop, self.records.append,
                              on_start=lambda run: setattr(self, "run", run))

    def wait_for_steps(self, ranks: int = 4, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.thread.is_alive():
            if len({r.rank for r in list(self.records) if isinstance(r, Steps)}) == ranks:
                return
            time.sleep(0.1)
        raise AssertionError(f"the ranks did not step: {self.records[-3:]}")

    def pids(self) -> list[int]:
        assert self.run is not None
        return [pid for group in self.run.pids().values() for pid in group] + \
            list(self.run.worker_pids.values())

    def finish(self, timeout: float = 120.0):
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the launch did not end"
        return self.result

    def __enter__(self) -> "Follow":
        return self

    def __exit__(self, *_) -> None:
        """However the test ended: the launch stopped, every process of it killed."""
        self.stop.set()
        self.thread.join(30)
        end(self.pids() if self.run else [])



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
    assert run.header.hosts == ("localhost", "127.0.0.1")
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
    with Follow(two_nodes(tmp_path, steps=1000, FLEXTUI_RANK_FAULT="3:2")) as follow:
        outcome, _, _ = follow.finish()
        assert outcome.status == RunStatus.FAILED and outcome.failed_rank == 3
        assert outcome.message.startswith("rank 3 on 127.0.0.1 failed"), outcome.message
        assert "fails at step 2" in outcome.message
        assert wait_gone(follow.pids()) == []


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
