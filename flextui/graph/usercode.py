"""Running a user's code (a model file, a factory's module, ``model()``,
``example_inputs``, ``build``) so that nothing it does escapes as anything but one
clear error."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

from flextui.errors import FlextuiError, ModelError


@contextlib.contextmanager
def user_code(what: str) -> Iterator[None]:
    """Run the user's code ``what`` names: what it prints goes to stderr (a command's
    stdout may be ``--json`` output), and whatever it raises, ``sys.exit`` and a
    BaseException of its own included, becomes one ModelError naming ``what``; flextui's
    own errors pass as they are, and Ctrl-C (KeyboardInterrupt) stops the command."""
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    except FlextuiError:
        raise
    except SystemExit as exc:
        raise ModelError(f"{what} called sys.exit({exc.code!r:.60}); a model must not end "
                         "the process: raise an exception instead") from None
    except KeyboardInterrupt:  # Ctrl-C while the user's code ran: the command stops
        raise
    except BaseException as exc:  # noqa: BLE001 (a user's code may raise anything:
        # GeneratorExit, a BaseException of its own)
        raise ModelError(f"{what} raised {type(exc).__name__}: {exc}"[:400]) from None
