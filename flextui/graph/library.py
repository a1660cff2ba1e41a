"""The model library: built-in models by name, or any model file by path.

A model module defines ``build(**options) -> OpGraph``, a ``DEFAULTS`` dict of its
options (``batch_size`` among them) and a one-line ``DESCRIPTION``. Option values
given as strings (from the command line) are converted to the type of the default.
It may define ``RANGES``, ``{option: (least, most)}`` for whole-number options; a value
outside its range is refused before ``build`` runs (every library model gives one for
each whole-number option; ``batch_size`` takes 1 to ``MAX_BATCH_SIZE`` unless narrowed).
"""

from __future__ import annotations

import importlib
import importlib.resources
import importlib.util
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from flextui.errors import FlextuiError, ModelError
from flextui.graph.graph import OpGraph
from flextui.limits import MAX_INTEGER, integer_problem

LIBRARY_PACKAGE = "flextui.library.models"
MAX_BATCH_SIZE = 1 << 20


@dataclass(frozen=True)
class ModelInfo:
    name: str
    description: str
    defaults: dict[str, Any]
    ranges: dict[str, tuple[int, int]]


def model_names() -> list[str]:
    root = importlib.resources.files(LIBRARY_PACKAGE)
    return sorted(p.name[:-3] for p in root.iterdir()
                  if p.name.endswith(".py") and not p.name.startswith("_"))


def _module(name: str) -> Any:
    """The model ``name`` names: a library module or model file (``build``,
    ``DEFAULTS``, ``DESCRIPTION``), or a PyTorch model made to look like one."""
    if name.endswith(".py") or "/" in name:
        path = Path(name)
        if not path.is_file():
            raise ModelError(f"model file {name} does not exist")
        spec = importlib.util.spec_from_file_location(f"flextui_user_model_{path.stem}", path)
        if spec is None or spec.loader is None:  # not a Python source file
            raise ModelError(f"model file {name} is not a Python file; give a .py file that "
                             "defines build(batch_size, **options)")
        module = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
        except Exception as exc:  # noqa: BLE001 (a user's model file may raise anything)
            raise ModelError(f"model file {name} failed to load: {exc!r}") from None
    elif name in model_names():
        module = importlib.import_module(f"{LIBRARY_PACKAGE}.{name}")
    elif name.startswith("torchvision:"):
        from flextui.graph.importer.source import torchvision_model

        return torchvision_model(name.partition(":")[2])
    elif ":" in name:
        return _factory(name)
    else:
        raise ModelError(f"unknown model {name!r:.80}; built-in models: {', '.join(model_names())} "
                         f"(or give the path of a model .py file, package.module:factory or "
                         "torchvision:NAME)")
    if not hasattr(module, "build"):
        from flextui.graph.importer.source import torch_model

        imported = torch_model(module, Path(name).stem, source=str(Path(name).resolve()))
        if imported is not None:
            return imported
    for attr in ("build", "DEFAULTS", "DESCRIPTION"):
        if not hasattr(module, attr):
            raise ModelError(f"model {name!r} defines no {attr}; a model file defines "
                             "model() and example_inputs(batch_size) (a PyTorch module), or "
                             "build(**options), DEFAULTS and DESCRIPTION (flextui's builder)")
    return module


def _factory(name: str) -> Any:
    """``package.module:factory``: a PyTorch module made by an importable factory, with
    ``example_inputs(batch_size)`` beside it."""
    from flextui.graph.importer.source import torch_model

    path, _, factory = name.partition(":")
    try:
        module = importlib.import_module(path)
    except Exception as exc:  # noqa: BLE001 (a user's module may raise anything on import)
        raise ModelError(f"model {name!r}: cannot import {path}: {exc!r:.200}") from None
    imported = torch_model(module, factory, factory, source=name)
    if imported is None:
        raise ModelError(f"model {name!r}: {path} needs {factory}() and "
                         "example_inputs(batch_size)")
    return imported


def pytorch_model(name: str) -> Any:
    """The ``TorchModel`` ``name`` names (a model file with ``model()``,
    ``package.module:factory`` or ``torchvision:NAME``); ModelError for any other."""
    from flextui.graph.importer.source import TorchModel

    found = _module(name)
    if not isinstance(found, TorchModel):
        raise ModelError(f"model {name!r:.80} is not a PyTorch model (no model() and "
                         "example_inputs)")
    return found


def model_info(name: str) -> ModelInfo:
    module = _module(name)
    return ModelInfo(Path(name).stem, module.DESCRIPTION, dict(module.DEFAULTS),
                     _ranges(module))


def _ranges(module: ModuleType) -> dict[str, tuple[int, int]]:
    """The model's option ranges, batch_size's included."""
    return {"batch_size": (1, MAX_BATCH_SIZE), **getattr(module, "RANGES", {})}


def load_model(name: str, **options: Any) -> OpGraph:
    """Build model ``name`` (a library name or a .py path) with ``options`` over its
    defaults."""
    module = _module(name)
    unknown = sorted(set(options) - set(module.DEFAULTS))
    if unknown:
        raise ModelError(f"model {name!r} has no option {', '.join(unknown):.80}; its options: "
                         f"{', '.join(f'{k}={v}' for k, v in module.DEFAULTS.items())}")
    merged = {**module.DEFAULTS,
              **{k: _convert(name, k, v, module.DEFAULTS[k]) for k, v in options.items()}}
    ranges = _ranges(module)
    for key, value in merged.items():
        _check_range(name, key, value, ranges.get(key))
    try:
        graph = module.build(**merged)
    except FlextuiError as exc:
        if getattr(module, "NAMES_ITSELF", False):  # an import's report, whole
            raise
        raise ModelError(f"model {name!r} with {merged!s:.300}: {exc!s:.300}") from None
    if not isinstance(graph, OpGraph):
        raise ModelError(f"model {name!r}: build() returned {type(graph).__name__}, not an OpGraph")
    graph.meta.setdefault("model", Path(name).stem)
    graph.meta.setdefault("options", merged)
    return graph


def _convert(model: str, key: str, value: Any, default: Any) -> Any:
    if not isinstance(value, str) or isinstance(default, str):
        return value
    try:
        if isinstance(default, bool):
            if value.lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError(value)
            return value.lower() in ("true", "1", "yes")
        if isinstance(default, int) and len(value.strip().lstrip("+-")) > 19:
            return MAX_INTEGER + 1   # more digits than any option takes: out of range
        return type(default)(value)
    except ValueError:
        raise ModelError(f"model {model!r}: option {key}={value!r:.40} is not a "
                         f"{type(default).__name__} (default {default!r})") from None


def _check_range(model: str, key: str, value: Any, bounds: tuple[int, int] | None) -> None:
    """Refuse a whole-number option outside its range (or past flextui's integers)."""
    if not isinstance(value, int) or isinstance(value, bool):
        return
    least, most = bounds or (-MAX_INTEGER, MAX_INTEGER)
    if not least <= value <= most:
        shown = f"={value:,}" if integer_problem(value) is None else " (a huge number)"
        raise ModelError(f"model {model!r}: option {key}{shown} is out of range; give "
                         f"{least:,} to {most:,}")

