"""Modal dialogs: an error (the message, never a traceback), a question before something
starts, and opening a search log."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static

from flextui.fields import printable


class ErrorDialog(ModalScreen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,enter", "dismiss", "Close")]

    def __init__(self, title: str, message: str) -> None:
        super().__init__()
        self.heading, self.message = title, message

    def compose(self) -> ComposeResult:
        with Vertical(id="error-dialog", classes="dialog"):
            yield Label(self.heading, classes="dialog-title")
            # an error may quote data (a rank's last line): its control characters escaped
            yield Static(printable(self.message), id="error-message", markup=False)
            yield Button("Close", variant="error", id="close")

    def on_button_pressed(self) -> None:
        self.dismiss()


class ConfirmDialog(ModalScreen[bool]):
    """Asks before something starts: dismisses with True (the first button, focused:
    enter) or False (the second, or escape)."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "dismiss(False)", "Cancel")]

    def __init__(self, title: str, message: str, yes: str, no: str = "Cancel") -> None:
        super().__init__()
        self.heading, self.message, self.answers = title, message, (yes, no)

    def compose(self) -> ComposeResult:
        yes, no = self.answers
        with Vertical(id="confirm-dialog", classes="dialog"):
            yield Label(self.heading, classes="dialog-title")
            yield Static(self.message, id="confirm-message", markup=False)
            with Horizontal(id="confirm-buttons"):
                yield Button(yes, variant="warning", id="yes")
                yield Button(no, id="no")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")


class OpenLogDialog(ModalScreen[Path | None]):
    """Asks for a .ffsearch path; dismisses with it (or None on escape)."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel")]

    def compose(self) -> ComposeResult:
        with Vertical(id="open-dialog", classes="dialog"):
            yield Label("Replay a saved search", classes="dialog-title")
            yield Input(placeholder="path/to/run.ffsearch", id="log-path")
            yield Static("", id="open-error", markup=False)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        path = Path(event.value.strip()).expanduser()
        if not path.is_file():
            self.query_one("#open-error", Static).update(
                f"{path}: no such file; give the path of a .ffsearch log")
            return
        self.dismiss(path)

    def action_cancel(self) -> None:
        self.dismiss(None)
