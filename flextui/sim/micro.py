"""What the task graph adds for micro-batches (``strategy.pipeline``; ``taskgraph`` says
the rules): a micro-batch's place in a task's key, a parameter's sync waiting for every
micro-batch's gradients, and the stage links that take micro-batches through a stage one
after another."""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Mapping

from flextui.sim.taskstore import TaskStore
from flextui.strategy import ParallelConfig


def link_stages(store: TaskStore, links: Iterable[tuple[int, int]],
                configs: Mapping[int, ParallelConfig], forward: Mapping[int, array],
                backward: Mapping[int, array], micro: int) -> None:
    """On each device of a stage link's two ops (``pipeline.stage_links``: one device
    set), the first op's forward of micro-batch ``j`` after the last op's of ``j - 1``,
    and the last op's backward of ``j`` after the first op's of ``j - 1`` (each op's
    tasks are ``forward[op]``/``backward[op]``, micro-batch by micro-batch)."""
    link = store.link
    for z, a in links:
        zconf, aconf = configs[z], configs[a]
        nz, na = len(zconf.devices), len(aconf.devices)
        pairs = [(y, x) for y, d in enumerate(zconf.devices)
                 for x, e in enumerate(aconf.devices) if d == e]
        zf, af = forward[z], forward[a]
        zb, ab = backward[z], backward[a]
        for j in range(1, micro):
            for y, x in pairs:
                link(zf[(j - 1) * nz + y], af[j * na + x])
                if zb and ab:
                    link(ab[(j - 1) * na + x], zb[j * nz + y])


def every_micro(gblocks: array, gblockids: array, per_micro: int, micro: int,
                 ) -> tuple[array, array]:
    """A parameter plan's groups' producing blocks, given as indices into one
    micro-batch's ``per_micro`` producers, as indices into ``micro`` micro-batches'
    (each group's blocks in every micro-batch)."""
    if micro == 1:
        return gblocks, gblockids
    blocks, ids = array("i", [0]), array("i")
    for g in range(len(gblocks) - 1):
        mine = gblockids[gblocks[g]:gblocks[g + 1]]
        for j in range(micro):
            ids.extend(b + j * per_micro for b in mine)
        blocks.append(len(ids))
    return blocks, ids


def micro_of_key(key: tuple[int, ...], op: int, num_ops: int) -> int:
    """The micro-batch of a task of op ``op`` (its ``info`` op) with ``key``: 0 for a
    sync or an update, which serve every micro-batch."""
    if key[0] not in (0, 1) or op < 0:
        return 0
    return (key[1] - (op if key[0] == 0 else -op)) // num_ops
