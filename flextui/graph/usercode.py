"""Running a user's code (a model file, a factory's module, ``model()``,
``example_inputs``, ``build``) so that nothing it does escapes as anything but one
clear error."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from flextui.errors import FlextuiError, ModelError


@contextlib.contextmanager
def user_code(what: str) -> Iterator[None]:
    """Run the user's code ``what`` names: whatever it raises becomes one ModelError
    naming ``what``; flextui's own errors pass as they are."""
    try:
        yield
    except FlextuiError:
        raise
    except Exception as exc:  # noqa: BLE001 (a user's code may raise anything)
        raise ModelError(f"{what} raised {type(exc).__name__}: {exc}"[:400]) from None
