"""Where a model comes from, as the user gave it: a ``ModelSource``.

It is made once, in the process where the user typed it (``--model`` on the command
line, the model field of the app's Setup screen; ``graph.library.model_source``), and
carried from there: the library builds the graph from it, the graph keeps it
(``OpGraph.source``, never written out), a launch plan carries it to every rank. A
model file's path is made absolute where it was typed and its bytes are read there,
once: what is searched, launched and run on every host is those bytes (checked by
their sha256), never a file a rank finds at a path.

Nothing read from a file names code to run: a graph written to a search log, a
strategy or a launch plan's graph records no source, and a graph rebuilt from such
data has none until the user gives one that builds that very graph
(``graph.library.with_source``).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from flextui.errors import ModelError
from flextui.fields import FieldReader
from flextui.limits import TEXT_CHARS, Limit

#: a model file bigger than this is not Python someone wrote
MODEL_FILE_BYTES = Limit(16 * 2**20, "bytes", "in a model file",
                         "a model file defines the model; load its data from elsewhere")
#: a module's dotted name, and ``package.module:factory``
MODULE = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")
FACTORY = re.compile(MODULE.pattern + r":[A-Za-z_]\w*")
#: a built-in model's or torchvision model's name
NAME = re.compile(r"[A-Za-z_]\w*")
TORCHVISION_PREFIX = "torchvision:"
HF_PREFIX = "hf:"
#: a Hugging Face config file bigger than this is not a config
CONFIG_FILE_BYTES = Limit(1 << 20, "bytes", "in a Hugging Face config file",
                          "give the model's config.json")


class SourceKind(StrEnum):
    """What kind of thing a model source names."""

    LIBRARY = "library"          # a built-in model, by name
    FILE = "file"                # a model .py file (its bytes travel with it)
    FACTORY = "factory"          # package.module:factory, imported by name
    TORCHVISION = "torchvision"  # torchvision:NAME
    HF = "hf"                    # hf:NAME, or hf:CONFIG.json (its bytes travel with it)


@dataclass(frozen=True)
class ModelSource:
    """A model as the user named it. ``name`` is the built-in model's name, the model
    file's absolute path, ``package.module:factory``, torchvision's model name, or a
    Hugging Face model's name or config file's absolute path; a file's ``code`` is its
    bytes as read when it was given, ``sha256`` their hash."""

    kind: SourceKind
    name: str
    code: bytes = field(default=b"", repr=False)
    sha256: str = ""

    @classmethod
    def read_file(cls, text: str, cwd: Path | None = None) -> ModelSource:
        """The model file ``text`` names, its path made absolute against ``cwd`` (the
        current directory when None) and its bytes read now."""
        return cls._read(SourceKind.FILE, text, "model file", ".py", MODEL_FILE_BYTES, cwd)

    @classmethod
    def hugging_face(cls, text: str, cwd: Path | None = None) -> ModelSource:
        """``hf:NAME``, or ``hf:CONFIG.json``: the config file read now."""
        name = text.removeprefix(HF_PREFIX)
        if name.endswith(".json"):
            return cls._read(SourceKind.HF, name, "Hugging Face config file", ".json",
                             CONFIG_FILE_BYTES, cwd)
        if not NAME.fullmatch(name):
            raise ModelError(f"{text!r:.80} is not hf:NAME or hf:CONFIG.json")
        return cls(SourceKind.HF, name)

    @classmethod
    def _read(cls, kind: SourceKind, text: str, what: str, suffix: str, limit: Limit,
              cwd: Path | None) -> ModelSource:
        """The file ``text`` names (a ``suffix`` file of at most ``limit``), read now."""
        path = ((cwd or Path.cwd()) / Path(text).expanduser()).resolve()
        if not path.is_file():
            raise ModelError(f"{what} {text} does not exist" if not path.exists() else
                             f"{what} {text} is not a regular file")
        if path.suffix != suffix:
            kind_of = "Python" if suffix == ".py" else "JSON"
            raise ModelError(f"{what} {text} is not a {kind_of} file; " + (
                "give a .py file that defines model() and example_inputs(batch_size), or "
                "build(**options)" if suffix == ".py" else "give the model's config.json"))
        problem = limit.problem(path.stat().st_size)
        if problem is not None:
            raise ModelError(f"{what} {text}: {problem}")
        try:
            code = path.read_bytes()
        except OSError as exc:
            raise ModelError(f"cannot read {what} {text}: {exc.strerror or exc}") from None
        return cls(kind, str(path), code, hashlib.sha256(code).hexdigest())

    @property
    def carries_file(self) -> bool:
        """Whether the source is a file's bytes (a model file, a config file)."""
        return self.kind == SourceKind.FILE or (self.kind == SourceKind.HF and bool(self.sha256))

    @property
    def text(self) -> str:
        """The source as a person types it again: ``lenet``, ``/abs/model.py``,
        ``package.module:factory``, ``torchvision:resnet18``."""
        if self.kind == SourceKind.HF:
            return HF_PREFIX + self.name
        return TORCHVISION_PREFIX + self.name if self.kind == SourceKind.TORCHVISION \
            else self.name

    @property
    def label(self) -> str:
        """What the model is called: a file's stem (``hf:`` and a config file's), else
        the source as typed."""
        if self.kind == SourceKind.HF and self.carries_file:
            return HF_PREFIX + Path(self.name).stem
        return Path(self.name).stem if self.kind == SourceKind.FILE else self.text

    @property
    def module(self) -> str | None:
        """The module a rank imports by name to build the model (a factory's package
        module, torchvision), None when it needs none past flextui."""
        if self.kind == SourceKind.FACTORY:
            return self.name.partition(":")[0]
        if self.kind == SourceKind.HF:
            return "transformers"
        return "torchvision" if self.kind == SourceKind.TORCHVISION else None

    def to_dict(self, *, code: bool = True) -> dict[str, Any]:
        """The source as plain data: with ``code`` what a launch plan carries, without
        it what a run log records (a file's path and hash)."""
        data: dict[str, Any] = {"kind": str(self.kind), "name": self.name}
        if self.carries_file:
            data["sha256"] = self.sha256
            if code:
                data["code"] = self.code
        return data

    @classmethod
    def from_dict(cls, data: object, f: FieldReader, where: str = "model", *,
                  code: bool = True) -> ModelSource:
        """The source ``data`` (``to_dict(code=code)``) holds, checked: a file's bytes
        must have the hash given. Without ``code`` (what a run log records) a file's
        source has no bytes: it names what ran, and can run nothing."""
        body = f.mapping(data, where)
        kind = SourceKind(f.choice(body.get("kind"), f"{where}.kind", tuple(SourceKind)))
        carried = kind == SourceKind.FILE or (kind == SourceKind.HF and "sha256" in body)
        keys = ("kind", "name", "sha256", "code")[:4 if code else 3] \
            if carried else ("kind", "name")
        f.exact_keys(body, keys, where)
        name = f.string(body["name"], f"{where}.name", TEXT_CHARS)
        if not carried:
            pattern = FACTORY if kind == SourceKind.FACTORY else NAME
            if not pattern.fullmatch(name):
                f.fail(f"{where}.name", f"{name!r:.80} is not a {kind} model's name")
            return cls(kind, name)
        sha256 = f.string(body["sha256"], f"{where}.sha256")
        if not code:
            if not re.fullmatch(r"[0-9a-f]{64}", sha256):
                f.fail(f"{where}.sha256", f"{sha256!r:.80} is not a sha256")
            return cls(kind, name, b"", sha256)
        data_bytes = body["code"]
        if not isinstance(data_bytes, bytes):
            f.fail(f"{where}.code", "expected the model file's bytes")
        f.within(MODEL_FILE_BYTES if kind == SourceKind.FILE else CONFIG_FILE_BYTES,
                 len(data_bytes), f"{where}.code")
        if not Path(name).is_absolute() or hashlib.sha256(data_bytes).hexdigest() != sha256:
            f.fail(where, f"the bytes of model file {name!r:.200} do not match its sha256 "
                          "(or its path is not absolute)")
        return cls(kind, name, data_bytes, sha256)
