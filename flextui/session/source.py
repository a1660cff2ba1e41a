"""What a display reads from a search: a live one (``LiveSearch``) and one played back
from its log (``Playback``) alike."""

from __future__ import annotations

from typing import Protocol

from flextui.session.search_watch import SearchView


class SearchSource(Protocol):
    """A search a display polls: ``view()`` is the latest frame, cheap enough to call a
    few times a second from a UI thread; nothing is pushed to the display."""

    def view(self) -> SearchView: ...
