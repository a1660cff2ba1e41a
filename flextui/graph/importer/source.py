"""A user's PyTorch model as the library builds it: a ``.py`` file (or an importable
module, ``package.module:factory``) that defines ``model()`` (the ``nn.Module``) and
``example_inputs(batch_size)`` (a tuple of tensors whose first dim is the batch), and
optionally ``BATCH_SIZE`` and ``DESCRIPTION``::

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

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from flextui.errors import FlextuiError, ModelError
from flextui.graph.graph import OpGraph
from flextui.graph.importer.convert import import_module

DEFAULT_BATCH_SIZE = 32


@dataclass
class TorchModel:
    """What the library needs of a model (``build``, ``DEFAULTS``, ``DESCRIPTION``),
    made from a user's ``model()`` and ``example_inputs(batch_size)``."""

    name: str
    make: Callable[[], Any]
    inputs: Callable[[int], Any]
    #: how to name it again, in another process: the file's absolute path,
    #: ``package.module:factory`` or ``torchvision:NAME``
    source: str
    DESCRIPTION: str = "a PyTorch module, imported through torch.export"
    DEFAULTS: dict[str, Any] = field(default_factory=lambda: {"batch_size": DEFAULT_BATCH_SIZE,
                                                               "opaque": False})
    #: its errors name the model and say all that is wrong (every unsupported op): the
    #: library passes them on as they are
    NAMES_ITSELF = True

    def build(self, batch_size: int, opaque: bool = False) -> OpGraph:
        """The graph at ``batch_size``; with ``opaque`` what cannot be mapped op by op
        becomes opaque ops rather than an error."""
        module = _call(self.make, f"model {self.name!r}: model()")
        inputs = _call(lambda: self.inputs(batch_size),
                       f"model {self.name!r}: example_inputs({batch_size})")
        inputs = inputs if isinstance(inputs, tuple) else (inputs,)
        graph = import_module(module, inputs, self.name,
                              opaque_source=self.source if opaque else None)
        graph.meta["module"] = self.source
        return graph


def torch_model(namespace: Any, name: str, factory: str = "model", *,
                source: str) -> TorchModel | None:
    """The user's model in ``namespace`` (a loaded file or module, named again by
    ``source``), None when it does not define ``factory`` and ``example_inputs``."""
    make, inputs = getattr(namespace, factory, None), getattr(namespace, "example_inputs", None)
    if not (callable(make) and callable(inputs)):
        return None
    batch = getattr(namespace, "BATCH_SIZE", DEFAULT_BATCH_SIZE)
    doc = (getattr(namespace, "__doc__", None) or "").strip().splitlines()
    description = getattr(namespace, "DESCRIPTION", doc[0] if doc else TorchModel.DESCRIPTION)
    return TorchModel(name, make, inputs, source, str(description),
                      {"batch_size": batch, "opaque": False})


def _call(fn: Callable[[], Any], what: str) -> Any:
    try:
        return fn()
    except FlextuiError:
        raise
    except Exception as exc:  # noqa: BLE001 (a user's code may raise anything)
        raise ModelError(f"{what} raised {type(exc).__name__}: {exc}"[:400]) from None


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
        lambda batch: (torch.randn(batch, 3, size, size),), f"torchvision:{arch}",
        f"torchvision {arch} (untrained), {size}x{size} images")
