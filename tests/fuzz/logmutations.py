"""Damage to a framed log (``.ffsearch``, ``.ffrun``): as bytes, past the framing's
checksums, or record by record (re-framed, so the damage reaches the field checks):
a field deleted or changed, the header changed with or without its fingerprints redone,
a record after the final one, records dropped, doubled or swapped, the final record
gone."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fuzz import frames
from fuzz.values import mutate, mutate_bytes, paths


@dataclass(frozen=True)
class LogFormat:
    magic: bytes
    final_tag: int
    #: header key -> (the key of its fingerprint, what builds the value that has one)
    fingerprints: dict[str, tuple[str, Callable[[Any], Any]]]

    def rehash(self, header: dict) -> None:
        """Redo the fingerprints of a changed header's body, where it can still be
        built (where the mutation broke it, the reader must say so)."""
        for key, (hash_key, build) in self.fingerprints.items():
            try:
                header[hash_key] = build(header[key]).fingerprint
            except Exception:  # noqa: BLE001
                pass


def without_final(fmt: LogFormat, data: bytes) -> bytes:
    return frames.log_bytes(fmt.magic, [r for r in frames.records(data, fmt.magic)
                                        if r[0] != fmt.final_tag])


def damaged(rng: random.Random, fmt: LogFormat, data: bytes) -> tuple[bytes, str]:
    """``data`` (a log's bytes) damaged, and what was done."""
    if rng.random() < 0.3:
        return mutate_bytes(rng, data, len(fmt.magic) if rng.random() < 0.9 else 0)
    recs = frames.records(data, fmt.magic)
    for _ in range(20):
        edited, what = _edit(rng, fmt, recs)
        try:
            return frames.log_bytes(fmt.magic, edited), what
        except (TypeError, ValueError, OverflowError):
            continue  # msgpack cannot hold it (a lone surrogate...): another mutation
    return mutate_bytes(rng, data, len(fmt.magic))


def _edit(rng: random.Random, fmt: LogFormat, recs: list) -> tuple[list, str]:
    how = rng.choice(["field", "field", "field", "field", "header", "header", "rehash",
                      "after-final", "drop", "duplicate", "swap", "unfinished"])
    recs = list(recs)
    if how in ("field", "unfinished") and len(recs) > 1:
        if how == "unfinished":
            recs = [r for r in recs if r[0] != fmt.final_tag]
        n = rng.randrange(1, len(recs))
        places = [p for p in paths(recs[n]) if p and p != (0,)] or [()]
        recs[n], what = mutate(rng, recs[n], places)
        return recs, ("no final record; " if how == "unfinished" else "") + \
            f"record {n}: {what}"
    if how in ("header", "rehash", "field", "unfinished"):
        rehashed = how == "rehash"
        places = [p for p in paths(recs[0]) if len(p) >= 2 and p[0] == 1
                  and (not rehashed or p[1] in fmt.fingerprints)] or [()]
        recs[0], what = mutate(rng, recs[0], places)
        if rehashed and isinstance(recs[0], list) and len(recs[0]) == 2 \
                and isinstance(recs[0][1], dict):
            fmt.rehash(recs[0][1])
        return recs, f"header: {what}" + (" (fingerprints redone)" if rehashed else "")
    if how == "after-final":
        recs.append(rng.choice(recs[1:-1] or recs))
        return recs, "a record after the final record"
    a, b = rng.randrange(len(recs)), rng.randrange(len(recs))
    if how == "drop":
        del recs[a]
        return recs, f"record {a} dropped"
    if how == "duplicate":
        recs.insert(a, recs[a])
        return recs, f"record {a} twice"
    recs[a], recs[b] = recs[b], recs[a]
    return recs, f"records {a} and {b} swapped"
