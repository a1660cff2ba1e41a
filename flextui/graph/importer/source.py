"""A user's PyTorch model as the library builds it: a ``.py`` file (or an importable
module, ``package.module:factory``) that defines ``model()`` (the ``nn.Module``) and
``example_inputs(batch_size)`` (a tuple of tensors whose first dim is the batch), and
optionally ``BATCH_SIZE``, ``DESCRIPTION`` and ``dataset(split="train")``, the data a
launch trains on (``runtime.data``)::

    import torch
    from torch import nn

    BATCH_SIZE = 64

    def model():
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(),
                             nn.Linear(256, 10))

    def example_inputs(batch_size):
        return (torch.randn(batch_size, 1, 28, 28),)
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from flextui.errors import ModelError
from flextui.graph.graph import OpGraph
from flextui.graph.importer.convert import import_checked
from flextui.graph.importer.exported import export
from flextui.graph.importer.opaque import program_of
from flextui.graph.kernels.opaque import RegionProgram
from flextui.graph.usercode import user_code

DEFAULT_BATCH_SIZE = 32
LOG = logging.getLogger("flextui.import")
DESCRIPTION = "a PyTorch module, imported through torch.export"


@dataclass(frozen=True)
class TorchModel:
    """A user's PyTorch model: ``make`` builds the ``nn.Module``, ``inputs(batch_size)``
    its example inputs, ``dataset(split)`` (None when it defines none) the map-style
    dataset a launch trains on. Its errors name the model and say all that is wrong
    (every unsupported op)."""

    name: str
    make: Callable[[], Any]
    inputs: Callable[[int], Any]
    description: str = DESCRIPTION
    batch_size: int = DEFAULT_BATCH_SIZE
    dataset: Callable[[str], Any] | None = None

    def module(self) -> Any:
        """A new ``nn.Module`` from the user's ``model()``."""
        with user_code(f"model {self.name!r}: model()"):
            return self.make()

    def example(self, batch_size: int) -> tuple[Any, ...]:
        """The example inputs at ``batch_size``: ModelError unless the first is a tensor
        of ``batch_size`` rows (its first dim is the batch)."""
        what = f"model {self.name!r}: example_inputs({batch_size})"
        with user_code(what):
            inputs = self.inputs(batch_size)
        inputs = inputs if isinstance(inputs, tuple) else (inputs,)
        rows = getattr(inputs[0], "shape", (None,))[0] if inputs else None
        if rows != batch_size:
            raise ModelError(f"{what} returned {rows} rows (the first dim of its first "
                             f"input), not {batch_size}: it must return batch_size rows")
        return inputs

    def build(self, batch_size: int, opaque: bool = False) -> OpGraph:
        """The graph at ``batch_size``; with ``opaque`` what cannot be mapped op by op
        becomes opaque ops rather than an error. The import is compared with the module
        (``verify``), at a smaller batch when ``batch_size`` is too large for that here;
        when no batch is small enough, a warning says it was not."""
        module = self.module()
        inputs = self.example(batch_size)
        with user_code(f"model {self.name!r}: its forward"):
            graph, verdict = import_checked(module, inputs, self.name, opaque=opaque)
        if verdict.smaller:
            module, inputs = self.module(), self.example(verdict.smaller)
            with user_code(f"model {self.name!r}: its forward"):
                verdict = import_checked(module, inputs, self.name, opaque=opaque)[1]
        if not verdict.checked:
            LOG.warning(f"model {self.name!r}: flextui did not compare the import with the "
                        f"module in float64 ({verdict.why}); `flextui launch --check` "
                        "compares a run with the module, at a small batch")
        return graph

    def program(self, batch_size: int) -> RegionProgram:
        """The module exported at ``batch_size``, as its opaque ops run it."""
        module = self.module()
        inputs = self.example(batch_size)
        with user_code(f"model {self.name!r}: its forward"):
            return program_of(export(module, inputs, self.name))


def torch_model(namespace: Any, name: str, factory: str = "model") -> TorchModel | None:
    """The user's model in ``namespace`` (a loaded file or module), None when it does
    not define ``factory`` and ``example_inputs``."""
    make, inputs = getattr(namespace, factory, None), getattr(namespace, "example_inputs", None)
    if not (callable(make) and callable(inputs)):
        return None
    batch = getattr(namespace, "BATCH_SIZE", DEFAULT_BATCH_SIZE)
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise ModelError(f"model {name!r}: BATCH_SIZE = {batch!r:.40} is not a whole "
                         "number >= 1")
    doc = (getattr(namespace, "__doc__", None) or "").strip().splitlines()
    description = getattr(namespace, "DESCRIPTION", doc[0] if doc else DESCRIPTION)
    if not isinstance(description, str):
        raise ModelError(f"model {name!r}: DESCRIPTION = {description!r:.40} is not a string")
    dataset = getattr(namespace, "dataset", None)
    if dataset is not None and not callable(dataset):
        raise ModelError(f"model {name!r}: dataset = {dataset!r:.40} is not a function; "
                         "define dataset(split=\"train\") returning a map-style Dataset")
    return TorchModel(name, make, inputs, description, batch, dataset)


#: torchvision's classification models take 224x224 images but these
IMAGE_SIZES = {"inception_v3": 299}
#: what a torchvision model is built with: no pretrained weights, and Inception-v3
#: without its auxiliary head (a second output)
BUILD_OPTIONS: dict[str, dict[str, Any]] = {"inception_v3": {"aux_logits": False,
                                                             "init_weights": False}}


def torchvision_model(arch: str) -> TorchModel:
    """``torchvision:NAME``: one of torchvision's classification models, untrained, on
    random images of its size."""
    try:
        import torch
        import torchvision  # type: ignore[import-not-found]  # optional
    except Exception as exc:  # noqa: BLE001 (missing, or a build that does not fit torch)
        raise ModelError(f"torchvision:{arch} needs torchvision, which cannot be imported "
                         f"here ({type(exc).__name__}: {str(exc)[:160]}); install the "
                         "torchvision release made for your torch") from None
    names = torchvision.models.list_models(module=torchvision.models)
    if arch not in names:
        raise ModelError(f"unknown torchvision model {arch!r:.60}; its classification "
                         f"models: {', '.join(names)}")
    size = IMAGE_SIZES.get(arch, 224)
    return TorchModel(
        arch, lambda: torchvision.models.get_model(arch, weights=None,
                                                   **BUILD_OPTIONS.get(arch, {})),
        lambda batch: (torch.randn(batch, 3, size, size),),
        f"torchvision {arch} (untrained), {size}x{size} images")
