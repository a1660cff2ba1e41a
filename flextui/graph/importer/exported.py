"""``torch.export`` of a user's module, its failures said plainly, and where a node of
the exported graph came from (its module path and the user's source line)."""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flextui.errors import GraphError

if TYPE_CHECKING:
    from torch.export import ExportedProgram
    from torch.fx import Node

_FRAME = re.compile(r'File "([^"]+)", line (\d+)')


def export(module: Any, example_inputs: tuple[Any, ...], name: str) -> ExportedProgram:
    """``torch.export.export`` without decompositions; GraphError when it cannot trace
    (data-dependent control flow, say), with torch.export's own first line."""
    import torch

    if not isinstance(module, torch.nn.Module):
        raise GraphError(f"model {name!r}: model() must return a torch.nn.Module, found "
                         f"{type(module).__name__}")
    # torch logs a traceback of its own when an input's shape does not fit; the message
    # below says it once
    fake = logging.getLogger("torch._subclasses.fake_tensor")
    level = fake.level
    fake.setLevel(logging.CRITICAL)
    try:
        return torch.export.export(module, tuple(example_inputs))
    except Exception as exc:  # noqa: BLE001 (torch.export raises many kinds)
        said = next((line.strip() for line in str(exc).splitlines() if line.strip()),
                    type(exc).__name__)
        raise GraphError(f"model {name!r}: torch.export cannot trace it: {said[:300]} (see "
                         "https://pytorch.org/docs/stable/export.html: data-dependent "
                         "control flow needs torch.cond)") from None
    finally:
        fake.setLevel(level)


@contextlib.contextmanager
def cache_said(module: Any, name: str) -> Iterator[None]:
    """A refusal of a Hugging Face transformers model whose ``config.use_cache`` is on
    says that first, in plain words: its forward then returns a key/value cache (for
    generation), which torch.export cannot return and a training step does not use."""
    try:
        yield
    except GraphError as exc:
        config = getattr(module, "config", None)
        if not getattr(config, "use_cache", False) or \
                not type(module).__module__.startswith("transformers."):
            raise
        raise GraphError(
            f"model {name!r} is a Hugging Face transformers model with use_cache on: its "
            "forward returns a key/value cache for generation, which training does not "
            "use; build it with the cache off (model.config.use_cache = False in model(), "
            f"or use_cache=False in its config). What failed: {str(exc).splitlines()[0]:.160}"
            ) from None


def module_path(node: Node) -> tuple[str, bool]:
    """The path of the innermost module that ran ``node`` ("layer1.0.conv1", "" at the
    top level), and whether that module is one of torch.nn's own (a layer, whose op
    takes its name, rather than a block of the user's that runs several)."""
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return "", False
    path = list(stack.values())[-1][0]
    return str(path).removeprefix("L['self']."), module_type(node).startswith(
        "torch.nn.modules.")


def module_type(node: Node) -> str:
    """The qualified class name of the innermost module that ran ``node`` ("" at the top
    level)."""
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return ""
    kind = list(stack.values())[-1][1]
    return kind if isinstance(kind, str) else f"{kind.__module__}.{kind.__qualname__}"


def source_line(node: Node) -> str:
    """The user's line that made ``node``: the innermost frame outside torch."""
    import torch

    torch_dir = str(Path(torch.__file__).parent)
    frames = _FRAME.findall(node.meta.get("stack_trace") or "")
    mine = [(f, n) for f, n in frames if not f.startswith(torch_dir)]
    return f"{mine[-1][0]}:{mine[-1][1]}" if mine else ""


def target_name(target: Any) -> str:
    """An ATen overload as ``aten.conv2d.default``, a Python function by its name
    (``getitem``)."""
    text = str(target)
    return text if text.startswith("aten.") else getattr(target, "__name__", text)
