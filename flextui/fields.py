"""Reading the fields of what people and other machines hand flextui, one way for every
format: cluster files, profile caches, communication calibrations, search logs, search
options and model options.

A :class:`FieldReader` holds where the data came from (``source``, a file's path) and
the error its checks raise. Each check takes a value and the field's name, and returns
the value (converted where it says so) or calls :meth:`FieldReader.fail`, which raises
one error naming the source, the field, what was found and what is expected. A check or
a limit added here holds for every format; a format adds only what is its own (a cluster
file's units, a search log's configs).

The checks come first on the hot path: a value of the expected type and range returns
at once, so a reader can check every field of a 100,000-record search log.
"""

from __future__ import annotations

import difflib
import math
import re
import reprlib
from collections.abc import Callable, Collection
from typing import Any, NoReturn

from flextui.errors import FieldError, FlextuiError
from flextui.limits import MAX_INTEGER, NAME_CHARS, Limit, integer_problem, path_problem

__all__ = ["FieldReader", "FormFields", "control_problem", "describe", "printable"]

MAX_PORT = 65_535
_SHORT = reprlib.Repr()
_SHORT.maxstring = _SHORT.maxlong = _SHORT.maxother = 60
_TYPE_NAMES = {str: "a string", bool: "a boolean", int: "an integer", float: "a number",
               dict: "a table", list: "an array", tuple: "an array", bytes: "bytes",
               type(None): "nothing"}


#: what a name never holds: C0 controls, DEL and C1 controls (ESC starts the terminal
#: escapes that set a window title, write the clipboard or clear the screen), line and
#: paragraph separators, and the bidirectional embeddings, overrides and isolates that
#: make text display in another order than it reads
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
#: the same, letting tabs and newlines pass: multi-line text (a description)
_CONTROL_IN_TEXT = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029"
                              "\u202a-\u202e\u2066-\u2069]")


def control_problem(text: str, lines: bool = False) -> str | None:
    """None when ``text`` holds no control character (with ``lines``: none but tabs and
    newlines), else what is wrong: the first one, as an escape, and where it is."""
    found = (_CONTROL_IN_TEXT if lines else _CONTROL).search(text)
    if found is None:
        return None
    return (f"holds the control character {found.group()!r} at character "
            f"{found.start() + 1:,}; write it without control characters (terminal "
            "escapes and bidirectional overrides are refused)")


def printable(text: str) -> str:
    """``text`` as a terminal may show it: each control character but tabs and newlines
    written as its escape (``\\x1b``), the rest as it is."""
    return _CONTROL_IN_TEXT.sub(lambda m: repr(m.group())[1:-1], text)


def describe(value: object) -> str:
    """``value`` as an error message shows it: its repr (cut at 60 characters, so a huge
    value cannot flood the message) and its type."""
    try:
        shown = _SHORT.repr(value)
    except ValueError:  # an integer of thousands of digits has no repr
        shown = "a number too large to show"
    return f"{shown} ({_TYPE_NAMES.get(type(value), type(value).__name__)})"


class FieldReader:
    """The field checks for one input. ``source`` names it in every error (empty when
    the caller adds it); ``error`` is the exception raised, built from the message."""

    #: how a problem starts: "nodes.count: expected a whole number..."
    expected = "expected"

    def __init__(self, source: str = "",
                 error: Callable[[str], Exception] = FlextuiError) -> None:
        self.source, self.error = source, error

    def fail(self, field: str, problem: str) -> NoReturn:
        """Raise this reader's error: ``source: field: problem``, printable (a field's
        path may hold a key as the file wrote it)."""
        where = ": ".join(part for part in (self.source, field) if part)
        raise self.error(printable(f"{where}: {problem}" if where else problem))

    # -- shapes ------------------------------------------------------------------------

    def mapping(self, value: object, field: str) -> dict:
        if type(value) is not dict:
            self.fail(field, f"{self.expected} a map, found {describe(value)}")
        return value

    def items(self, value: object, field: str, length: int | None = None) -> list:
        """A list (or a tuple, as a list), of ``length`` items if given."""
        if type(value) is not list:
            if not isinstance(value, tuple):
                self.fail(field, f"{self.expected} a list, found {describe(value)}")
            value = list(value)
        if length is not None and len(value) != length:
            self.fail(field, f"{self.expected} a list of {length} items, found {len(value)}")
        return value

    def check_keys(self, table: dict, allowed: Collection[str], field: str) -> None:
        """Refuse keys not in ``allowed`` (usually typos), suggesting the closest one."""
        for key in table:
            if key not in allowed:
                shown = str(key)[:60]
                path = f"{field}.{printable(shown)}" if field else printable(shown)
                close = difflib.get_close_matches(shown, [str(a) for a in allowed], n=1)
                hint = f"did you mean {close[0]!r}? " if close else ""
                where = f"[{field}]" if field else "the top level"
                self.fail(path, f"unknown key {shown!r}; {hint}{where} takes "
                                f"{', '.join(allowed)}")

    def exact_keys(self, table: object, names: Collection[str], field: str) -> dict:
        """A map with exactly the keys ``names``: each missing and unknown one is named."""
        table = self.mapping(table, field)
        missing = [n for n in names if n not in table]
        unknown = [str(k)[:40] for k in table if k not in names]
        if missing or unknown:
            self.fail(field, "; ".join(part for part in (
                missing and f"missing {', '.join(missing)}",
                unknown and f"unknown {', '.join(map(repr, unknown[:10]))}") if part))
        return table

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

    # -- scalars -----------------------------------------------------------------------

    def string(self, value: object, field: str, limit: Limit | None = NAME_CHARS,
               empty: bool = False, lines: bool = False, raw: bool | None = None) -> str:
        """A string within ``limit`` (a name's length unless told; None: any length),
        not empty or blank unless ``empty``, with no control character: none at all in
        a name, tabs and newlines only with ``lines`` (a description). ``raw`` takes any
        characters, text kept as written and escaped where it is shown (``printable``):
        the default for a string of any length (a process's output, an error message)."""
        if raw is None:
            raw = limit is None
        if type(value) is str and (empty or value) and (limit is None
                                                         or len(value) <= limit.value) \
                and (raw or not (_CONTROL_IN_TEXT if lines else _CONTROL).search(value)):
            return value
        if not isinstance(value, str) or not (empty or value.strip()):
            kind = "a string" if empty else "a non-empty string"
            self.fail(field, f"{self.expected} {kind}, found {describe(value)}")
        if limit is not None:
            self.within(limit, len(value), field)
        problem = None if raw else control_problem(value, lines)
        if problem is not None:
            self.fail(field, f"{_SHORT.repr(value)} {problem}")
        return value

    def integer(self, value: object, field: str, minimum: int | None = None,
                maximum: int | None = None, example: str = "") -> int:
        """A whole number (never a bool) from ``minimum`` to ``maximum`` and within
        flextui's integers; ``example`` is what to write instead, for people."""
        if type(value) is int and (minimum is None or value >= minimum) \
                and value <= (MAX_INTEGER if maximum is None else maximum) \
                and value >= -MAX_INTEGER:
            return value
        if isinstance(value, int) and not isinstance(value, bool) and integer_problem(value):
            self.fail(field, integer_problem(value) or "")
        hint = f"; write e.g. {example}" if example else ""
        if not isinstance(value, int) or isinstance(value, bool) \
                or (minimum is not None and value < minimum):
            at_least = f" >= {minimum}" if minimum is not None else ""
            self.fail(field, f"{self.expected} a whole number{at_least}, found "
                             f"{describe(value)}{hint}")
        self.fail(field, f"{self.expected} a whole number <= {maximum:,}, found {value:,}{hint}")

    def number(self, value: object, field: str, minimum: float | None = None,
               maximum: float | None = None, finite: bool = True) -> float:
        """A number (an int becomes a float) from ``minimum`` to ``maximum``; with
        ``finite`` off infinities pass (a cost that is infinite by rule), never NaN."""
        if type(value) is not float:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                self.fail(field, f"{self.expected} a number, found {describe(value)}")
            if isinstance(value, int) and integer_problem(value):
                self.fail(field, integer_problem(value) or "")
            value = float(value)
        if math.isnan(value) or (finite and math.isinf(value)):
            self.fail(field, f"{self.expected} a finite number, found {value!r}")
        if minimum is not None and not value >= minimum:
            self.fail(field, f"{self.expected} a number >= {minimum:g}, found {value!r:.40}")
        if maximum is not None and not value <= maximum:
            self.fail(field, f"{self.expected} a number <= {maximum:g}, found {value!r:.40}")
        return value

    def path(self, value: object, field: str) -> str:
        """A name or path a person typed (a cluster, a strategy, a file): a non-empty
        string that can name a file, with no control character (it is shown back: in an
        error, as where something was written), checked before any file is looked at."""
        text = self.string(value, field, limit=None, raw=False)
        problem = path_problem(text)
        if problem is not None:
            self.fail(field, problem)
        return text

    def port(self, value: object, field: str) -> int:
        """A TCP port: a whole number from 1 to 65535."""
        return self.integer(value, field, 1, MAX_PORT, example="29500")

    def choice(self, value: object, field: str, choices: Collection[str]) -> str:
        """One of ``choices`` (names of a closed set, such as an enum's)."""
        if not isinstance(value, str) or value not in choices:
            self.fail(field, f"{self.expected} one of {', '.join(choices)}, found "
                             f"{describe(value)}")
        return value

    def boolean(self, value: object, field: str) -> bool:
        if not isinstance(value, bool):
            self.fail(field, f"{self.expected} true or false, found {describe(value)}")
        return value


class FormFields(FieldReader):
    """The checks with the errors a form shows next to its field and the command line
    names by its flag (:class:`~flextui.errors.FieldError`): "workers must be a whole
    number >= 1, found 0"."""

    expected = "must be"

    def fail(self, field: str, problem: str) -> NoReturn:
        raise FieldError(field, problem)
