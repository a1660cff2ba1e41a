"""The model library: built-in models by name, or a model the user names
(``graph.model_source``): a model file, ``package.module:factory``,
``torchvision:NAME`` or a Hugging Face model (``hf:NAME``, ``hf:CONFIG.json``:
``graph.hf_models``).

A builder model (every built-in one, or a model file) defines ``build(**options) ->
OpGraph``, a ``DEFAULTS`` dict of its options (``batch_size`` among them) and a one-line
``DESCRIPTION``. Option values given as strings (from the command line) are converted to
the type of the default. It may define ``RANGES``, ``{option: (least, most)}`` for
whole-number options; a value outside its range is refused before ``build`` runs (every
library model gives one for each whole-number option; ``batch_size`` takes 1 to
``MAX_BATCH_SIZE`` unless narrowed), and ``PAPER_BATCH_PER_DEVICE``, the batch on each
device its paper trains with (``--batch-per-device``; the paper's six models say it). A
PyTorch model (a file or factory with ``model()`` and ``example_inputs``,
``graph.importer.source``) takes ``batch_size`` and ``opaque``; a Hugging Face model its
config's sizes too (``graph.hf_models``).

A graph the library builds keeps the source it was built from (``OpGraph.source``):
what a launch runs the user's module from.
"""

from __future__ import annotations

import importlib
import importlib.resources
import linecache
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from flextui.errors import FlextuiError, ModelError
from flextui.graph.graph import OpGraph
from flextui.graph.hf_models import CONFIG_FILE_OPTIONS, FAMILIES, family_options
from flextui.graph.model_source import (
    FACTORY,
    HF_PREFIX,
    TORCHVISION_PREFIX,
    ModelSource,
    SourceKind,
)
from flextui.graph.usercode import user_code
from flextui.limits import MAX_INTEGER, integer_problem

if TYPE_CHECKING:
    from flextui.graph.importer.source import TorchModel

LIBRARY_PACKAGE = "flextui.library.models"
MAX_BATCH_SIZE = 1 << 20
#: the types a builder model's options may have (what a command line converts to)
OPTION_TYPES = (bool, int, float, str)


@dataclass(frozen=True)
class ModelInfo:
    name: str
    description: str
    defaults: dict[str, Any]
    ranges: dict[str, tuple[int, int]]
    #: the batch on each device the model's paper trains with, if it says
    paper_batch_per_device: int | None = None


@dataclass(frozen=True)
class _Model:
    """A model the library can build: what it says of itself, ``build(**options)`` (its
    errors name the model), and, if it is a PyTorch model, the one its options make
    (``pytorch(options)``)."""

    info: ModelInfo
    build: Callable[..., OpGraph]
    pytorch: Callable[[dict[str, Any]], TorchModel] | None = None


def model_names() -> list[str]:
    root = importlib.resources.files(LIBRARY_PACKAGE)
    return sorted(p.name[:-3] for p in root.iterdir()
                  if p.name.endswith(".py") and not p.name.startswith("_"))


def model_source(text: str, cwd: Path | None = None) -> ModelSource:
    """The source the user's ``text`` names: a built-in model, a model file (a ``.py``
    path or one with a directory part, made absolute against ``cwd`` and read now),
    ``torchvision:NAME`` or ``package.module:factory``."""
    text = text.strip()
    if text.startswith(HF_PREFIX):
        return ModelSource.hugging_face(text, cwd)
    if text.endswith(".py") or "/" in text:
        return ModelSource.read_file(text, cwd)
    if text in model_names():
        return ModelSource(SourceKind.LIBRARY, text)
    if text.startswith(TORCHVISION_PREFIX):
        return ModelSource(SourceKind.TORCHVISION, text.removeprefix(TORCHVISION_PREFIX))
    if FACTORY.fullmatch(text):
        return ModelSource(SourceKind.FACTORY, text)
    raise ModelError(f"unknown model {text!r:.80}; built-in models: {', '.join(model_names())} "
                     "(or give the path of a model .py file, package.module:factory, "
                     f"torchvision:NAME or hf:NAME, NAME one of {', '.join(FAMILIES)})")


def _typed(model: ModelSource | str) -> ModelSource:
    """A source as it is, or the one a caller's text names (the Python API's way in)."""
    return model if isinstance(model, ModelSource) else model_source(model)


def _model(source: ModelSource) -> _Model:
    """The model ``source`` names, loaded (a file from the bytes it carries). The
    importer, and so torch, is imported only for a PyTorch model."""
    if source.kind == SourceKind.LIBRARY:
        return _builder(importlib.import_module(f"{LIBRARY_PACKAGE}.{source.name}"), source)
    if source.kind == SourceKind.HF:
        return _hugging_face(source)
    if source.kind == SourceKind.FILE:
        module = _file_module(source)
        if not hasattr(module, "example_inputs"):
            return _builder(module, source)
    from flextui.graph.importer.source import torch_model, torchvision_model

    if source.kind == SourceKind.TORCHVISION:
        return _imported(torchvision_model(source.name))
    if source.kind == SourceKind.FILE:
        found = torch_model(module, source.label)
        return _builder(module, source) if found is None else _imported(found)
    path, _, factory = source.name.partition(":")
    with user_code(f"model {source.name!r}: importing {path}"):
        module = importlib.import_module(path)
    found = torch_model(module, factory, factory)
    if found is None:
        raise ModelError(f"model {source.name!r}: {path} needs {factory}() and "
                         "example_inputs(batch_size)")
    return _imported(found)


def _file_module(source: ModelSource) -> ModuleType:
    """The model file ``source`` carries, run from its bytes (never read again from its
    path, which another host may not have); its lines are kept for tracebacks."""
    path = source.name
    module = ModuleType(f"flextui_user_model_{source.label}")
    module.__file__ = path
    with user_code(f"model file {path}"):
        text = source.code.decode()
        linecache.cache[path] = (len(text), None, text.splitlines(keepends=True), path)
        exec(compile(source.code, path, "exec"), module.__dict__)
    return module


def _imported(model: TorchModel) -> _Model:
    return _Model(ModelInfo(model.name, model.description,
                            {"batch_size": model.batch_size, "opaque": False},
                            {"batch_size": (1, MAX_BATCH_SIZE)}), model.build,
                  lambda options: model)


def _hugging_face(source: ModelSource) -> _Model:
    """``hf:NAME`` or ``hf:CONFIG.json``: its options known without transformers, which
    only building it imports."""
    if source.carries_file:
        defaults = dict(CONFIG_FILE_OPTIONS)
        description = f"a Hugging Face model from {Path(source.name).name}"
    elif source.name in FAMILIES:
        defaults = family_options(source.name)
        description = FAMILIES[source.name].description
    else:
        raise ModelError(f"unknown Hugging Face model {source.text!r:.60}; flextui builds "
                         f"{', '.join(HF_PREFIX + n for n in FAMILIES)}, or hf:CONFIG.json")
    ranges = {k: (1, MAX_BATCH_SIZE if k == "batch_size" else 1 << 20)
              for k, v in defaults.items() if isinstance(v, int) and not isinstance(v, bool)}

    def pytorch(options: dict[str, Any]) -> TorchModel:
        from flextui.graph.importer.hf import hf_model
        return hf_model(source, options)

    def build(**options: Any) -> OpGraph:
        return pytorch(options).build(options["batch_size"], options["opaque"])
    return _Model(ModelInfo(source.label, description, defaults, ranges), build, pytorch)


def _builder(module: ModuleType, source: ModelSource) -> _Model:
    """A builder model (``build``, ``DEFAULTS``, ``DESCRIPTION``), its fields checked."""
    name = source.text
    for attr in ("build", "DEFAULTS", "DESCRIPTION"):
        if not hasattr(module, attr):
            raise ModelError(f"model {name!r} defines no {attr}; a model file defines "
                             "model() and example_inputs(batch_size) (a PyTorch module), or "
                             "build(**options), DEFAULTS and DESCRIPTION (flextui's builder)")
    defaults, description = module.DEFAULTS, module.DESCRIPTION
    if not isinstance(defaults, dict) or not all(
            isinstance(k, str) and isinstance(v, OPTION_TYPES) for k, v in defaults.items()):
        raise ModelError(f"model {name!r}: DEFAULTS must be a dict of option names to "
                         f"booleans, numbers or strings, found {defaults!r:.80}")
    if not isinstance(description, str) or not callable(module.build):
        raise ModelError(f"model {name!r}: DESCRIPTION must be a string and build a function")
    info = ModelInfo(source.label, description, dict(defaults), _ranges(module, name),
                     _paper_batch(module, name))

    def build(**options: Any) -> OpGraph:
        with user_code(f"model {name!r}: build()"):
            try:
                return module.build(**options)
            except FlextuiError as exc:
                raise ModelError(f"model {name!r} with {options!s:.300}: "
                                 f"{exc!s:.300}") from None
    return _Model(info, build)


def _paper_batch(module: ModuleType, name: str) -> int | None:
    """The model's ``PAPER_BATCH_PER_DEVICE``, if it gives one: a whole number, at least 1."""
    batch = getattr(module, "PAPER_BATCH_PER_DEVICE", None)
    if batch is not None and (not isinstance(batch, int) or isinstance(batch, bool)
                              or not 1 <= batch <= MAX_BATCH_SIZE):
        raise ModelError(f"model {name!r}: PAPER_BATCH_PER_DEVICE must be a whole number from "
                         f"1 to {MAX_BATCH_SIZE:,}, found {batch!r:.40}")
    return batch


def _ranges(module: ModuleType, name: str) -> dict[str, tuple[int, int]]:
    """The model's option ranges, batch_size's included; ModelError unless each is a
    pair of whole numbers, the least first, for one of its options."""
    ranges = getattr(module, "RANGES", {})
    good = isinstance(ranges, dict) and all(
        key in module.DEFAULTS and isinstance(pair, (tuple, list)) and len(pair) == 2
        and all(isinstance(n, int) and not isinstance(n, bool) for n in pair)
        and pair[0] <= pair[1] for key, pair in ranges.items())
    if not good:
        raise ModelError(f"model {name!r}: RANGES must map options of DEFAULTS to (least, "
                         f"most) whole numbers, least first; found {ranges!r:.80}")
    return {"batch_size": (1, MAX_BATCH_SIZE), **{k: (a, b) for k, (a, b) in ranges.items()}}


def pytorch_model(model: ModelSource | str,
                  options: dict[str, Any] | None = None) -> TorchModel:
    """The PyTorch model ``model`` names (a model file with ``model()``,
    ``package.module:factory``, ``torchvision:NAME`` or ``hf:...``) with ``options``
    over its defaults (a graph's ``meta["options"]``: a Hugging Face model's sizes);
    ModelError for any other."""
    source = _typed(model)
    found = _model(source)
    if found.pytorch is None:
        raise ModelError(f"model {source.text!r:.80} is not a PyTorch model (no model() and "
                         "example_inputs)")
    return found.pytorch(_options(source.text, found.info, options or {}))


def model_info(model: ModelSource | str) -> ModelInfo:
    return _model(_typed(model)).info


def load_model(model: ModelSource | str, **options: Any) -> OpGraph:
    """Build ``model`` (a source the user gave, or a library name or model path as
    text) with ``options`` over its defaults. The graph keeps its source."""
    source = _typed(model)
    name = source.text
    found = _model(source)
    merged = _options(name, found.info, options)
    graph = found.build(**merged)
    if not isinstance(graph, OpGraph):
        raise ModelError(f"model {name!r}: build() returned {type(graph).__name__}, not an OpGraph")
    graph.meta.setdefault("model", source.label)
    graph.meta.setdefault("options", merged)
    graph.source = source
    return graph


def _options(name: str, info: ModelInfo, options: dict[str, Any]) -> dict[str, Any]:
    """``options`` over the model's defaults, each converted and checked."""
    defaults = info.defaults
    unknown = sorted(set(options) - set(defaults))
    if unknown:
        raise ModelError(f"model {name!r} has no option {', '.join(unknown):.80}; its options: "
                         f"{', '.join(f'{k}={v}' for k, v in defaults.items())}")
    merged = {**defaults,
              **{k: _convert(name, k, v, defaults[k]) for k, v in options.items()}}
    for key, value in merged.items():
        _check_range(name, key, value, info.ranges.get(key))
    return merged


def with_source(graph: OpGraph, source: ModelSource | None) -> OpGraph:
    """``graph`` ready to run: as it is when it needs no source (its ops are flextui's
    own and its weights made from the seed) or has one, else the graph ``source`` (a
    model the user gave) builds with ``graph``'s options, which must be ``graph`` itself.
    ModelError says how to give a source, or that the one given builds another graph."""
    if not graph.imported or graph.source is not None:
        return graph
    if source is None or source.kind == SourceKind.LIBRARY:
        require_source(graph)
    assert source is not None  # require_source raised
    label = graph.meta.get("model", graph.name)
    options = graph.meta.get("options", {})
    built = load_model(source, **(options if isinstance(options, dict) else {}))
    if built.fingerprint != graph.fingerprint:
        raise ModelError(f"model {source.text!r:.200} does not build the graph of "
                         f"{label!r:.80} (fingerprint {built.fingerprint}, not "
                         f"{graph.fingerprint}): give the model it was made from")
    return built


def require_source(graph: OpGraph) -> None:
    """ModelError, saying how to give one, when ``graph`` needs a model source (it is
    imported from a PyTorch module) and has none (it was read from a file)."""
    if graph.imported and graph.source is None:
        label = graph.meta.get("model", graph.name)
        raise ModelError(
            f"model {label!r:.80} is a PyTorch model, whose code runs only from a model you "
            "give, never from a search log, plan or strategy: give its file (or "
            "package.module:factory, torchvision:NAME), e.g. flextui replay LOG --model "
            "FILE, or type it in the app's Setup model field")


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
