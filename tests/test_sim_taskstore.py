"""The task stores: the C store gives exactly what the pure-Python reference gives (ids,
edges and bit-identical times), on hand-made graphs and through delta simulation."""

import itertools
import random
from array import array

import pytest

from flextui.cost import AnalyticCostModel
from flextui.sim import DeltaSimulator, Simulator, taskstore
from flextui.sim.schedule import Times
from flextui.sim.taskstore import PyTaskStore
from flextui.strategy import builtin_strategy, random_config
from flextui.strategy.pipeline import Pipeline, Schedule, microbatch_choices
from helpers import cluster, model
from test_sim_host_comm import host_and_not

needs_c = pytest.mark.skipif(taskstore.CTaskStore is None,
                             reason="the C task store was not built (no C compiler)")
STORES = [PyTaskStore, pytest.param(taskstore.CTaskStore, marks=needs_c)]


def columns(n):
    """ready, start, end and order, as a first run needs them"""
    times = Times.zeros(n)
    return times.ready, times.start, times.end, times.order


@pytest.mark.parametrize("store_type", STORES)
def test_fifo_on_a_shared_resource_with_ties_broken_by_key(store_type):
    store = store_type(2)
    a = store.add((0,), 1.0, (0, 5))
    b = store.add((0,), 2.0, (0, 3))        # ready with a, but its key is less: first
    c = store.add((0, 1), 0.5, (1,))        # holds both resources, after a and b
    store.link(a, c)
    store.link(b, c)
    ready, start, end, order = columns(len(store))
    assert store.reschedule(ready, start, end, order, -1.0, [], []) == 3.5
    assert (start[b], end[b], start[a], end[a]) == (0.0, 2.0, 2.0, 3.0)
    assert (ready[c], start[c], end[c]) == (3.0, 3.0, 3.5)


@pytest.mark.parametrize("store_type", STORES)
def test_a_gather_runs_between_its_preds_and_succs_and_moves_its_bytes(store_type):
    store = store_type(3)                     # devices 0, 1 and a link, resource 2
    a = store.add((0,), 1.0, (0, 0))
    b = store.add((1,), 1.0, (0, 1))
    gather = store.add_gather(4, 1, 2, 0.5, 96, (0, 4, 0, -1, 0, 1), [a], [b])
    assert store.info(gather)[:5] == (5, 4, 1, 2, 96)   # GATHER, op 4, group 1, rset, bytes
    assert store.preds(gather) == [a] and store.succs(gather) == [b]
    ready, start, end, order = columns(len(store))
    assert store.reschedule(ready, start, end, order, -1.0, [], []) == 2.5
    assert (start[gather], end[gather], start[b]) == (1.0, 1.5, 1.5)
    assert list(store.resource_usage(start, end, 2)[1]) == [0, 0, 96]
    with pytest.raises(IndexError):
        store.add_gather(4, 1, 2, 0.5, 96, (0,), [99], [])
    with pytest.raises(IndexError):
        store.add_gather(4, 1, 7, 0.5, 96, (0,), [], [])


@pytest.mark.parametrize("store_type", STORES)
def test_ids_are_reused_last_freed_first_and_edges_follow(store_type):
    store = store_type(1)
    ids = [store.add((0,), 1.0, (i,)) for i in range(4)]
    store.link(ids[0], ids[1])
    store.link(ids[1], ids[2])
    store.detach([ids[1]])
    assert store.succs(ids[0]) == [] and store.preds(ids[1]) == [ids[0]]
    assert not store.alive(ids[1])
    store.attach([ids[1]])
    assert store.succs(ids[0]) == [ids[1]] and store.alive(ids[1])
    store.remove([ids[2], ids[3]])
    assert store.succs(ids[1]) == []
    assert store.add((0,), 1.0, ()) == ids[3] and store.add((0,), 1.0, ()) == ids[2]
    assert list(store.live_ids()) == ids and store.duration_of(ids[0]) == 1.0


@pytest.mark.parametrize("store_type", STORES)
def test_bad_input_is_an_error_not_a_crash(store_type):
    store = store_type(2)
    with pytest.raises(IndexError):
        store.add((2,), 1.0, (0,))
    with pytest.raises(ValueError):
        store.add((0,), 1.0, tuple(range(9)))
    a = store.add((0,), 1.0, (0,))
    b = store.add((1,), 1.0, (1,))
    for bad in (-1, 2):           # a negative id is refused too, not read from the end
        for call in (lambda: store.link(a, bad), lambda: store.preds(bad),
                     lambda: store.remove([bad]), lambda: store.detach([bad]),
                     lambda: store.alive(bad), lambda: store.duration_of(bad),
                     lambda: store.reschedule(*columns(2), -1.0, [bad], [])):
            with pytest.raises(IndexError, match="out of range"):
                call()
    assert store.succs(a) == [] and list(store.live_ids()) == [a, b]
    store.link(a, b)
    store.link(b, a)
    with pytest.raises(RuntimeError, match="cycle"):
        store.reschedule(*columns(2), -1.0, [], [])


@needs_c
@pytest.mark.parametrize("value, chosen", [("1", "Python"), ("yes", "Python"), ("0", "C"),
                                           ("false", "C"), ("", "C"), (None, "C")])
def test_flextui_pure_python_selects_the_python_store_only_when_set_true(monkeypatch, value,
                                                                         chosen):
    if value is None:
        monkeypatch.delenv("FLEXTUI_PURE_PYTHON", raising=False)
    else:
        monkeypatch.setenv("FLEXTUI_PURE_PYTHON", value)
    assert taskstore.backend() == chosen
    assert isinstance(taskstore.new_store(1), PyTaskStore) == (chosen == "Python")


@needs_c
def test_c_store_matches_python_on_random_graphs():
    rng = random.Random(5)
    for trial in range(30):
        stores = [PyTaskStore(6), taskstore.CTaskStore(6)]
        n = rng.randrange(1, 300)
        for t in range(n):
            res = tuple(rng.sample(range(6), rng.choice([1, 1, 1, 3])))
            # coarse durations and big keys make ties in ready time and wide keys
            duration = rng.choice([0.0, 0.5, 1.0, 1.5])
            key = tuple(rng.randrange(-3, 3) * (1 if trial % 2 else 10**5)
                        for _ in range(rng.randrange(9)))
            ids = {s.add(res, duration, key) for s in stores}
            assert ids == {t}
            for p in rng.sample(range(t), min(t, rng.randrange(3))):
                for s in stores:
                    s.link(p, t)
        got = []
        for s in stores:
            ready, start, end, order = columns(n)
            makespan = s.reschedule(ready, start, end, order, -1.0, [], [])
            first = (list(ready), list(start), list(end))
            # re-simulating from any t0 reproduces the same times (nothing changed)
            again = s.reschedule(ready, start, end, order, ready[rng.randrange(n)], [], [])
            assert again == makespan and (list(ready), list(start), list(end)) == first
            got.append((makespan, first))
        assert got[0] == got[1]


def random_graph(store, rng, n, made):
    """``n`` tasks on 4 resources, each after up to two live ones (an edge sometimes
    twice); coarse durations
    make ties in ready time, and keys grow with ``made`` (a counter) so that, as in a
    task graph, a task's key is above its predecessors'. Returns their ids."""
    ids = []
    for _ in range(n):
        res = tuple(rng.sample(range(4), rng.choice([1, 1, 1, 2])))
        earlier = store.live_ids()
        t = store.add(res, rng.choice([0.0, 0.5, 1.0, 1.5, 2.0]), (next(made),))
        for p in rng.sample(earlier, min(len(earlier), rng.randrange(3))):
            for _ in range(rng.choice([1, 1, 1, 2])):   # edges may repeat, as in task graphs
                store.link(p, t)
        ids.append(t)
    return ids


@pytest.mark.parametrize("store_type", STORES)
def test_an_edit_re_timed_incrementally_equals_a_simulation_from_scratch(store_type):
    """Remove some tasks and add others (as delta simulation does); re-timing only what
    changed gives every task the times a run from scratch gives, and the order it
    writes back serves the next edit."""
    rng = random.Random(3)
    for _ in range(40):
        store, made = store_type(4), itertools.count()
        random_graph(store, rng, rng.randrange(2, 120), made)
        n = len(store)
        times = Times.zeros(n)
        store.reschedule(times.ready, times.start, times.end, times.order, -1.0, [], [])
        for _ in range(4):
            live = store.live_ids()
            removed = rng.sample(live, rng.randrange(len(live) // 3 + 1))
            store.detach(removed)
            added = random_graph(store, rng, rng.randrange(4), made)
            times.grow(len(store))
            # as delta simulation does: no task the edit touches is ready before t0 (a
            # lower bound on a touched task's ready time: its untouched predecessors')
            touched = added + [u for t in removed for u in store.succs(t) if store.alive(u)]
            t0 = min([times.ready[t] for t in removed] +
                     [max((times.end[p] for p in store.preds(t) if p not in added),
                          default=0.0) for t in touched], default=float("inf"))
            got = store.reschedule(times.ready, times.start, times.end, times.order, t0,
                                   added, removed)
            store.release(removed)   # as accepting a proposal does, after re-timing
            fresh = Times.zeros(len(store))
            want = store.reschedule(fresh.ready, fresh.start, fresh.end, fresh.order, -1.0,
                                    [], [])
            assert got == want
            for t in store.live_ids():
                assert (times.ready[t], times.start[t], times.end[t]) == \
                    (fresh.ready[t], fresh.start[t], fresh.end[t]), t


@needs_c
@pytest.mark.parametrize("name", ["inception_v3", "nmt", "transformer"])
def test_c_and_python_delta_simulations_agree_bit_for_bit(name, monkeypatch):
    graph, where = model(name, **({"steps": 3} if name == "nmt" else {})), cluster("p100-4x4")
    runs = []
    for pure in (False, True):
        if pure:
            monkeypatch.setenv("FLEXTUI_PURE_PYTHON", "1")
        assert taskstore.backend() == ("Python" if pure else "C")
        delta = DeltaSimulator(graph, where, AnalyticCostModel())
        delta.reset(builtin_strategy("data-parallel", graph, where))
        rng = random.Random(11)
        costs = []
        for _ in range(15):
            op = rng.choice(graph.ops)
            costs.append(delta.propose(op, random_config(op, where.num_devices, rng)))
            delta.accept() if rng.random() < 0.5 else delta.reject()
        timeline = delta.timeline()
        runs.append((costs, [(t.key, t.ready, t.start, t.end) for t in timeline.tasks]))
    assert runs[0] == runs[1]
    full = Simulator(graph, where, AnalyticCostModel()).simulate(delta.strategy)
    assert full.cost == delta.cost


def test_times_grow():
    times = Times.zeros(2)
    times.end[1] = 3.0
    times.grow(5)
    assert len(times.ready) == 5 and times.end[1] == 3.0 and list(times.start) == [0.0] * 5
    assert list(times.order) == [-1] * 5


@pytest.mark.parametrize("store_type", STORES)
def test_a_run_past_its_limit_stops_on_a_lower_bound_of_the_makespan(store_type):
    rng = random.Random(8)
    store = store_type(4)
    random_graph(store, rng, 80, itertools.count())
    makespan = store.reschedule(*columns(len(store)), -1.0, [], [])
    for limit in (0.0, makespan / 3, makespan / 2):
        bound = store.reschedule(*columns(len(store)), -1.0, [], [], limit)
        assert limit < bound <= makespan
    assert store.reschedule(*columns(len(store)), -1.0, [], [], makespan) == makespan


@pytest.mark.parametrize("store_type", STORES)
def test_a_run_past_its_deadline_raises(store_type):
    store = store_type(4)
    random_graph(store, random.Random(9), 20, itertools.count())
    with pytest.raises(TimeoutError, match="deadline"):
        store.reschedule(*columns(len(store)), -1.0, [], [], float("inf"), 0.0)


@pytest.mark.parametrize("store_type", STORES)
@pytest.mark.parametrize("ending", ["through", "limit", "deadline"])
def test_undo_puts_back_what_a_journaled_run_wrote(store_type, ending):
    """However a journaled re-simulation ends (through, stopped at its limit, past its
    deadline), undo gives back every column exactly, order included; and a run after
    it, from there, gives what it gave before the undone one."""
    rng = random.Random(12)
    for _ in range(25):
        store, made = store_type(4), itertools.count()
        random_graph(store, rng, rng.randrange(2, 90), made)
        times = Times.zeros(len(store))
        makespan = store.reschedule(times.ready, times.start, times.end, times.order, -1.0,
                                    [], [])
        before = [list(c) for c in (times.ready, times.start, times.end, times.order)]
        live = list(store.live_ids())
        removed = rng.sample(live, rng.randrange(len(live) // 3 + 1))
        store.detach(removed)
        added = random_graph(store, rng, rng.randrange(1, 4), made)
        times.grow(len(store))
        t0 = store.earliest_ready(times.ready, times.end, added, removed)
        limit, deadline = {"through": (float("inf"), float("inf")),
                           "limit": (makespan / 2, float("inf")),
                           "deadline": (float("inf"), 0.0)}[ending]
        try:
            store.reschedule(times.ready, times.start, times.end, times.order, t0, added,
                             removed, limit, deadline, journal=True)
        except TimeoutError:
            assert ending == "deadline"
        store.remove(added)
        store.attach(removed)
        store.undo(times.ready, times.start, times.end, times.order)
        n = len(before[0])
        assert [list(c)[:n] for c in (times.ready, times.start, times.end, times.order)] \
            == before
        assert store.reschedule(times.ready, times.start, times.end, times.order, -1.0, [],
                                []) == makespan
        with pytest.raises(RuntimeError, match="no journaled"):
            store.undo(times.ready, times.start, times.end, times.order)


def structure(tg):
    """Every live task of a task graph as the store holds it."""
    store = tg.store
    return [(t, store.info(t), store.keys([t])[0], store.duration_of(t),
             sorted(store.preds(t)), sorted(store.succs(t))) for t in tg.live_ids()]


@needs_c
@pytest.mark.parametrize("name", ["inception_v3", "nmt", "transformer", "rnnlm"])
@pytest.mark.parametrize("host_driven,pipelined", [(False, False), (True, False),
                                                  (False, True)])
def test_c_and_python_build_the_same_task_graph(name, host_driven, pipelined, monkeypatch):
    """The bulk builders (ops, edges with their routes, parameters' all-reduces and
    updates; per micro-batch under a pipeline) make the same tasks, ids, keys, costs
    and edges in both stores, and the store's accounts (memory, resource usage) agree,
    before and after edits."""
    graph = model(name, **({"steps": 3} if name in ("nmt", "rnnlm") else {}))
    box = host_and_not()[0] if host_driven else cluster("p100-4x4")
    start = builtin_strategy("model-parallel" if pipelined else "random", graph, box)
    if pipelined:
        m = max(microbatch_choices(graph, start.configs_of(graph), 4))
        start = start.with_pipeline(Pipeline(m, Schedule.ONE_F_ONE_B))
    got = []
    for pure in (False, True):
        monkeypatch.setenv("FLEXTUI_PURE_PYTHON", "1" if pure else "0")
        delta = DeltaSimulator(graph, box, AnalyticCostModel())
        delta.reset(start)
        rng = random.Random(7)
        seen = [structure(delta.tg)]
        for _ in range(6):
            op = rng.choice(graph.ops)
            delta.propose(op, random_config(op, box.num_devices, rng,
                                            start.pipeline.microbatches))
            seen.append(structure(delta.tg))
            delta.accept() if rng.random() < 0.5 else delta.reject()
        acts = array("q", bytes(8 * box.num_devices))
        spaces = delta.tg.store.account(delta.tg.live_ids(), 1, acts)
        usage = delta.tg.store.resource_usage(delta.times.start, delta.times.end,
                                              box.num_devices)
        got.append((seen, list(acts), spaces, [list(c) for c in usage],
                    list(delta.tg.store.columns()[0])))
    assert got[0] == got[1]


@pytest.mark.parametrize("store_type", STORES)
def test_a_bulk_build_with_bad_arrays_makes_nothing(store_type):
    """add_op, add_edge and add_param check what they are given before they make a
    task: a bad device, task index, hop range or resource set is an error that leaves
    the store as it was."""
    store = store_type(3)   # devices 0 and 1, link 2
    i, d, q = (lambda *v: array("i", v)), (lambda *v: array("d", v)), (lambda *v: array("q", v))
    fwd, bwd = store.add_op(0, i(0, 1), d(1.0, 1.0), d(2.0, 2.0), 8, 0)
    cfwd, cbwd = store.add_op(1, i(0, 1), d(1.0, 1.0), d(2.0, 2.0), 8, 0)
    before = (len(store), list(store.live_ids()), [store.succs(t) for t in store.live_ids()])
    edge = dict(slot=i(0), k=i(1), m=i(0), nbytes=q(8), fhops=i(0, 1), frsets=i(2),
                fdurations=d(0.5), bhops=i(0, 1), brsets=i(2), bdurations=d(0.5))

    def add_edge(**changed):   # the C store takes its arrays by position
        return store.add_edge(0, 1, fwd, cfwd, bwd, cbwd, *{**edge, **changed}.values())

    bad_calls = [
        lambda: store.add_op(2, i(0, 5), d(1.0, 1.0), None, 8, 0),
        lambda: add_edge(k=i(2)),
        lambda: add_edge(brsets=i(9)),
        lambda: add_edge(bhops=i(0, 3)),
        lambda: store.add_param(0, bwd, i(0, 2), i(0, 1), i(0, 2), i(0, 5), i(2), d(1.0),
                                q(8), i(0, 1), d(0.1, 0.1), q(8, 8)),
        lambda: store.add_param(0, bwd, i(0, 2), i(0, 1), i(0, 2), i(0, 1), i(7), d(1.0),
                                q(8), i(0, 1), d(0.1, 0.1), q(8, 8)),
    ]
    for call in bad_calls:
        with pytest.raises((IndexError, ValueError)):
            call()
        assert (len(store), list(store.live_ids()),
                [store.succs(t) for t in store.live_ids()]) == before
    made = add_edge()   # and the good one builds
    assert len(made) == 2 and store.keys(made) == [(0, 1, 0, 1, 0, 0, 0), (1, 0, 0, 0, 1, 0, 1, 0)]


@needs_c
@pytest.mark.parametrize("name", ["inception_v3", "transformer", "nmt"])
def test_edge_plans_made_in_c_equal_the_python_ones(name):
    """The bulk planner (overlaps, routes and hop times in C) gives every edge the plan
    the per-pair Python gives, array for array, under random configs of both ends."""
    graph = model(name, **({"steps": 3} if name == "nmt" else {}))
    box = cluster("p100-4x4")
    planner = DeltaSimulator(graph, box, AnalyticCostModel()).simulator.task_graph(
        builtin_strategy("data-parallel", graph, box)).plans
    assert planner._bulk is not None
    rng = random.Random(21)
    edges = [(p, op) for op in graph.ops for p in graph.predecessors(op)]
    for producer, consumer in rng.sample(edges, min(40, len(edges))):
        for _ in range(3):
            pconf = random_config(producer, box.num_devices, rng)
            cconf = random_config(consumer, box.num_devices, rng)
            bulk = planner._edge(producer, consumer, pconf, cconf)
            by_pair = planner._edge_by_pair(producer, consumer, pconf, cconf)
            assert vars(bulk) == vars(by_pair), (producer.name, consumer.name)


@needs_c
def test_both_stores_stop_a_run_at_the_same_bound():
    """A run with a limit stops once a resource's free time plus the work still queued
    for it passes the limit: both stores stop at the same task with the same bound, a
    lower bound on the makespan past the limit."""
    rng = random.Random(17)
    for _ in range(30):
        graphs = [PyTaskStore(4), taskstore.CTaskStore(4)]
        seed = rng.randrange(10**6)
        for store in graphs:
            random_graph(store, random.Random(seed), 60, itertools.count())
        makespan = graphs[0].reschedule(*columns(len(graphs[0])), -1.0, [], [])
        for limit in (makespan * f for f in (0.2, 0.5, 0.8, 0.95, 0.999)):
            bounds = {store.reschedule(*columns(len(store)), -1.0, [], [], limit)
                      for store in graphs}
            assert len(bounds) == 1
            assert limit < bounds.pop() <= makespan
