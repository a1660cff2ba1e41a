"""Where operator profiles live: the user's writable cache and the shipped reference set.

The user's directory holds what this user measured (``flextui profile`` writes there);
the reference directory holds profiles that ship with flextui (the repo's top-level
``profiles/``, installed as the package data of ``flextui.profiles``) and is only read.
"""

from __future__ import annotations

import os
import sys
from importlib.resources import files
from pathlib import Path

#: the environment variable that overrides the user's profile directory
PROFILES_ENV = "FLEXTUI_PROFILES"
REFERENCE_PACKAGE = "flextui.profiles"


def user_profile_dir(explicit: str | os.PathLike | None = None) -> Path:
    """The writable profile directory, first found of: ``explicit`` (``--profiles DIR``),
    ``$FLEXTUI_PROFILES``, ``$XDG_CACHE_HOME/flextui/profiles`` (an absolute
    ``XDG_CACHE_HOME`` only, as the XDG spec says), then the platform's cache directory:
    ``~/Library/Caches/flextui/profiles`` on macOS, ``~/.cache/flextui/profiles``
    elsewhere. The directory need not exist yet; saving creates it."""
    if explicit:
        return Path(explicit).expanduser()
    env = os.environ.get(PROFILES_ENV)
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg and os.path.isabs(xdg):
        return Path(xdg) / "flextui" / "profiles"
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "flextui" / "profiles"
    return Path.home() / ".cache" / "flextui" / "profiles"


def reference_profile_dir() -> Path:
    """The read-only reference profiles shipped with flextui.

    An installed flextui has them as package ``flextui.profiles``. An editable install
    made before that package existed does not map it, so a source checkout falls back
    to the repo's top-level ``profiles/`` beside the ``flextui`` package."""
    try:
        return Path(str(files(REFERENCE_PACKAGE)))
    except ModuleNotFoundError:
        return Path(__file__).resolve().parents[2] / "profiles"


#: the subdirectory of a profile directory that holds the task times launches recorded
#: (``flextui launch --record-profile``): kept apart from the profiler's, chosen with
#: ``--cost recorded``
IN_RUN_DIR = "in-run"


def in_run_profile_dir(explicit: str | os.PathLike | None = None) -> Path:
    """Where launches record their task times: ``IN_RUN_DIR`` in the user's profile
    directory (``user_profile_dir``)."""
    return user_profile_dir(explicit) / IN_RUN_DIR
