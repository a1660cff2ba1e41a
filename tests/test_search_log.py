"""The .ffsearch search log: round trips, replay, incremental writes, damage, resume."""

import base64
import contextlib
import hashlib
import json
import math
import random
import subprocess
import sys
import zlib
from pathlib import Path
from types import SimpleNamespace

import msgpack
import pytest

from flextui.cost import AnalyticCostModel
from flextui.cost.profiled import IDENTITY_PREFIX as PROFILED_PREFIX
from flextui.errors import FlextuiError, SearchLogError
from flextui.search import SearchOptions, logwriter, runner
from flextui.search.events import StepEvent
from flextui.search.log import (
    FORMAT_VERSION,
    MAGIC,
    Checkpoint,
    FinalRecord,
    FrontierPoint,
    SearchHeader,
    SearchLog,
    read_search_log,
)
from flextui.search.logfile import scan_frames
from flextui.search.logformat import frame
from flextui.search.logwriter import SearchLogWriter
from flextui.strategy import ParallelConfig, Strategy, data_parallel, random_config
from helpers import HANG_S, cluster, edit_log_header, model


def setting():
    return model("lenet"), cluster("p100-4x4")


def header(**kw):
    g, c = setting()
    args = {"graph": g, "cluster": c, "cost_model": "analytic:v1", "seed": 7,
            "options": SearchOptions(beta=0.05, iterations=80, init="random",
                                     memory="reject")}
    args.update(kw)
    return SearchHeader(**args)


def cost_of(strategy: Strategy) -> float:
    """A deterministic stand-in for the simulator."""
    return sum(zlib.crc32(repr((name, c.degrees, c.devices)).encode()) % 1000
               for name, c in strategy.items()) * 1e-6 + 1e-3


def run_search(path, iterations=60, chains=2, checkpoint_every=20, restart_every=13,
               flush_interval=1.0, close=True, seed=3):
    """An MCMC-shaped fake search that logs as the real one will; returns what it tracked:
    expected[chain][i] = the chain's current strategy after i steps, and the writer."""
    g, c = setting()
    w = SearchLogWriter(path, header(), flush_interval=flush_interval)
    rngs = [random.Random(seed * 100 + k) for k in range(chains)]
    cur = [data_parallel(g, c) for _ in range(chains)]
    cur_cost = [cost_of(s) for s in cur]
    best, best_cost = list(cur), list(cur_cost)
    expected = [{0: cur[k]} for k in range(chains)]
    states = [{} for _ in range(chains)]
    frontier: list[FrontierPoint] = []
    t = {"steps": [], "restarts": [], "checkpoints": [], "frontiers": []}

    def checkpoint(k, i):
        cp = Checkpoint(k, i, i * 1e-3 + k, cur[k], cur_cost[k], best[k], best_cost[k],
                        rngs[k].getstate())
        states[k][i] = rngs[k].getstate()
        w.checkpoint(cp, list(frontier))
        t["checkpoints"].append(cp)
        t["frontiers"].append(list(frontier))

    for k in range(chains):
        checkpoint(k, 0)
    for i in range(1, iterations + 1):
        for k in range(chains):
            rng = rngs[k]
            op = rng.randrange(len(g.ops))
            cfg = random_config(g.ops[op], c.num_devices, rng)
            proposal = cur[k].replace(g.ops[op].name, cfg)
            p = cost_of(proposal)
            accepted = p < cur_cost[k] or rng.random() < math.exp(-2000 * (p - cur_cost[k]))
            if accepted:
                cur[k], cur_cost[k] = proposal, p
                if p <= best_cost[k]:
                    best[k], best_cost[k] = proposal, p
            memory = sum(len(x.devices) for x in proposal.values()) * 1_000_003
            if len(frontier) < 4 and accepted:
                frontier.append(FrontierPoint(p, memory, proposal))
            event = StepEvent(k, i, i * 1e-3 + k, op, cfg, p, cur_cost[k], best_cost[k], accepted,
                              memory)
            w.step(event)
            t["steps"].append(event)
            if i % restart_every == 0 and cur_cost[k] > best_cost[k]:
                cur[k], cur_cost[k] = best[k], best_cost[k]
                w.restart(k, i)
                t["restarts"].append((k, i))
            if i % checkpoint_every == 0:
                checkpoint(k, i)
            expected[k][i] = cur[k]
    b = min(range(chains), key=lambda k: best_cost[k])
    t["final"] = FinalRecord("iterations", iterations * chains, iterations * 1e-3 + chains,
                             best_cost[b], best[b], b, list(frontier))
    t.update(expected=expected, states=states, rngs=rngs, best=best, best_cost=best_cost)
    if close:
        w.final(t["final"])
        w.close()
    return w, t


def assert_matches(log: SearchLog, t, final=True):
    assert log.steps == t["steps"]
    assert log.restarts == t["restarts"]
    assert log.checkpoints == t["checkpoints"]
    assert log.frontiers == t["frontiers"]
    assert log.final == (t["final"] if final else None)


def file_bytes(path):
    return path.read_bytes()


# -- round trips ------------------------------------------------------------------------


def test_header_round_trip(tmp_path):
    path = tmp_path / "a.ffsearch"
    h = header()
    SearchLogWriter(path, h).close()
    assert h.created  # filled by the writer
    log = read_search_log(path)
    r = log.header
    assert r.graph.fingerprint == h.graph.fingerprint
    assert r.cluster.fingerprint == h.cluster.fingerprint
    assert [op.name for op in r.graph.ops] == [op.name for op in h.graph.ops]
    assert r.cluster.num_devices == 16
    # options are decoded once, as written
    assert (r.cost_model, r.seed, r.options) == ("analytic:v1", 7, h.options)
    assert (r.version, r.flextui_version, r.created) == (FORMAT_VERSION, h.flextui_version, h.created)
    assert log.steps == [] and log.checkpoints == [] and log.final is None
    assert not log.truncated and log.complete_bytes == path.stat().st_size
    assert file_bytes(path).startswith(MAGIC)


def test_records_round_trip(tmp_path):
    path = tmp_path / "a.ffsearch"
    _, t = run_search(path)
    log = read_search_log(path)
    assert_matches(log, t)
    assert len(log.steps) == 120 and log.restarts and len(log.checkpoints) == 2 * 4
    assert log.chains() == [0, 1]
    assert [e.iteration for e in log.steps_of(1)] == list(range(1, 61))
    assert log.last_checkpoint(0) == t["checkpoints"][-2]
    assert log.last_checkpoint(5) is None
    assert log.best_strategy() == (t["final"].best, t["final"].best_cost)
    # the chain's rng continues exactly where the checkpoint left it
    cp = log.last_checkpoint(1)
    a, b = random.Random(), random.Random()
    a.setstate(cp.rng_state)
    b.setstate(t["states"][1][cp.iteration])
    assert [a.random() for _ in range(5)] == [b.random() for _ in range(5)]
    assert type(cp.rng_state) is tuple and type(cp.rng_state[1]) is tuple


def test_strategy_at_reconstructs_every_iteration(tmp_path):
    path = tmp_path / "a.ffsearch"
    _, t = run_search(path, iterations=70, checkpoint_every=25, restart_every=9)
    log = read_search_log(path)
    for k in (0, 1):
        for i, strategy in t["expected"][k].items():
            assert log.strategy_at(k, i) == strategy, (k, i)
    with pytest.raises(SearchLogError, match="out of range"):
        log.strategy_at(0, 71)
    with pytest.raises(SearchLogError, match="out of range"):
        log.strategy_at(0, -1)
    with pytest.raises(SearchLogError, match="no chain 9"):
        log.strategy_at(9, 0)


def test_best_strategy_without_final(tmp_path):
    path = tmp_path / "a.ffsearch"
    w, t = run_search(path, close=False, checkpoint_every=1000)
    w.close()
    log = read_search_log(path)
    assert log.final is None
    strategy, cost = log.best_strategy()
    assert cost == min(t["best_cost"])
    assert cost_of(strategy) == cost


# -- incremental writes -----------------------------------------------------------------


def test_flushed_but_unclosed_log_is_readable(tmp_path):
    path = tmp_path / "a.ffsearch"
    w, t = run_search(path, close=False, flush_interval=3600)
    before = read_search_log(path)
    assert before.steps == []                 # buffered, not yet written
    w.flush()
    log = read_search_log(path)
    assert_matches(log, t, final=False)
    assert not log.truncated
    w.close()
    w.close()                                 # idempotent
    with pytest.raises(ValueError):
        w.restart(0, 1)


def test_auto_flush(tmp_path, monkeypatch):
    path = tmp_path / "a.ffsearch"
    w, t = run_search(path, close=False, flush_interval=0)
    assert_matches(read_search_log(path), t, final=False)   # every record already on disk
    w.close()

    now = [100.0]      # the writer's clock, moved by the test: a slow machine changes nothing
    monkeypatch.setattr(logwriter, "time", SimpleNamespace(monotonic=lambda: now[0]))
    path2 = tmp_path / "b.ffsearch"
    w = SearchLogWriter(path2, header(), flush_interval=0.05)
    w.restart(0, 0)
    assert read_search_log(path2).restarts == []
    now[0] += 0.06
    w.restart(0, 1)                           # more than flush_interval since the last flush
    assert read_search_log(path2).restarts == [(0, 0), (0, 1)]
    w.close()


def test_context_manager_and_final_flushes(tmp_path):
    path = tmp_path / "a.ffsearch"
    g, c = setting()
    s = data_parallel(g, c)
    with SearchLogWriter(path, header(), flush_interval=3600) as w:
        w.final(FinalRecord("converged", 0, 0.5, 1.0, s, 0, []))
        assert read_search_log(path).final is not None
        with pytest.raises(ValueError, match="reason"):
            w.final(FinalRecord("bored", 0, 0.5, 1.0, s, 0, []))
    assert w.closed


# -- damage -----------------------------------------------------------------------------


def record_offsets(path):
    """Start offsets of every frame (header first) and the end of the file."""
    data = file_bytes(path)
    pos, offsets = len(MAGIC), []
    while pos < len(data):
        offsets.append(pos)
        pos += 10 + int.from_bytes(data[pos:pos + 4], "little")
    return offsets, len(data)


def growing_prefix(path, data: bytes, ends: range):
    """For each ``end`` of ``ends`` (rising by one), leave ``data[:end]`` at ``path`` and
    yield ``end``. The file grows by appends: rewriting it each time truncates it, and
    thousands of truncations took a busy disk tens of seconds."""
    path.write_bytes(data[:ends.start])
    for end in ends:
        if end > ends.start:
            with path.open("ab") as f:
                f.write(data[end - 1:end])
        yield end


def test_truncated_last_record_is_not_an_error(tmp_path):
    path = tmp_path / "a.ffsearch"
    _, t = run_search(path, iterations=10)
    data = file_bytes(path)
    offsets, size = record_offsets(path)
    last = offsets[-1]
    cut = tmp_path / "cut.ffsearch"
    for end in growing_prefix(cut, data, range(last + 1, size)):
        log = read_search_log(cut)
        assert log.truncated and log.complete_bytes == last, end
        assert log.final is None and log.steps == t["steps"]
    cut.write_bytes(data[:last])              # cut exactly at a record boundary
    log = read_search_log(cut)
    assert not log.truncated and log.complete_bytes == last


def test_truncated_header_is_an_error(tmp_path):
    path = tmp_path / "a.ffsearch"
    SearchLogWriter(path, header()).close()
    data = file_bytes(path)
    cut = tmp_path / "cut.ffsearch"
    for _ in growing_prefix(cut, data, range(len(data))):
        with pytest.raises(SearchLogError):
            read_search_log(cut)
    cut.write_bytes(MAGIC)
    with pytest.raises(SearchLogError, match="header is missing"):
        read_search_log(cut)
    cut.write_bytes(data[:len(MAGIC) + 50])
    with pytest.raises(SearchLogError, match="header is truncated"):
        read_search_log(cut)


def test_bit_flips_are_detected_and_never_modify_the_file(tmp_path):
    path = tmp_path / "a.ffsearch"
    _, t = run_search(path, iterations=15)
    good = file_bytes(path)
    offsets, size = record_offsets(path)
    torn = good[:offsets[-1] + (size - offsets[-1]) // 2]   # ends inside the final record
    rng = random.Random(1234)
    bad = tmp_path / "bad.ffsearch"
    for base, tail_start in ((good, None), (torn, offsets[-1])):
        positions = sorted(rng.sample(range(len(base)), 250)) + list(range(40))
        for pos in positions:
            data = bytearray(base)
            data[pos] ^= 1 << rng.randrange(8)
            bad.write_bytes(bytes(data))
            digest = hashlib.sha256(bytes(data)).hexdigest()
            try:
                log = read_search_log(bad)
            except SearchLogError as exc:
                assert str(bad) in str(exc)
            else:
                # only a flip inside the torn tail can go unnoticed, and it is reported torn
                assert tail_start is not None and pos >= tail_start + 10, pos
                assert log.truncated and log.complete_bytes == tail_start
                assert log.steps == t["steps"]
            assert hashlib.sha256(bad.read_bytes()).hexdigest() == digest


def test_corrupt_record_message_names_record_and_offset(tmp_path):
    path = tmp_path / "a.ffsearch"
    run_search(path, iterations=5)
    offsets, _ = record_offsets(path)
    data = bytearray(file_bytes(path))
    data[offsets[3] + 12] ^= 0x10
    path.write_bytes(bytes(data))
    with pytest.raises(SearchLogError, match=rf"record 3 at byte {offsets[3]} is corrupt"):
        read_search_log(path)


@pytest.mark.parametrize("content", [
    b"", json.dumps({"format": "flextui-strategy", "version": 1}).encode(),
    random.Random(5).randbytes(3000), b"FFSEARC", b"ffsearch\n" + b"\0" * 40,
])
def test_foreign_files(tmp_path, content):
    path = tmp_path / "x.ffsearch"
    path.write_bytes(content)
    with pytest.raises(SearchLogError, match="is not a flextui search log"):
        read_search_log(path)
    assert path.read_bytes() == content


def test_missing_file(tmp_path):
    with pytest.raises(SearchLogError, match="cannot read search log"):
        read_search_log(tmp_path / "nope.ffsearch")
    with pytest.raises(SearchLogError, match="cannot write search log"):
        SearchLogWriter(tmp_path / "no" / "dir.ffsearch", header())


def test_newer_format_version(tmp_path):
    path = tmp_path / "a.ffsearch"
    newer = FORMAT_VERSION + 1
    SearchLogWriter(path, header(version=newer)).close()
    with pytest.raises(SearchLogError, match=rf"written by a newer flextui \(search log format "
                                             rf"version {newer}; .*\); upgrade flextui"):
        read_search_log(path)


def test_zero_filled_tail_reads_as_truncated(tmp_path):
    path = tmp_path / "a.ffsearch"
    _, t = run_search(path, iterations=5)
    size = path.stat().st_size
    path.write_bytes(file_bytes(path) + b"\0" * 4096)
    log = read_search_log(path)
    assert log.truncated and log.complete_bytes == size and log.final == t["final"]


def real_log(path, iterations=400):
    """A real search's log (LeNet on 16 P100s), several 4 KiB pages long."""
    runner.run_search(model("lenet"), cluster("p100-4x4"), AnalyticCostModel(),
                      SearchOptions(iterations=iterations, seed=5, converge=False),
                      log_path=path)
    return read_search_log(path)


def test_zero_filled_tail_at_any_page_boundary_keeps_every_record_before_it(tmp_path):
    """What a node losing power leaves: the file cut at a page (or any 512-byte block)
    boundary and filled with zeros to its old length. Every record wholly before the
    zeros is read and resumable; the torn one is cut off by a resume."""
    path = tmp_path / "real.ffsearch"
    whole = real_log(path)
    data = file_bytes(path)
    size = len(data)
    ends = whole.record_offsets[1:] + [whole.complete_bytes]   # where each record ends
    assert size > 6 * 4096
    damaged = tmp_path / "damaged.ffsearch"
    for cut in range(512, size, 512):
        damaged.write_bytes(data[:cut] + bytes(size - cut))
        kept = [end for end in ends if end <= cut]
        if not kept:                          # the header itself is damaged
            with pytest.raises(SearchLogError, match="header is truncated"):
                read_search_log(damaged)
            continue
        log = read_search_log(damaged)
        assert log.truncated and log.complete_bytes == kept[-1], cut
        assert log.record_offsets == whole.record_offsets[:len(kept)], cut
        assert log.steps == whole.steps[:len(log.steps)] and log.final is None
        if cut % 4096 == 0:
            with SearchLogWriter.resume(log):
                assert damaged.stat().st_size == kept[-1]     # the damage is cut off
            again = read_search_log(damaged)
            assert not again.truncated and again.steps == log.steps


def test_zero_tail_resumes_with_the_search(tmp_path):
    """``flextui search --resume`` on a log with a zero-filled tail: the search goes on
    from the records before the damage and the log ends whole."""
    path = tmp_path / "real.ffsearch"
    whole = real_log(path)
    data = file_bytes(path)
    cut = 4096 * (len(data) // 4096)
    path.write_bytes(data[:cut] + bytes(len(data) - cut))
    log = read_search_log(path)
    assert log.truncated
    options = log.header.options
    result = runner.run_search(log.header.graph, log.header.cluster, AnalyticCostModel(),
                               options, resume=log)
    done = read_search_log(path)
    assert not done.truncated and done.final is not None
    assert result.iterations == 400 == whole.final.iterations


@pytest.mark.parametrize("chains, init", [(1, "auto"), (2, "random")])
def test_a_log_cut_before_a_chains_first_checkpoint_resumes_as_if_uncut(tmp_path, chains,
                                                                        init):
    """A search killed while it set up (the header written, a chain's first checkpoint
    not yet): resuming starts that chain over as it first did, and the search ends as
    one that was never stopped."""
    whole_path, cut_path = tmp_path / "whole.ffsearch", tmp_path / "cut.ffsearch"
    options = SearchOptions(iterations=150, seed=7, chains=chains, init=init, converge=False)
    graph, where = model("lenet"), cluster("p100-4x4")
    whole = runner.run_search(graph, where, AnalyticCostModel(), options, log_path=whole_path)
    logged = read_search_log(whole_path)
    data = file_bytes(whole_path)
    cut_path.write_bytes(data[:_first_checkpoint_offset(data, chains - 1)])
    log = read_search_log(cut_path)
    assert not any(cp.chain == chains - 1 for cp in log.checkpoints)
    resumed = runner.run_search(log.header.graph, log.header.cluster, AnalyticCostModel(),
                                log.header.options, resume=log)
    assert resumed.best_cost == whole.best_cost and resumed.iterations == whole.iterations
    done = read_search_log(cut_path)
    def moves(log):     # the chain's steps, but for the times they were taken at
        return [(e.iteration, e.changes, e.proposed, e.accepted)
                for e in log.steps_of(chains - 1)]
    assert done.final is not None and moves(done) == moves(logged)


def _first_checkpoint_offset(data: bytes, chain: int) -> int:
    """Where the first checkpoint record of ``chain`` starts in a log's bytes."""
    frames = scan_frames(data, len(MAGIC), Path("log"))
    return next(pos for pos, body in frames.bodies
                if msgpack.unpackb(body)[:2] == [3, chain])


def test_a_log_cut_before_a_chain_started_from_a_file_says_so(tmp_path):
    path = tmp_path / "a.ffsearch"
    options = SearchOptions(iterations=50, seed=7, init="mine.json", converge=False)
    graph, where = model("lenet"), cluster("p100-4x4")
    runner.run_search(graph, where, AnalyticCostModel(), options, log_path=path,
                      initial=data_parallel(graph, where))
    logged = read_search_log(path)
    path.write_bytes(file_bytes(path)[:logged.record_offsets[1]])   # the header alone
    log = read_search_log(path)
    with pytest.raises(FlextuiError, match="mine.json.*not in the log"):
        runner.run_search(graph, where, AnalyticCostModel(), options, resume=log)


def test_damage_before_a_zero_tail_is_still_reported(tmp_path):
    path = tmp_path / "real.ffsearch"
    whole = real_log(path)
    data = bytearray(file_bytes(path))
    cut = 4096 * (len(data) // 4096)
    data[cut:] = bytes(len(data) - cut)
    victim = whole.record_offsets[len(whole.record_offsets) // 2]
    assert victim + 20 < cut
    data[victim + 12] ^= 0x04                 # a flipped bit in a record's body, mid-file
    path.write_bytes(bytes(data))
    with pytest.raises(SearchLogError, match=rf"at byte {victim} is corrupt"):
        read_search_log(path)


# -- one writer at a time ----------------------------------------------------------------

#: a writer in another process: creates (``new``) or resumes (``resume``) the log, says
#: "locked", waits for a line on stdin, adds a restart record and closes
WRITER = """
import sys
from flextui.graph.library import load_model
from flextui.machine import load_named_cluster
from flextui.search.log import SearchHeader, read_search_log
from flextui.search.logwriter import SearchLogWriter
from flextui.search.options import SearchOptions
from flextui.errors import SearchLogError
path, mode = sys.argv[1], sys.argv[2]
sys.stdin.readline()
try:
    if mode == "new":
        header = SearchHeader(load_model("lenet"), load_named_cluster("p100-4x4"),
                              "analytic:v1", 7, SearchOptions())
        writer = SearchLogWriter(path, header, flush_interval=0)
    else:
        writer = SearchLogWriter.resume(read_search_log(path), flush_interval=0)
except SearchLogError as exc:
    print("refused:", exc, flush=True)
    sys.exit(0)
print("locked", flush=True)
sys.stdin.readline()
writer.restart(0, 99)
writer.close()
"""


def start_writer(path, mode):
    return subprocess.Popen([sys.executable, "-c", WRITER, str(path), mode],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def go(proc):
    with contextlib.suppress(BrokenPipeError):     # a refused writer may be gone already
        proc.stdin.write("go\n")
        proc.stdin.flush()


def finish(procs):
    """Let every writer close; none is left running."""
    for proc in procs:
        if proc.poll() is None:
            go(proc)
    for proc in procs:
        proc.communicate(timeout=HANG_S)
        assert proc.returncode == 0
    assert all(proc.poll() is not None for proc in procs)


@pytest.mark.parametrize("mode", ["new", "resume"])
def test_a_log_being_written_is_refused_to_a_second_writer(tmp_path, mode):
    path = tmp_path / "a.ffsearch"
    if mode == "resume":
        w, t = run_search(path, iterations=10, close=False)
        w.close()
    child = start_writer(path, mode)
    try:
        go(child)
        assert child.stdout.readline() == "locked\n"
        before = file_bytes(path)
        holder = rf"{path} is being written by another search \(process {child.pid}\)"
        with pytest.raises(SearchLogError, match=holder + "; write the new log elsewhere"):
            SearchLogWriter(path, header())
        with pytest.raises(SearchLogError, match=holder + "; wait for it to end"):
            SearchLogWriter.resume(read_search_log(path))
        assert file_bytes(path) == before     # the refused writers touched nothing
    finally:
        finish([child])
    log = read_search_log(path)               # intact, with the child's last record
    assert not log.truncated and log.restarts[-1] == (0, 99)
    if mode == "resume":
        assert log.steps == t["steps"]
    assert not (tmp_path / "a.ffsearch.lock").exists()
    with SearchLogWriter.resume(log) as w:    # the lock ended with its writer
        w.restart(0, 100)


def test_a_killed_writer_never_blocks(tmp_path):
    path = tmp_path / "a.ffsearch"
    child = start_writer(path, "new")
    go(child)
    assert child.stdout.readline() == "locked\n"
    child.kill()
    child.communicate(timeout=HANG_S)
    assert (tmp_path / "a.ffsearch.lock").exists()   # a stale PID file, which cannot block
    with SearchLogWriter.resume(read_search_log(path)) as w:
        w.restart(0, 1)
    assert read_search_log(path).restarts == [(0, 1)]
    with pytest.raises(SearchLogError, match="exists; a search log is never overwritten: "
                                             "continue it with flextui search --resume"):
        SearchLogWriter(path, header())


def test_writers_racing_to_create_one_log_leave_one_intact_log(tmp_path):
    path = tmp_path / "a.ffsearch"
    children = [start_writer(path, "new") for _ in range(4)]
    try:
        for child in children:
            go(child)
        said = [child.stdout.readline() for child in children]
        assert said.count("locked\n") == 1, said
        for line in said:
            assert line == "locked\n" or (f"refused: {path}" in line and (
                "is being written by another search" in line or "exists" in line))
    finally:
        finish(children)
    log = read_search_log(path)
    assert not log.truncated and log.restarts == [(0, 99)]


# -- resume -----------------------------------------------------------------------------


def test_resume_after_a_torn_tail(tmp_path):
    path = tmp_path / "a.ffsearch"
    w, t = run_search(path, iterations=20, close=False)
    w.flush()
    g, _ = setting()
    complete = path.stat().st_size
    # the search is killed in the middle of writing a step record
    extra = StepEvent(0, 21, 0.5, 0, t["expected"][0][20][g.ops[0].name], 1.0, 1.0, 1.0, False, 0)
    with open(path, "ab") as f:
        f.write(frame(msgpack.packb([1, 0, 21, 0.5, 0, [[1] * len(g.ops[0].space), 0],
                                     1.0, None, None, False, 0]))[:-3])
    w._file.close()                 # the killed search's lock went with it
    log = read_search_log(path)
    assert log.truncated and log.complete_bytes == complete
    with SearchLogWriter.resume(log, flush_interval=0) as w2:
        assert path.stat().st_size == complete    # the torn tail is gone
        w2.step(extra)
        w2.restart(1, 20)
        w2.final(t["final"])
    again = read_search_log(path)
    assert not again.truncated
    assert again.steps == t["steps"] + [extra]
    assert again.restarts == t["restarts"] + [(1, 20)]
    assert again.checkpoints == t["checkpoints"] and again.final == t["final"]
    assert again.header.graph.fingerprint == g.fingerprint
    # a stale SearchLog (the file changed since) is refused
    with pytest.raises(SearchLogError, match="changed since it was read"):
        SearchLogWriter.resume(log)


def test_resumed_search_supersedes_records_after_its_checkpoint(tmp_path):
    path = tmp_path / "a.ffsearch"
    w, t = run_search(path, iterations=30, chains=1, checkpoint_every=10, restart_every=1000,
                      close=False)
    w.close()
    log = read_search_log(path)
    cp = log.last_checkpoint(0)
    assert cp.iteration == 30
    cp20 = log.checkpoints[2]
    assert cp20.iteration == 20
    # resume from the checkpoint at 20 (as if 21..30 had been lost) and take other steps
    g, _ = setting()
    w = SearchLogWriter.resume(log)
    w.checkpoint(cp20, [])
    op = g.ops[2]
    cfg = ParallelConfig((1,) * len(op.space), (5,))
    w.step(StepEvent(0, 21, 9.0, 2, cfg, 0.5, 0.5, 0.5, True, 1))
    w.close()
    log = read_search_log(path)
    assert len(log.steps) == 31                       # every record, in file order
    assert [e.iteration for e in log.steps_of(0)] == list(range(1, 22))
    assert log.strategy_at(0, 21) == t["expected"][0][20].replace(op.name, cfg)
    assert log.strategy_at(0, 15) == t["expected"][0][15]
    with pytest.raises(SearchLogError, match="out of range"):
        log.strategy_at(0, 25)


# -- malformed content --------------------------------------------------------------------


def append_record(path, record):
    with open(path, "ab") as f:
        f.write(frame(msgpack.packb(record)))


def good_strategy_data():
    g, _ = setting()
    return ["dp", [[[16] + [1] * (len(op.space) - 1), 0] for op in g.ops]]


@pytest.mark.parametrize("record, message", [
    ([3, 0, 0, 0.0, ["dp", [[[1], 0]] * 3], 1.0, None, 1.0, None, []], "does not fit"),
    ([3, 0, 0, 0.0, None, 1.0, None, 1.0, None, []], "expected a list"),
    ([1, 0, 1, 0.0, 0, [[3, 1, 1, 1], 0], 1.0, None, None, True, 0], "does not fit"),
    ([1, 0, 1, 0.0, 0, [[1, 1, 1, 1], 16], 1.0, None, None, True, 0], "do not fit"),
    ([1, 0, 1, 0.0, 0, [[1, 1, 1, 1], [99]], 1.0, None, None, True, 0], "does not fit"),
    ([1, 0, 1, 0.0, 99, [[1, 1, 1, 1], 0], 1.0, None, None, True, 0], "op index 99"),
    ([1, "0", 1, 0.0, 0, [[1, 1, 1, 1], 0], 1.0, None, None, True, 0], "chain"),
    ([1, 0, 1, -1.0, 0, [[1, 1, 1, 1], 0], 1.0, None, None, True, 0], "elapsed"),
    ([1, 0, 1, 0.0, 0, [[1, 1, 1, 1], 0], 1.0, None, None, 1, 0], "accepted"),
    ([1, 0, 1, 0.0, 0, [[[1], 1, 1, 1], 0], 1.0, None, None, True, 0], "integers"),
    ([1, 0, 1], "11 to 15 fields"),
    ([1, 0, 1, 0.0, 0, [[1, 1, 1, 1], 0], 1.0, None, None, False, 0, [], False],
     "early-rejected"),
    ([1, 0, 1, 0.0, 0, [[1, 1, 1, 1], 0], 1.0, None, None, True, 0, [[99, [[1], 0]]]],
     "others change 0 op index 99"),
    ([1, 0, 1, 0.0, 0, [[1, 1, 1, 1], 0], 1.0, None, None, True, 0, [[1, 0]]],
     "others change 0 config"),
    ([1, 0, 1, 0.0, 0, [[1, 1, 1, 1], 0], 1.0, None, None, True, 0, {}], "step others: expected a list"),
    ([2, 0], "3 fields"),
    ([2, 0, -4], "restart iteration"),
    ([4, "bored", 1, 1.0, 1.0, None, 0, []], "final reason"),
    ([9, 1], "unknown record type"),
    ([0, {}], "second header"),
    ({"a": 1}, "type tag"),
    ("text", "type tag"),
])
def test_malformed_records(tmp_path, record, message):
    if isinstance(record, list) and record[0] == 3 and record[8] is None:
        record = list(record)
        record[8] = [3, list(random.Random(0).getstate()[1]), None]
        if record[4] is None:
            record[6] = good_strategy_data()
    path = tmp_path / "a.ffsearch"
    SearchLogWriter(path, header()).close()
    append_record(path, record)
    with pytest.raises(SearchLogError, match=message) as info:
        read_search_log(path)
    assert "record 1 at byte" in str(info.value)


def test_a_logged_strategy_in_micro_batches_its_splits_do_not_divide_is_refused(tmp_path):
    g, _ = setting()
    strategy = good_strategy_data() + [[], [g.batch_size, "1f1b"]]   # 16-way splits
    rng = [3, list(random.Random(0).getstate()[1]), None]
    path = tmp_path / "a.ffsearch"
    SearchLogWriter(path, header()).close()
    append_record(path, [3, 0, 0, 0.0, strategy, 1.0, None, 1.0, rng, []])
    with pytest.raises(SearchLogError, match="does not fit the log's graph: .*micro-batches"):
        read_search_log(path)


def test_bad_rng_state_and_undecodable_body(tmp_path):
    path = tmp_path / "a.ffsearch"
    SearchLogWriter(path, header()).close()
    s = good_strategy_data()
    append_record(path, [3, 0, 0, 0.0, s, 1.0, s, 1.0, [3, [1, 2, 3], None], []])
    with pytest.raises(SearchLogError, match="rng state"):
        read_search_log(path)
    path2 = tmp_path / "b.ffsearch"
    SearchLogWriter(path2, header()).close()
    with open(path2, "ab") as f:
        f.write(frame(b"\xc1\xc1"))              # valid checksum, not msgpack
    with pytest.raises(SearchLogError, match="record 1 at byte .* malformed"):
        read_search_log(path2)


def test_header_hash_mismatch_and_bad_header(tmp_path):
    path = tmp_path / "a.ffsearch"
    h = header()
    body = {"version": 1, "flextui": "0", "created": "", "graph": h.graph.to_dict(),
            "graph_hash": "0" * 16, "cluster": h.cluster.to_dict(),
            "cluster_hash": h.cluster.fingerprint, "cost_model": "x", "seed": 1, "options": {}}
    path.write_bytes(MAGIC + frame(msgpack.packb([0, body])))
    with pytest.raises(SearchLogError, match="record 0 .*does not match its recorded hash"):
        read_search_log(path)
    body["graph_hash"] = h.graph.fingerprint
    body["graph"] = {"name": "x", "ops": [{"type": "nonsense"}]}
    path.write_bytes(MAGIC + frame(msgpack.packb([0, body])))
    with pytest.raises(SearchLogError, match="graph cannot be rebuilt"):
        read_search_log(path)
    path.write_bytes(MAGIC + frame(msgpack.packb([1, 2, 3])))
    with pytest.raises(SearchLogError, match="not a search-log header"):
        read_search_log(path)


def header_edited(tmp_path, edit, **kw):
    """A header-only log, its header then edited by ``edit(header_dict)`` as by hand."""
    path = tmp_path / "edited.ffsearch"
    SearchLogWriter(path, header(**kw)).close()
    edit_log_header(path, edit)
    return path


def test_a_zlib_bomb_in_a_profiled_cost_model_is_refused_unexpanded(tmp_path):
    bomb = zlib.compress(b"\0" * (80 * 2**20), 1)          # 80 MiB of zeros in ~350 KB
    body = {"base": "analytic", "device": "cpu: x", "dtype": "float32", "training": True,
            "torch": "2", "times": base64.b64encode(bomb).decode()}
    path = header_edited(tmp_path, lambda h: h.update(
        cost_model=PROFILED_PREFIX + json.dumps(body)))
    with pytest.raises(SearchLogError, match=r"record 0 .*more than 67,108,864 bytes"):
        read_search_log(path)


def nested(depth: int) -> list:
    value: list = []
    for _ in range(depth - 1):
        value = [value]
    return value


@pytest.mark.parametrize("edit, fragment", [
    (lambda h: h["cluster"].update(name="c" * 10_000_000), "limit of 256"),
    (lambda h: h["graph"].update(name="g" * 10_000_000), "limit of 256"),
    (lambda h: h.update(flextui="9" * 10_000_000), "flextui version: 10,000,000 characters"),
    (lambda h: h["options"].update(init=nested(40)), "nested deeper than"),
], ids=["cluster-name", "graph-name", "version", "nested-option"])
def test_names_and_nesting_in_a_header_are_limited(tmp_path, edit, fragment):
    with pytest.raises(SearchLogError) as info:
        read_search_log(header_edited(tmp_path, edit))
    message = str(info.value)
    assert "record 0" in message and fragment in message and len(message) < 600, message


def test_writer_rejects_what_it_could_not_read_back(tmp_path):
    g, c = setting()
    w = SearchLogWriter(tmp_path / "a.ffsearch", header())
    s = data_parallel(g, c)
    partial = Strategy({op.name: s[op.name] for op in g.ops[1:]})
    with pytest.raises(SearchLogError, match="no config for op"):
        w.checkpoint(Checkpoint(0, 0, 0.0, partial, 1.0, partial, 1.0, random.Random().getstate()), [])
    with pytest.raises(FlextuiError):
        w.step(StepEvent(0, 1, 0.0, 0, ParallelConfig((3,), (0,)), 1.0, 1.0, 1.0, True, 0))
    with pytest.raises(SearchLogError, match="seed must be an integer"):
        SearchLogWriter(tmp_path / "c.ffsearch", header(seed=None))
    w.close()
