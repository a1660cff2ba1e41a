"""Reading the fields of a cluster file: the shared field checks
(:class:`flextui.fields.FieldReader`) raising a :class:`~flextui.errors.ClusterError`
that names the file and the field, with what a cluster file adds: TOML's words for
tables and arrays, names, quantities with units and links."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from flextui.errors import ClusterError
from flextui.fields import FieldReader, describe
from flextui.limits import integer_problem
from flextui.machine.units import parse_bandwidth, parse_duration

__all__ = ["Fields"]

LINK_KEYS = ("a", "b", "kind", "bandwidth", "latency", "duplex")

_NAME = re.compile(r"^[^\s]+$")


class Fields(FieldReader):
    """The field readers for one cluster file; ``source`` names the file in every error."""

    def __init__(self, source: str) -> None:
        super().__init__(source, ClusterError)

    def table(self, value: object, field: str) -> dict:
        if not isinstance(value, dict):
            self.fail(field, f"expected a table, found {describe(value)}; write [{field}] "
                             f"followed by its keys")
        return value

    def name(self, value: object, field: str) -> str:
        value = self.string(value, field)
        if not _NAME.match(value) or "->" in value:
            self.fail(field, f"{value!r} is not a valid name (no spaces, no '->')")
        return value

    def integer(self, value: object, field: str, minimum: int | None = None,
                maximum: int | None = None, example: str = "") -> int:
        """A whole number; the error shows the key set to one (``count = 4``)."""
        example = example or f"{field.rsplit('.', 1)[-1]} = {max(minimum or 0, 4)}"
        return super().integer(value, field, minimum, maximum, example)

    def quantity(self, parse: Callable[[object], Any], value: object, field: str,
                 positive: bool = True) -> Any:
        """A quantity with a unit, read by one of :mod:`flextui.machine.units`' parsers."""
        try:
            result = parse(value)
        except ValueError as e:
            self.fail(field, str(e))
        if positive and result <= 0:
            self.fail(field, f"{value!r:.60} must be greater than zero")
        if isinstance(result, int) and integer_problem(result):
            self.fail(field, integer_problem(result) or "")
        return result

    def array_of_tables(self, value: object, field: str) -> list[dict]:
        if not isinstance(value, list):
            self.fail(field, f"expected an array of tables, found {describe(value)}; "
                             f"write [[{field}]] blocks")
        for i, item in enumerate(value):
            if not isinstance(item, dict):
                self.fail(f"{field}[{i}]", f"expected a table, found {describe(item)}")
        return value

    def link_props(self, table: dict, field: str) -> tuple[str, float, float]:
        """A link's kind, bandwidth (per direction) and latency."""
        kind = self.string(self.required(table, "kind", field, 'kind = "pcie"'), f"{field}.kind")
        bandwidth = self.quantity(parse_bandwidth,
                                  self.required(table, "bandwidth", field, 'bandwidth = "25 GB/s"'),
                                  f"{field}.bandwidth")
        latency = self.quantity(parse_duration,
                                self.required(table, "latency", field, 'latency = "2us"'),
                                f"{field}.latency", positive=False)
        return kind, bandwidth, latency

    def link_spec(self, table: dict, field: str) -> tuple[str, str, str, float, float, bool]:
        """One listed link: its ends a and b, kind, bandwidth, latency and duplex."""
        self.check_keys(table, LINK_KEYS, field)
        a = self.name(self.required(table, "a", field, 'a = "gpu0"'), f"{field}.a")
        b = self.name(self.required(table, "b", field, 'b = "cpu"'), f"{field}.b")
        kind, bandwidth, latency = self.link_props(table, field)
        duplex = self.boolean(table.get("duplex", True), f"{field}.duplex")
        return a, b, kind, bandwidth, latency, duplex
