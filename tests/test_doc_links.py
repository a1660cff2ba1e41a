"""The README and the docs link only to what exists: every relative link names a file of
the repository and, with ``#anchor``, a heading of that file; every doc is linked from the
README, the first page."""

import re

from doc_files import DOCS, README, ROOT, anchors, name, prose

LINK = re.compile(r"\]\(([^)\s]+)\)")   # [text](target) and ![alt](target)


def relative_links(text: str) -> list[str]:
    return [t for t in LINK.findall(prose(text)) if not re.match(r"[a-z]+:", t)]


def test_every_relative_link_resolves():
    broken = []
    for doc in DOCS:
        for target in relative_links(doc.read_text()):
            path, _, anchor = target.partition("#")
            file = (doc.parent / path).resolve() if path else doc
            if not file.exists() or ROOT not in file.parents:
                broken.append(f"{name(doc)}: {target} (no such file in the repository)")
            elif anchor and anchor not in anchors(file.read_text()):
                broken.append(f"{name(doc)}: {target} (no such heading)")
    assert broken == []


def test_the_readme_links_every_doc():
    linked = {(README.parent / t.partition("#")[0]).resolve()
              for t in relative_links(README.read_text())}
    assert [name(doc) for doc in DOCS[1:] if doc not in linked] == []
