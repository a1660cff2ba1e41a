"""The README and the docs under docs/, read as the tests of their examples and links
need them: fenced code blocks with their language, and the prose around them."""

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


def prose(text: str) -> str:
    """``text`` without its fenced blocks and inline code spans."""
    return re.sub(r"`[^`\n]*`", "", FENCE.sub("", text))


def section(text: str, heading: str) -> str:
    """The section under the ``## heading``, up to the next heading of its level."""
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end >= 0 else len(text)]


def anchors(text: str) -> set[str]:
    """The anchors GitHub gives the headings of ``text``: lower case, spaces as hyphens,
    punctuation other than hyphens and underscores dropped, a repeat numbered."""
    seen: dict[str, int] = {}
    for heading in re.findall(r"^#+ (.+)$", FENCE.sub("", text), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        if count:
            seen[f"{slug}-{count}"] = 1
    return set(seen)


def name(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()
