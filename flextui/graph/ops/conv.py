"""Convolutional-network op types: conv2d, pool2d, batchnorm (NCHW layout)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from flextui.graph.dims import Dim, DimKind
from flextui.graph.ops.base import (
    OpType,
    ParamSpec,
    out_size,
    pair,
    register,
    require,
    window_range,
)
from flextui.graph.region import Region, region_volume

if TYPE_CHECKING:
    from flextui.graph.op import Op


def _check_nchw(op) -> None:
    require(len(op.inputs) == 1 and op.inputs[0].rank == 4, op,
            f"expects one NCHW input, got shapes {[t.shape for t in op.inputs]}")


def _image_space(shape, channel_kind: DimKind | None) -> tuple[Dim, ...]:
    n, c, h, w = shape
    return (Dim("sample", n, DimKind.SAMPLE), Dim("channel", c, channel_kind),
            Dim("height", h, DimKind.ATTRIBUTE), Dim("width", w, DimKind.ATTRIBUTE))


@register
class Conv2d(OpType):
    """2-D convolution, groups=1. Table 2: sample; height, width attribute; out-channel
    parameter."""

    name = "conv2d"
    backward_factor = 2.0

    def check(self, op):
        _check_nchw(op)
        kh, kw = pair(op.attrs["kernel"])
        h, w = op.inputs[0].shape[2:]
        require(kh <= h + 2 * pair(op.attrs["padding"])[0]
                and kw <= w + 2 * pair(op.attrs["padding"])[1], op,
                f"kernel {kh}x{kw} larger than padded input {h}x{w}")
        (ph, pw), (dh, dw) = pair(op.attrs["padding"]), pair(op.attrs["dilation"])
        reach = (dh * (kh - 1) + 1, dw * (kw - 1) + 1)
        require(ph < reach[0] and pw < reach[1], op,
                f"padding {ph}x{pw} reaches past the kernel's extent {reach[0]}x{reach[1]}: "
                "some outputs would read padding only; use less padding")

    def infer(self, op):
        n, _, h, w = op.inputs[0].shape
        (kh, kw), (sh, sw) = pair(op.attrs["kernel"]), pair(op.attrs["stride"])
        (ph, pw), (dh, dw) = pair(op.attrs["padding"]), pair(op.attrs["dilation"])
        return [((n, op.attrs["out_channels"], out_size(h, kh, sh, ph, dh),
                  out_size(w, kw, sw, pw, dw)), op.inputs[0].dtype)]

    def space(self, op):
        return _image_space(op.outputs[0].shape, DimKind.PARAMETER)

    def params(self, op):
        cin = op.inputs[0].shape[1]
        kh, kw = pair(op.attrs["kernel"])
        specs = [ParamSpec("weight", (op.attrs["out_channels"], cin, kh, kw),
                           (1, None, None, None))]
        if op.attrs["bias"]:
            specs.append(ParamSpec("bias", (op.attrs["out_channels"],), (1,)))
        return specs

    def input_regions(self, op: Op, region: Region) -> list[Region]:
        _, cin, h, w = op.inputs[0].shape
        (kh, kw), (sh, sw) = pair(op.attrs["kernel"]), pair(op.attrs["stride"])
        (ph, pw), (dh, dw) = pair(op.attrs["padding"]), pair(op.attrs["dilation"])
        return [(region[0], (0, cin), window_range(*region[2], h, kh, sh, ph, dh),
                 window_range(*region[3], w, kw, sw, pw, dw))]

    def flops(self, op, region):
        kh, kw = pair(op.attrs["kernel"])
        return 2.0 * region_volume(region) * op.inputs[0].shape[1] * kh * kw


@register
class Pool2d(OpType):
    """Max or average pooling; with ``output_size`` it is adaptive (global when 1x1).
    Table 2: sample; channel, height, width attribute."""

    name = "pool2d"

    def check(self, op):
        _check_nchw(op)
        require(op.attrs["mode"] in ("max", "avg"), op, "mode must be 'max' or 'avg'")
        if not op.attrs.get("output_size"):
            (kh, kw), (ph, pw) = pair(op.attrs["kernel"]), pair(op.attrs["padding"])
            require(ph <= kh // 2 and pw <= kw // 2, op,
                    f"padding {ph}x{pw} is more than half the kernel {kh}x{kw} (as torch "
                    "requires of pooling)")

    def infer(self, op):
        n, c, h, w = op.inputs[0].shape
        if op.attrs.get("output_size"):
            oh, ow = pair(op.attrs["output_size"])
        else:
            (kh, kw), (sh, sw) = pair(op.attrs["kernel"]), pair(op.attrs["stride"])
            ph, pw = pair(op.attrs["padding"])
            oh, ow = out_size(h, kh, sh, ph), out_size(w, kw, sw, pw)
        return [((n, c, oh, ow), op.inputs[0].dtype)]

    def space(self, op):
        return _image_space(op.outputs[0].shape, DimKind.ATTRIBUTE)

    def input_regions(self, op: Op, region: Region) -> list[Region]:
        _, _, h, w = op.inputs[0].shape
        if op.attrs.get("output_size"):
            oh, ow = pair(op.attrs["output_size"])
            rows, cols = _adaptive(*region[2], h, oh), _adaptive(*region[3], w, ow)
        else:
            (kh, kw), (sh, sw) = pair(op.attrs["kernel"]), pair(op.attrs["stride"])
            ph, pw = pair(op.attrs["padding"])
            rows = window_range(*region[2], h, kh, sh, ph)
            cols = window_range(*region[3], w, kw, sw, pw)
        return [(region[0], region[1], rows, cols)]

    def flops(self, op, region):
        """One comparison or addition per window element and output."""
        if op.attrs.get("output_size"):
            (h, w), (oh, ow) = op.inputs[0].shape[2:], op.outputs[0].shape[2:]
            window = -(-h // oh) * -(-w // ow)
        else:
            kh, kw = pair(op.attrs["kernel"])
            window = kh * kw
        return float(region_volume(region) * window)


def _adaptive(start: int, stop: int, size: int, out: int) -> tuple[int, int]:
    """Input rows read by adaptive-pool outputs [start, stop) (torch's bin edges)."""
    return (start * size) // out, -((-stop * size) // out)


@register
class BatchNorm(OpType):
    """Batch normalisation over NCHW or NC. Sample dim and channel (parameter) dim are
    parallel; statistics are per sample block, as in data-parallel training without
    synchronised batchnorm."""

    name = "batchnorm"
    backward_factor = 2.0

    def check(self, op):
        require(len(op.inputs) == 1 and op.inputs[0].rank in (2, 4), op,
                "expects one NC or NCHW input")

    def infer(self, op):
        return [(op.inputs[0].shape, op.inputs[0].dtype)]

    def space(self, op):
        shape = op.outputs[0].shape
        return (Dim("sample", shape[0], DimKind.SAMPLE),
                Dim("channel", shape[1], DimKind.PARAMETER)) + tuple(
            Dim(name, size, None) for name, size in zip(("height", "width"), shape[2:]))

    def params(self, op):
        c = op.inputs[0].shape[1]
        return [ParamSpec("weight", (c,), (1,)), ParamSpec("bias", (c,), (1,))]

    def input_regions(self, op, region):
        return [region]

    def flops(self, op, region):
        return 5.0 * region_volume(region)
