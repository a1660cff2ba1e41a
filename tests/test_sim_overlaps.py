"""Overlaps found by division equal the definition: every producer block tested against
every consumer block."""

import random

import pytest

from flextui.graph import intersect
from flextui.graph.library import model_names
from flextui.sim.overlaps import BlockIndex, overlap_regions
from flextui.strategy import random_config
from helpers import model

SMALL = {"rnntc": {"steps": 2}, "rnnlm": {"steps": 2}, "nmt": {"steps": 2},
         "transformer": {"layers": 1}, "resnet101": {"depth": 50}}


def pairwise(producer, consumer, pconf, cconf):
    """The definition: every (slot, consumer task, producer task) whose blocks meet."""
    outs = [producer.output_regions(r) for r in pconf.regions(producer)]
    needs = [consumer.input_regions(r) for r in cconf.regions(consumer)]
    return [(slot, k, m, overlap)
            for slot, tensor in enumerate(consumer.inputs) if tensor.producer is producer
            for k, need in enumerate(needs)
            for m, out in enumerate(outs)
            if (overlap := intersect(need[slot], out[tensor.index])) is not None]


@pytest.mark.parametrize("name", model_names())
def test_division_finds_exactly_the_overlapping_pairs(name):
    graph = model(name, **SMALL.get(name, {}))
    rng = random.Random(name)
    edges = [(p, c) for c in graph.ops for p in graph.predecessors(c)]
    for producer, consumer in rng.sample(edges, min(len(edges), 40)):
        for _ in range(3):
            devices = rng.choice([4, 8, 16])
            pconf = random_config(producer, devices, rng)
            cconf = random_config(consumer, devices, rng)
            assert list(overlap_regions(producer, consumer, pconf, cconf)) == \
                pairwise(producer, consumer, pconf, cconf), (producer.name, consumer.name)


def test_blocks_sharing_a_range_and_empty_regions():
    # two blocks per cell (a split along a dim the tensor lacks), one empty block
    blocks = [((0, 2), (0, 4)), ((0, 2), (0, 4)), ((2, 4), (0, 4)), ((2, 4), (0, 4)),
              ((4, 4), (0, 4))]
    index = BlockIndex(blocks)
    assert index.grid
    assert index.overlaps(((1, 3), (1, 2))) == [(0, ((1, 2), (1, 2))), (1, ((1, 2), (1, 2))),
                                                (2, ((2, 3), (1, 2))), (3, ((2, 3), (1, 2)))]
    assert index.overlaps(((2, 2), (0, 4))) == []   # an empty region meets nothing
    assert index.overlaps(((4, 9), (0, 4))) == []


def test_ranges_that_are_not_a_grid_are_tested_pair_by_pair():
    blocks = [((0, 3),), ((2, 5),)]    # overlapping ranges: no grid
    index = BlockIndex(blocks)
    assert not index.grid
    assert index.overlaps(((2, 3),)) == [(0, ((2, 3),)), (1, ((2, 3),))]
    assert index.overlaps(((4, 6),)) == [(1, ((4, 5),))]
