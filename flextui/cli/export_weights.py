"""``flextui export-weights DIR model.pt``: the newest checkpoint in DIR (``launch
--save``) as a plain state_dict with the user's module's own keys, every parameter
whole, for ``module.load_state_dict``."""

from __future__ import annotations

import argparse

from rich.console import Console


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = ("Write the newest checkpoint a launch saved (--save DIR) as a plain "
                     "PyTorch state_dict (torch.save) with your module's own parameter "
                     "names, each parameter assembled whole from the ranks' shards.")
    p.add_argument("checkpoint", metavar="DIR", help="the folder launch --save wrote")
    p.add_argument("out", metavar="MODEL.pt", help="where to write the state_dict")
    p.set_defaults(handler=cmd_export_weights)


def cmd_export_weights(args: argparse.Namespace, console: Console) -> int:
    import torch

    from flextui.runtime.checkpoint import whole_weights
    from flextui.runtime.checkpointing import newest

    folder, meta = newest(args.checkpoint)
    weights = whole_weights(folder, meta)
    torch.save(weights, args.out)
    console.print(f"wrote {len(weights)} parameters of {folder} (step {meta.step}) to "
                  f"{args.out}", markup=False, highlight=False)
    return 0
