"""Reading the fields of a cluster file: each reader checks one value (its type, range or
unit) and on failure raises a :class:`~flextui.errors.ClusterError` naming the file and
the field, what was found and what to write instead."""

from __future__ import annotations

import difflib
import re
import reprlib
from typing import Any, Callable, NoReturn

from flextui.errors import ClusterError
from flextui.limits import NAME_CHARS, Limit, integer_problem
from flextui.machine.units import parse_bandwidth, parse_duration

__all__ = ["Fields", "what"]

LINK_KEYS = ("a", "b", "kind", "bandwidth", "latency", "duplex")

_NAME = re.compile(r"^[^\s]+$")
_SHORT = reprlib.Repr()
_SHORT.maxstring = _SHORT.maxlong = _SHORT.maxother = 60


def what(value: object) -> str:
    """``value`` as an error message shows it: its repr (cut at 60 characters, so a huge
    value cannot flood the message) and its TOML type."""
    names = {str: "a string", bool: "a boolean", int: "an integer", float: "a number",
             dict: "a table", list: "an array"}
    try:
        shown = _SHORT.repr(value)
    except ValueError:  # an integer of thousands of digits has no repr
        shown = "a number too large to show"
    return f"{shown} ({names.get(type(value), type(value).__name__)})"


class Fields:
    """The field readers for one cluster file; ``source`` names the file in every error."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, field: str, message: str) -> NoReturn:
        where = f"{self.source}: {field}: " if field else f"{self.source}: "
        raise ClusterError(where + message)

    def table(self, value: object, field: str) -> dict:
        if not isinstance(value, dict):
            self.fail(field, f"expected a table, found {what(value)}; write [{field}] "
                             f"followed by its keys")
        return value

    def check_keys(self, table: dict, allowed: tuple[str, ...], field: str) -> None:
        """Refuse keys not in ``allowed`` (usually typos), suggesting the closest one."""
        for key in table:
            if key not in allowed:
                shown = str(key)[:60]
                path = f"{field}.{shown}" if field else shown
                close = difflib.get_close_matches(shown, allowed, n=1)
                hint = f"did you mean {close[0]!r}? " if close else ""
                where = f"[{field}]" if field else "the top level"
                self.fail(path, f"unknown key {shown!r}; {hint}{where} takes "
                                f"{', '.join(allowed)}")

    def required(self, table: dict, key: str, field: str, example: str) -> Any:
        if key not in table:
            path = f"{field}.{key}" if field else key
            self.fail(path, f"missing required field {path!r}; add e.g. {example}")
        return table[key]

    def within(self, limit: Limit, found: int, field: str, counted: str = "") -> None:
        """Refuse ``found`` over one of flextui's limits; ``counted`` says what was counted."""
        problem = limit.problem(found)
        if problem is not None:
            self.fail(field, counted + problem)

    def string(self, value: object, field: str) -> str:
        """A non-empty string no longer than a name may be."""
        if not isinstance(value, str) or not value.strip():
            self.fail(field, f"expected a non-empty string, found {what(value)}")
        self.within(NAME_CHARS, len(value), field)
        return value

    def name(self, value: object, field: str) -> str:
        value = self.string(value, field)
        if not _NAME.match(value) or "->" in value:
            self.fail(field, f"{value!r} is not a valid name (no spaces, no '->')")
        return value

    def integer(self, value: object, field: str, minimum: int) -> int:
        if isinstance(value, int) and not isinstance(value, bool) and integer_problem(value):
            self.fail(field, integer_problem(value))
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            self.fail(field, f"expected a whole number >= {minimum}, found {what(value)}; "
                             f"write e.g. {field.rsplit('.', 1)[-1]} = {max(minimum, 4)}")
        return value

    def boolean(self, value: object, field: str) -> bool:
        if not isinstance(value, bool):
            self.fail(field, f"expected true or false, found {what(value)}")
        return value

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
            self.fail(field, integer_problem(result))
        return result

    def array_of_tables(self, value: object, field: str) -> list[dict]:
        if not isinstance(value, list):
            self.fail(field, f"expected an array of tables, found {what(value)}; "
                             f"write [[{field}]] blocks")
        for i, item in enumerate(value):
            if not isinstance(item, dict):
                self.fail(f"{field}[{i}]", f"expected a table, found {what(item)}")
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
