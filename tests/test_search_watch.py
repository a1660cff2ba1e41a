"""Watching a search: the bounded cost history, the accumulator that tracks each
chain's strategies from its events, a live search in the background (pause, stop, the
log kept) and playing a saved log back."""

import time

import pytest

from flextui.cost import AnalyticCostModel
from flextui.errors import FlextuiError
from flextui.search import SearchOptions, read_search_log, run_search
from flextui.search.logformat import (
    FORMAT_VERSION,
    TAG_HEADER,
    BadRecord,
    Checkpoint,
    decode_header,
)
from flextui.session.jobs import JobState
from flextui.session.live_search import LiveSearch
from flextui.session.playback import Playback
from flextui.session.search_watch import CostHistory, HistoryPoint, SearchWatch
from flextui.sim import Simulator
from flextui.strategy import builtin_strategy
from helpers import HANG_S, four_gpus, model


def point(step):
    return HistoryPoint(step, step / 10, 1.0, 1.0)


def test_history_stays_bounded_and_keeps_the_last_point():
    history = CostHistory(capacity=64)
    for step in range(1, 10_001):
        history.add(point(step))
    points = history.points()
    assert len(points) <= 66
    assert (points[0].step, points[-1].step) == (1, 10_000)   # the first and last kept
    assert history.stride == 256
    assert all(p.step % history.stride == 0 for p in points[1:-1])
    assert [p.step for p in points] == sorted(p.step for p in points)


def watched_search(tmp_path=None, **options):
    graph, cluster = model("lenet"), four_gpus()
    opts = SearchOptions(**options)
    watch = SearchWatch(graph, opts.iterations, opts.time_limit, opts.chains)
    result = run_search(graph, cluster, AnalyticCostModel(), opts, on_events=watch.take,
                        on_reset=watch.reset,
                        log_path=tmp_path / "run.ffsearch" if tmp_path else None)
    return graph, cluster, watch, result


@pytest.mark.parametrize("chains", [1, 2])
def test_watch_tracks_the_best_strategy_exactly(chains):
    graph, cluster, watch, result = watched_search(iterations=400, seed=5, chains=chains,
                                                   restart_every=150)
    view = watch.view("finished")
    assert view.steps == result.iterations == 400 * chains
    assert view.best_cost == result.best_cost
    assert dict(view.best) == dict(result.best)
    simulated = Simulator(graph, cluster, AnalyticCostModel()).simulate(view.best).cost
    assert simulated == pytest.approx(result.best_cost, rel=1e-12)
    assert view.acceptance_rate == pytest.approx(result.acceptance_rate)
    assert view.progress == 1.0
    assert view.history[-1].best == result.best_cost
    bests = [p.best for p in view.history]
    assert bests == sorted(bests, reverse=True)
    assert view.frontier and min(t for t, _ in view.frontier) == pytest.approx(
        min(p.time for p in result.frontier))


def test_watch_current_strategy_follows_the_chain():
    """After every batch, each chain's tracked current strategy simulates to the cost
    its last step reported."""
    graph, cluster = model("lenet"), four_gpus()
    sim = Simulator(graph, cluster, AnalyticCostModel())
    watch = SearchWatch(graph)
    checked = []

    def take(steps):
        watch.take(steps)
        checked.append(sim.simulate(watch.current[0]).cost == pytest.approx(steps[-1].current,
                                                                            rel=1e-12))
    run_search(graph, cluster, AnalyticCostModel(), SearchOptions(iterations=300, seed=2,
               restart_every=50), on_events=take, on_reset=watch.reset)
    assert checked and all(checked)


def wait_until(condition, what: str) -> None:
    """Poll ``condition`` until it holds (a failure after HANG_S: a hang, not slowness)."""
    deadline = time.monotonic() + HANG_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def assert_held(live, polls: int = 10) -> int:
    """Once paused, the search's steps stay as they are over further polls (the chains
    handed on every step before they said they wait); the steps."""
    held = live.view().steps
    for _ in range(polls):
        time.sleep(0.05)   # paces the polls: the steps must not move however long it is
        assert live.view().steps == held
    return held


def test_live_search_pauses_stops_and_keeps_its_log(tmp_path):
    """Paused, the search says so once its chain waits with every step handed on (a
    batch in flight used to arrive after the pause, so the test slept to let it)."""
    graph, cluster = model("lenet"), four_gpus()
    log = tmp_path / "live.ffsearch"
    options = SearchOptions(time_limit=60, seed=1, converge=False)  # LeNet converges in ~1 s
    live = LiveSearch(graph, cluster, AnalyticCostModel(), options, log_path=log, processes=False)
    assert live.view().state is JobState.STARTING
    live.start()
    wait_until(lambda: live.view().steps >= 50, "50 steps")
    assert live.toggle_pause()
    wait_until(lambda: live.view().state is JobState.PAUSED, "the search to pause")
    held = assert_held(live)
    assert not live.toggle_pause()
    wait_until(lambda: live.view().steps > held, "the search to go on")
    live.stop()
    assert live.join(timeout=HANG_S)
    view = live.view()
    assert view.state is JobState.STOPPED and view.reason == "interrupted"
    assert view.best_cost == live.result.best_cost
    assert set(view.baselines) == {"data-parallel", "expert"}
    assert view.speedup_over("data-parallel") >= 1.0
    saved = read_search_log(log)
    assert saved.final is not None and saved.final.best_cost == view.best_cost


def test_live_search_reports_a_failure(tmp_path):
    graph, cluster = model("lenet"), four_gpus()
    bad = tmp_path / "no-such-dir" / "x.ffsearch"
    live = LiveSearch(graph, cluster, AnalyticCostModel(), SearchOptions(iterations=10),
                      log_path=bad, processes=False)
    live.start()
    assert live.join(timeout=HANG_S)
    view = live.view()
    assert view.state is JobState.FAILED and "x.ffsearch" in view.message
    assert "The log is kept" not in view.message      # it was never created


class _FailingCostModel(AnalyticCostModel):
    """The analytic model, until it has timed ``calls`` blocks (the simulator asks once
    per op, config and kind of device); ``used`` counts them."""

    def __init__(self, calls: float = float("inf")) -> None:
        super().__init__()
        self.calls, self.used = calls, 0

    def op_cost(self, op, block_shape, device):
        self.used += 1
        if self.used > self.calls:
            raise FlextuiError("no time for this task")
        return super().op_cost(op, block_shape, device)


def test_a_search_that_fails_after_it_started_its_log_says_the_log_is_kept(tmp_path):
    graph, cluster = model("lenet"), four_gpus()
    log = tmp_path / "x.ffsearch"
    options = SearchOptions(iterations=100_000, converge=False)
    # how many blocks the search times before its first step (a run with an iteration
    # budget is reproducible): one more, and it fails once the chain has started
    counting, started = _FailingCostModel(), []
    run_search(graph, cluster, counting, SearchOptions(iterations=50, converge=False),
               log_path=tmp_path / "count.ffsearch",
               on_events=lambda events: started.append(counting.used))
    live = LiveSearch(graph, cluster, _FailingCostModel(started[0] + 1), options, log_path=log,
                      processes=False)
    live.start()
    assert live.join(timeout=HANG_S)
    view = live.view()
    assert view.state is JobState.FAILED and "no time for this task" in view.message
    assert view.message.endswith(f"The log is kept: {log}")
    assert read_search_log(log).checkpoints            # as it says


def test_playback_reaches_the_final_best(tmp_path):
    _, _, _, result = watched_search(tmp_path, iterations=300, seed=4, chains=2)
    log = read_search_log(tmp_path / "run.ffsearch")
    play = Playback(log)
    first = play.view()
    assert first.steps == 0 and first.state is JobState.PAUSED
    assert first.best_cost is not None  # the initial checkpoints are in
    play.step()
    assert play.view().steps == 1
    play.toggle()
    play.advance(1e-9)
    assert play.view().state is JobState.RUNNING
    play.to_end()
    view = play.view()
    assert play.finished and view.state is JobState.FINISHED and view.reason == "iterations"
    assert view.steps == 600
    assert view.best_cost == result.best_cost == log.final.best_cost
    assert dict(view.best) == dict(log.final.best)


def test_playback_clock_and_speeds(tmp_path):
    watched_search(tmp_path, iterations=200, seed=4)
    play = Playback(read_search_log(tmp_path / "run.ffsearch"))
    assert play.faster(True) == 2.0 and play.faster(False) == 1.0
    play.toggle()
    # to the 101st step's time (the log's own times, whatever the machine's load was)
    elapsed = sorted(r.elapsed for r in play._records if r.kind == "s")
    play.advance(elapsed[100])
    assert play.view().steps == sum(e <= elapsed[100] for e in elapsed) >= 101
    play.speed = 1e6
    play.advance(1.0)
    assert play.finished and play.view().steps == 200 and not play.playing
    assert play.toggle() and play.view().steps == 0     # playing again starts over


def test_bad_options_in_a_log_are_a_clear_error(tmp_path):
    watched_search(tmp_path, iterations=20)
    path = tmp_path / "run.ffsearch"
    header = read_search_log(path).header
    h = header.graph, header.cluster
    fields = {"version": FORMAT_VERSION, "flextui": header.flextui_version,
              "created": header.created, "graph": h[0].to_dict(),
              "graph_hash": h[0].fingerprint, "cluster": h[1].to_dict(),
              "cluster_hash": h[1].fingerprint, "cost_model": header.cost_model, "seed": 0}
    with pytest.raises(BadRecord, match="unknown search options"):
        decode_header(path, [TAG_HEADER, {**fields, "options": {
            **header.options.to_dict(), "warp": 9}}])


def test_live_search_in_a_worker_process_pauses_and_finishes():
    graph, cluster = model("lenet"), four_gpus()
    live = LiveSearch(graph, cluster, AnalyticCostModel(), SearchOptions(iterations=3000, seed=3,
                                                                         converge=False))
    live.toggle_pause()          # not running yet: nothing to pause
    live.start()
    wait_until(lambda: live.view().steps > 0, "the first steps")
    assert live.toggle_pause()
    wait_until(lambda: live.view().state is JobState.PAUSED, "the search to pause")
    assert assert_held(live) < 3000
    live.toggle_pause()
    assert live.join(timeout=HANG_S)
    view = live.view()
    assert view.state is JobState.FINISHED and view.steps == 3000
    assert view.best_cost == live.result.best_cost
    assert dict(view.best) == dict(live.result.best)


def test_a_tie_between_chains_goes_to_the_lower_chain_whichever_came_first():
    """The search's result takes the lower chain of two with the same best cost; the
    watch (and a playback) must show that one, not the chain whose steps arrived first."""
    graph, cluster = model("lenet"), four_gpus()
    ones = [builtin_strategy(name, graph, cluster) for name in ("data-parallel", "expert")]
    watch = SearchWatch(graph, 10, None, 2)
    for chain in (1, 0):   # chain 1 reports first, at the same cost
        watch.reset(Checkpoint(chain, 0, 0.0, ones[chain], 1.0, ones[chain], 1.0, ()))
    view = watch.view("finished")
    assert view.best_chain == 0 and dict(view.best) == dict(ones[0])
