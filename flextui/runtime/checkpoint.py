"""Saving and resuming a rank's state with torch.distributed.checkpoint (the folder's
layout: ``checkpointing``). Each rank writes its own keys: its parameter boxes and
their optimizer state, keyed by rank, so every shard is saved as the rank holds it and
resumed into the same rank of the same strategy (no resharding). The ranks save
together; once ``dcp.save`` has returned on every rank (a barrier), rank 0 writes the
META that makes the folder whole.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp

from flextui.runtime.checkpointing import STEP_DIR, CheckpointMeta, strategy_fingerprint
from flextui.runtime.engine import RankProgram
from flextui.runtime.spec import LaunchSpec


def param_key(rank: int, name: str) -> str:
    return f"rank{rank}/param/{name}"


def _state(program: RankProgram) -> dict[str, torch.Tensor]:
    """The rank's tensors, sharing storage with its state (a load fills them in place)."""
    state = {}
    for name, param in program.params.items():
        state[param_key(program.rank, name)] = param.detach()
        for i, moment in enumerate(program.update.moments.get(name, ())):
            state[f"rank{program.rank}/moment{i}/{name}"] = moment
    for key, tensor in program.update.sharded.state_tensors().items():
        state[f"rank{program.rank}/sharded/{key}"] = tensor
    return state


def save(spec: LaunchSpec, program: RankProgram, step: int) -> None:
    """Save the state after ``step`` steps into ``--save``'s folder (every rank)."""
    folder = Path(spec.training.checkpoint.save) / STEP_DIR.format(step)
    with program.whole_params():   # stage-3 parameters gathered: whole boxes are saved
        dcp.save(_state(program), checkpoint_id=folder)
    dist.barrier()  # every rank's shards are written
    if program.rank == 0:
        graph = spec.graph
        names = graph.meta.get("module_params", {})
        plan = program.plan
        CheckpointMeta(step, program.update.updates, spec.training.seed, str(spec.training.dtype),
                       graph.fingerprint,
                       strategy_fingerprint(graph, spec.strategy, spec.num_ranks),
                       {n: graph.parameters[n].shape for n in plan.param_boxes},
                       {n: names.get(n, "") for n in plan.param_boxes},
                       {n: dict(boxes) for n, boxes in plan.param_boxes.items()}
                       ).write(folder)


def resume(spec: LaunchSpec, program: RankProgram) -> None:
    """Fill the rank's state from the checkpoint the launcher resumes from (every rank)."""
    saving = spec.training.checkpoint
    folder = Path(saving.resume) / STEP_DIR.format(saving.start)
    meta = CheckpointMeta.read(folder)
    with program.whole_params():   # and the parts of stage-3 parameters taken from them
        dcp.load(_state(program), checkpoint_id=folder)
    program.update.updates = meta.updates


def whole_weights(folder: Path, meta: CheckpointMeta) -> dict[str, torch.Tensor]:
    """The parameters of the checkpoint at ``folder`` as whole tensors keyed by the
    user's module's own names, each assembled from the boxes the ranks saved (read in
    this process, no process group)."""
    dtype = getattr(torch, meta.dtype)
    state = {param_key(rank, name): torch.empty(tuple(b - a for a, b in box), dtype=dtype)
             for name, held in meta.boxes.items() for rank, box in held.items()}
    with warnings.catch_warnings():  # that it reads in one process: what it is asked
        warnings.filterwarnings("ignore", "torch.distributed is disabled")
        dcp.load(state, checkpoint_id=folder, no_dist=True)
    weights = {}
    for name, shape in meta.shapes.items():
        whole = torch.empty(shape, dtype=dtype)
        for rank, box in meta.boxes[name].items():
            whole[tuple(slice(a, b) for a, b in box)] = state[param_key(rank, name)]
        weights[meta.module_names[name] or name] = whole
    return weights
