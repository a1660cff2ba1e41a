"""The README and the docs under docs/, read as the tests of their examples need them:
fenced code blocks with their language, and sections."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
#: the README first, then every doc
DOCS = [README, *sorted((ROOT / "docs").glob("*.md"))]

FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.M | re.S)


@dataclass(frozen=True)
class Block:
    """A fenced code block: its language (``""`` for none) and its text."""

    lang: str
    text: str


def blocks(text: str) -> list[Block]:
    return [Block(m.group(1), m.group(2)) for m in FENCE.finditer(text)]


def section(text: str, heading: str) -> str:
    """The section under the ``## heading``, up to the next heading of its level."""
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end >= 0 else len(text)]


def name(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()
