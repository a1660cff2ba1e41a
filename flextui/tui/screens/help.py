"""The key map (``?`` or F1): every key of the screen it was opened from, and the app's."""

from __future__ import annotations

from typing import ClassVar

from rich.table import Table
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import Label, Static

#: how to use the key map itself, and what no row says: moving the focus, switching tabs
HOW_TO = ("esc (or ? or q) closes this; ctrl+p finds any action by name.\n"
          "tab and shift+tab move between the parts of a screen; on a row of tabs, "
          "← and → switch tabs.")


def section_name(screen: Screen) -> str:
    """What the key map calls ``screen``'s keys: its ``help_section`` ("replay" for the
    Search screen on a log), else its class's name ("search", "timeline"...)."""
    return getattr(screen, "help_section", None) or \
        type(screen).__name__.removesuffix("Screen").lower() or "screen"


def key_rows(screen: Screen) -> list[tuple[str, str, str]]:
    """(where, keys, what) for every described binding active on ``screen``; where is
    the screen's section name or "app", on the first row of each."""
    rows, seen = [], set()
    for node in (screen, screen.app):
        where = "app" if node is screen.app else section_name(screen)
        for binding in node.BINDINGS:
            b = binding if isinstance(binding, Binding) else Binding(*binding)
            if not b.description or (b.action, b.key) in seen:
                continue
            if node is screen and screen.check_action(b.action, ()) is False:
                continue
            seen.add((b.action, b.key))
            keys = ", ".join(screen.app.get_key_display(Binding(k.strip(), b.action))
                             for k in b.key.split(","))
            rows.append((where, keys, b.description))
            where = ""
    return rows


class HelpScreen(ModalScreen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,question_mark,f1,q", "dismiss", "Close"),
    ]

    def __init__(self, screen: Screen) -> None:
        super().__init__()
        self.rows = key_rows(screen)

    def compose(self) -> ComposeResult:
        table = Table(box=None, padding=(0, 2), show_header=True, header_style="bold")
        for col in ("", "keys", "action"):
            table.add_column(col)
        for where, keys, what in self.rows:
            table.add_row(where, keys, what)
        with VerticalScroll(id="help-dialog", classes="dialog"):
            yield Label("Keys", classes="dialog-title")
            yield Static(HOW_TO, id="help-how-to", classes="dialog-note")
            yield Static(table)
