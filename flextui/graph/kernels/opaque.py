"""The opaque op's kernel: the module's own exported nodes, run on the block's rows."""

from __future__ import annotations

from flextui.graph.kernels.base import Kernel, register


@register
class OpaqueKernel(Kernel):
    name = "opaque"

    def forward(self, op, region, inputs, params, seed):
        from flextui.graph.importer.opaque import region_program, run_nodes

        attrs = op.attrs
        nodes, known = region_program(attrs["module"], attrs["batch"])
        like = next((t for t in (*inputs, *params) if t.is_floating_point()), None)
        env = {name: known[name] if like is None else
               known[name].to(like.device, like.dtype if known[name].is_floating_point()
                              else known[name].dtype)
               for name in attrs["constants"]}
        env.update(zip(attrs["inputs"], inputs))
        env.update(zip(attrs["params"], params))
        return run_nodes([nodes[name] for name in attrs["nodes"]], env,
                         [name for name, _, _ in attrs["outputs"]])
