"""What the profile cache stores: the key a measured task time depends on and its entry,
and the measured optimizer updates (``cost.update``), records of their own.

Both validate and canonicalise themselves on construction, so a key or entry decoded
from an untrusted file is as sound as one built from an op. Fields are checked by
``FIELDS`` (the shared checks, raising ValueError for the file reader,
``flextui.cost.cache``, to word).
"""

from __future__ import annotations

import math
import numbers
import re
import time
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from functools import cached_property
from typing import TYPE_CHECKING, Any

import msgpack

from flextui.cost.optimizers import OptimizerKind
from flextui.fields import FieldReader
from flextui.graph.tensor import FLOAT_DTYPES

if TYPE_CHECKING:
    from flextui.graph import Op
    from flextui.graph.region import Region

INT_MIN, INT_MAX = -(2**63), 2**64 - 1   # what msgpack can hold
#: the checks of a cache's fields; the reader adds the file and the entry
FIELDS = FieldReader(error=ValueError)


def device_kind_slug(name: str) -> str:
    """A filesystem-safe name for a device kind: "NVIDIA H100 80GB HBM3" becomes
    "nvidia-h100-80gb-hbm3"; trademark marks such as "(R)" are dropped."""
    text = re.sub(r"\((r|tm|c)\)", " ", name.lower())
    slug = re.sub(r"[^a-z0-9]+", "-", text).strip("-")[:100].strip("-")
    return slug or "unknown-device"


def _freeze(value: Any, where: str) -> Any:
    """An attribute value in canonical, hashable form: sequences become tuples, maps
    become tuples of (name, value) pairs sorted by name (so they encode as lists)."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, numbers.Integral):
        if not INT_MIN <= int(value) <= INT_MAX:
            raise ValueError(f"attrs[{where!r}]: {value} does not fit in 64 bits")
        return int(value)
    if isinstance(value, numbers.Real):
        if not math.isfinite(value):
            raise ValueError(f"attrs[{where!r}]: {value} is not a finite number")
        return float(value)
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v, where) for v in value)
    if isinstance(value, Mapping):
        if not all(isinstance(k, str) for k in value):
            raise ValueError(f"attrs[{where!r}]: map keys must be strings")
        return tuple((k, _freeze(v, where)) for k, v in sorted(value.items()))
    raise ValueError(f"attrs[{where!r}]: a {type(value).__name__} cannot be part of a profile key")


def _thaw(value: Any) -> Any:
    return [_thaw(v) for v in value] if isinstance(value, tuple) else value


def canonical_attrs(attrs: Any) -> tuple[tuple[str, Any], ...]:
    """Op attributes (a map, or (name, value) pairs) as sorted pairs of frozen values."""
    if not isinstance(attrs, (Mapping, list, tuple)):
        raise ValueError(f"attrs: expected a map, got {type(attrs).__name__}")
    pairs = attrs.items() if isinstance(attrs, Mapping) else attrs
    if not all(isinstance(p, (list, tuple)) and len(p) == 2 and isinstance(p[0], str)
               for p in pairs):
        raise ValueError("attrs: expected a map of names (strings) to values")
    frozen = {name: _freeze(value, name) for name, value in pairs}
    if len(frozen) != len(pairs):
        raise ValueError("attrs: a name appears twice")
    return tuple(sorted(frozen.items()))


def _shapes(value: Any, name: str) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(FIELDS.integer(d, name, 0) for d in FIELDS.items(shape, name))
                 for shape in FIELDS.items(value, name))


_OP_ATTRS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _op_attrs(op: Op) -> tuple[tuple[str, Any], ...]:
    """``canonical_attrs(op.attrs)``, computed once per op."""
    attrs = _OP_ATTRS.get(op)
    if attrs is None:
        attrs = _OP_ATTRS[op] = canonical_attrs(op.attrs)
    return attrs


_ATTR_MAPS: dict[int, tuple[tuple, dict[str, Any]]] = {}


def _attrs_map(attrs: tuple[tuple[str, Any], ...]) -> dict[str, Any]:
    """Canonical attributes as the map they encode as, remembered for the very tuple
    (not an equal one: ``True == 1``, yet they encode apart); shared, do not modify."""
    found = _ATTR_MAPS.get(id(attrs))
    if found is None or found[0] is not attrs:
        if len(_ATTR_MAPS) > 4096:
            _ATTR_MAPS.clear()
        found = _ATTR_MAPS[id(attrs)] = (attrs, {name: _thaw(value) for name, value in attrs})
    return found[1]


@dataclass(frozen=True)
class ProfileKey:
    """What a measured time depends on. Constructing one canonicalises and validates it
    (attrs may be given as any map, shapes as lists); the cache is keyed by
    ``encoded``, its canonical msgpack encoding, so ``{"a": 1, "b": (2, 3)}`` and
    ``{"b": [2, 3], "a": 1}`` make the same key."""

    op_type: str
    attrs: tuple[tuple[str, Any], ...]
    input_shapes: tuple[tuple[int, ...], ...]
    param_shapes: tuple[tuple[int, ...], ...]
    output_shapes: tuple[tuple[int, ...], ...]
    dtype: str
    training: bool
    device_name: str
    torch_version: str
    math: str = ""   # float32 math on a GPU (``cost.mathmode``); encoded only when set

    def __post_init__(self) -> None:
        FIELDS.string(self.op_type, "op_type")
        object.__setattr__(self, "attrs", canonical_attrs(self.attrs))
        for name in ("input_shapes", "param_shapes", "output_shapes"):
            object.__setattr__(self, name, _shapes(getattr(self, name), name))
        FIELDS.choice(self.dtype, "dtype", FLOAT_DTYPES)
        FIELDS.boolean(self.training, "training")
        FIELDS.string(self.device_name, "device_name")
        FIELDS.string(self.torch_version, "torch_version")
        if self.math:
            FIELDS.string(self.math, "math")

    @classmethod
    def for_task(cls, op: Op, region: Region, dtype: str, training: bool, device_name: str,
                 torch_version: str, math: str = "") -> ProfileKey:
        """The key of computing block ``region`` of ``op``'s space. An op's attributes and
        shapes are well-formed already, so the attributes are canonicalised once per op
        and the shapes taken as they are (a search's tasks make thousands of keys)."""
        def shape(r: Region) -> tuple[int, ...]:
            return tuple(stop - start for start, stop in r)
        if dtype not in FLOAT_DTYPES or not isinstance(training, bool) or not device_name \
                or not torch_version:
            return cls(op.type, canonical_attrs(op.attrs), (), (), (), dtype, training,
                       device_name, torch_version, math)  # the checks say what is wrong
        key = object.__new__(cls)
        values = (op.type, _op_attrs(op), tuple(shape(r) for r in op.input_regions(region)),
                  tuple(shape(op.param_region(i, region)) for i in range(len(op.params))),
                  tuple(shape(r) for r in op.output_regions(region)),
                  dtype, training, device_name, torch_version, math)
        for name, value in zip(_FIELD_NAMES, values):
            object.__setattr__(key, name, value)
        return key

    @property
    def device_kind(self) -> str:
        return device_kind_slug(self.device_name)

    def to_map(self) -> dict[str, Any]:
        """The key as plain data, fields in declaration order (its canonical encoding);
        ``math`` only when set, so keys without it encode as before it existed."""
        return {"op_type": self.op_type, "attrs": _attrs_map(self.attrs),
                "input_shapes": [list(s) for s in self.input_shapes],
                "param_shapes": [list(s) for s in self.param_shapes],
                "output_shapes": [list(s) for s in self.output_shapes],
                "dtype": self.dtype, "training": self.training,
                "device_name": self.device_name, "torch_version": self.torch_version,
                **({"math": self.math} if self.math else {})}

    @cached_property
    def encoded(self) -> bytes:
        return msgpack.packb(self.to_map(), use_bin_type=True)

    @classmethod
    def from_encoded(cls, code: bytes) -> ProfileKey:
        """The key ``code`` encodes (``encoded``'s inverse); ValueError unless it is a
        valid key in its canonical encoding."""
        try:
            data = msgpack.unpackb(code, raw=False)
        except Exception as exc:  # noqa: BLE001 (any decoding failure of untrusted bytes)
            raise ValueError(f"not msgpack ({type(exc).__name__})") from None
        key = cls.from_map(data)
        if key.encoded != code:
            raise ValueError("not in canonical form")
        return key

    @classmethod
    def from_map(cls, data: Any) -> ProfileKey:
        math_given = isinstance(data, dict) and "math" in data
        FIELDS.exact_keys(data, _FIELD_NAMES if math_given else _FIELD_NAMES[:-1], "key")
        FIELDS.mapping(data["attrs"], "attrs")
        return cls(**data)


@dataclass(frozen=True)
class ProfileEntry:
    """Measured times of one key, in seconds: medians over ``repeats`` timed runs and
    their spread (e.g. the interquartile range). ``backward_s`` is None for inference;
    an ``oom`` entry records that the block could not run on the device (out of memory,
    or another error of the device on it: ``cost.profile``) and has no times."""

    forward_s: float | None
    backward_s: float | None
    forward_spread_s: float | None = None
    backward_spread_s: float | None = None
    repeats: int = 0
    peak_memory_bytes: int = 0
    oom: bool = False
    measured_at: float = field(default_factory=time.time)

    def __post_init__(self) -> None:
        for name in ("forward_s", "backward_s", "forward_spread_s", "backward_spread_s",
                     "measured_at"):
            value = getattr(self, name)
            if value is None and name != "measured_at":
                continue
            object.__setattr__(self, name, FIELDS.number(value, name, minimum=0))
        for name in ("repeats", "peak_memory_bytes"):
            FIELDS.integer(getattr(self, name), name, 0)
        FIELDS.boolean(self.oom, "oom")
        if self.oom and (self.forward_s is not None or self.backward_s is not None):
            raise ValueError("an out-of-memory entry has no times")
        if not self.oom and self.forward_s is None:
            raise ValueError("forward_s: required unless the block ran out of memory")
        for time_name, spread_name in (("forward_s", "forward_spread_s"),
                                       ("backward_s", "backward_spread_s")):
            if getattr(self, time_name) is None and getattr(self, spread_name) is not None:
                raise ValueError(f"{spread_name}: given without {time_name}")

    def to_map(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_map(cls, data: Any) -> ProfileEntry:
        FIELDS.exact_keys(data, _ENTRY_FIELD_NAMES, "entry")
        return cls(**data)


def check_pair(key: ProfileKey, entry: ProfileEntry) -> None:
    """Raise ValueError unless ``entry`` has a backward time exactly when ``key`` is a
    training key (an out-of-memory training entry has none)."""
    if not key.training and entry.backward_s is not None:
        raise ValueError("backward_s: an inference key has no backward time")
    if key.training and not entry.oom and entry.backward_s is None:
        raise ValueError("backward_s: a training key needs a backward time")


@dataclass(frozen=True, order=True)
class UpdateKey:
    """What a measured optimizer update depends on: ``optimizer``'s step as a rank runs
    it (``cost.update_steps``), over a parameter shard of ``shard_bytes`` in ``dtype``."""

    shard_bytes: int
    dtype: str
    device_name: str
    torch_version: str
    optimizer: OptimizerKind

    def __post_init__(self) -> None:
        FIELDS.integer(self.shard_bytes, "shard_bytes", 1)
        FIELDS.choice(self.dtype, "dtype", FLOAT_DTYPES)
        FIELDS.string(self.device_name, "device_name")
        FIELDS.string(self.torch_version, "torch_version")
        object.__setattr__(self, "optimizer", OptimizerKind(
            FIELDS.choice(self.optimizer, "optimizer", tuple(OptimizerKind))))

    @property
    def device_kind(self) -> str:
        return device_kind_slug(self.device_name)

    def to_map(self) -> dict[str, Any]:
        return {f.name: str(getattr(self, f.name)) if f.name == "optimizer"
                else getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_map(cls, data: Any, *, before_optimizers: bool = False) -> UpdateKey:
        """The key a cache file stores; ``before_optimizers``: a file from before keys
        named their optimizer (format version 2), whose updates are all SGD's."""
        if before_optimizers:
            FIELDS.exact_keys(data, _UPDATE_KEY_NAMES[:-1], "update key")
            return cls(**data, optimizer=OptimizerKind.SGD)
        FIELDS.exact_keys(data, _UPDATE_KEY_NAMES, "update key")
        return cls(**data)


@dataclass(frozen=True)
class UpdateEntry:
    """One measured update, in seconds: the median over ``repeats`` timed runs and their
    spread (the interquartile range)."""

    seconds: float
    spread_s: float = 0.0
    repeats: int = 0
    measured_at: float = field(default_factory=time.time)

    def __post_init__(self) -> None:
        for name in ("seconds", "spread_s", "measured_at"):
            object.__setattr__(self, name, FIELDS.number(getattr(self, name), name, minimum=0))
        FIELDS.integer(self.repeats, "repeats", 0)

    def to_map(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_map(cls, data: Any) -> UpdateEntry:
        FIELDS.exact_keys(data, _UPDATE_ENTRY_NAMES, "update")
        return cls(**data)


_FIELD_NAMES = tuple(f.name for f in fields(ProfileKey))
_ENTRY_FIELD_NAMES = tuple(f.name for f in fields(ProfileEntry))
_UPDATE_KEY_NAMES = tuple(f.name for f in fields(UpdateKey))
_UPDATE_ENTRY_NAMES = tuple(f.name for f in fields(UpdateEntry))
