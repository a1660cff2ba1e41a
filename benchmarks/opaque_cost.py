"""How honest an opaque op's cost is: LSTM classifiers imported with ``--opaque`` (the
importer cannot map ``nn.LSTM`` op by op, so each becomes one opaque op), their FLOPs as
counted at import against a hand count of the LSTM's matrix products, and the analytic
model's forward and backward times of the op's whole-batch task against the times
``flextui profile`` measures on this machine's CPU (one thread), beside the same figures
for a mapped op of the same shape (a linear layer doing the LSTM's input products over
all its steps at once): the analytic model's CPU peak is an estimate, so how far the
mapped op is off says how much of the opaque op's ratio is the device's figures.

    python benchmarks/opaque_cost.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import tempfile

import torch
from torch import nn

from flextui.cost.localdevice import resolve_device
from flextui.cost.profile import cpu_threads, prepare_profile
from flextui.graph.importer.convert import import_module

#: (batch, steps, input width, hidden width, layers)
SIZES = [(16, 20, 64, 128, 2), (32, 40, 256, 256, 1), (64, 40, 512, 512, 2)]


class Classifier(nn.Module):
    def __init__(self, width: int, hidden: int, layers: int) -> None:
        super().__init__()
        self.lstm = nn.LSTM(width, hidden, num_layers=layers, batch_first=True)
        self.fc = nn.Linear(hidden, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(x)
        return self.fc(out[:, -1])


def hand_count(batch: int, steps: int, width: int, hidden: int, layers: int) -> int:
    """The LSTM's matrix products: per step and layer, x W_ih^T and h W_hh^T, each of the
    four gates' width (a multiply-add counts 2)."""
    per_step = sum(2 * batch * (width if layer == 0 else hidden) * 4 * hidden
                   + 2 * batch * hidden * 4 * hidden for layer in range(layers))
    return per_step * steps


def profiled(module: nn.Module, example: torch.Tensor, op_type: str, local, repeats: int):
    """The graph's op of ``op_type`` (the one) and its measured vs analytic comparison."""
    graph = import_module(module, (example,), "bench", opaque=True)
    (op,) = [op for op in graph.ops if op.type == op_type]
    with tempfile.TemporaryDirectory() as directory, cpu_threads(1):
        run = prepare_profile(graph, 1, device=local, profiles=directory)
        run.run(warmup=2, repeats=repeats)
        (row,) = [r for r in run.comparison() if r.op_type == op_type]
    return op, row


def ratios(row) -> str:
    return (f"{row.measured_forward_s * 1e3:8.2f}/{row.analytic_forward_s * 1e3:.2f} ms "
            f"{row.forward_ratio:.2f}x {row.measured_backward_s * 1e3:8.2f}/"
            f"{row.analytic_backward_s * 1e3:.2f} ms {row.backward_ratio:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    local = resolve_device("cpu")
    print(f"on {local.name}; measured/analytic time of each op's whole-batch task, forward "
          "then backward")
    for size in SIZES:
        batch, steps, width, hidden, layers = size
        torch.manual_seed(0)
        op, row = profiled(Classifier(width, hidden, layers), torch.randn(batch, steps, width),
                           "opaque", local, args.repeats)
        print(f"LSTM {size}: {op.attrs['flops']:,.0f} FLOPs counted, "
              f"{hand_count(*size):,} by hand", flush=True)
        print(f"  opaque LSTM   {ratios(row)}", flush=True)
        _, row = profiled(nn.Sequential(nn.Linear(width, 4 * hidden), nn.Flatten()),
                          torch.randn(batch * steps, width), "linear", local, args.repeats)
        print(f"  mapped linear {ratios(row)}", flush=True)


if __name__ == "__main__":
    main()
