"""Single keys are commands; typed text is not. Outside a text field, a screen's letters
act at once (a text field takes its own keys), so a word typed where no field has focus
would run whatever its letters are bound to: "expert" would profile (``p``) on Setup.
:class:`KeyScreen` tells typing from commands by what was pressed and when:

- a printable key that no binding of the screen takes is typing; for
  :data:`TYPING_GAP_S` after it, no key runs anything (the screen says once that what
  was typed went nowhere), ``enter`` included;
- a key bound to an action that starts work (a search, a profile, a launch: the screen's
  :attr:`~KeyScreen.STARTS_WORK`) runs it only when no key follows within
  :data:`TYPING_GAP_S`: any key that does makes both typing.

Keys with a modifier (``ctrl+s``) and clicks act at once: they are never typed by
mistake. Other bound keys act at once, repeated as fast as one likes (``n n n``)."""

from __future__ import annotations

import math
import time
from functools import partial
from typing import ClassVar

from textual import events
from textual.binding import ActiveBinding
from textual.screen import Screen
from textual.timer import Timer

#: keys closer together than this are one burst of typing
TYPING_GAP_S = 0.5


class KeyScreen(Screen):
    #: the actions that start work: a bare key runs one once it has been alone
    STARTS_WORK: ClassVar[frozenset[str]] = frozenset()

    def __init__(self) -> None:
        super().__init__()
        self._typed_at = -math.inf       # when a key no binding takes was last pressed
        self._waiting: Timer | None = None   # a key that starts work, waiting to be alone
        self._told = False               # the screen said typing goes nowhere (this burst)

    def on_key(self, event: events.Key) -> None:
        """A key that no widget took (a text field takes the text typed in it)."""
        if not event.is_printable and event.key != "enter":
            return
        now = time.monotonic()
        bound = self.active_bindings.get(event.key)
        if self._waiting is not None:    # a key right after a work key: both typed
            self._waiting.stop()
            self._waiting = None
            self._typed_at = now
        if bound is None and event.key != "enter":
            self._typed_at = now
        if now - self._typed_at < TYPING_GAP_S:
            event.stop()                 # no binding sees it
            self._tell()
            return
        self._told = False
        if bound is not None and bound.binding.action in self.STARTS_WORK:
            event.stop()
            self._waiting = self.set_timer(TYPING_GAP_S, partial(self._run_alone, bound))

    async def _run_alone(self, bound: ActiveBinding) -> None:
        self._waiting = None
        if self.is_current:
            await self.app.run_action(bound.binding.action, bound.node)

    def _tell(self) -> None:
        if not self._told:
            self._told = True
            self.notify("Typed text goes nowhere here (no text field has focus), and runs "
                        "nothing: a key acts when pressed on its own; tab moves to a field.",
                        timeout=5)
