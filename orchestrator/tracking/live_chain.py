"""The live ledger's chunks, chained: each chunk the ledger writes moves a running sha256 over the
chunks so far, kept in the session run's tag CHAIN_TAG as `N:HEX`, so a chunk edited, added, removed
or moved after it was written is found when the chunks are read back (live.py `chunks`), and the
evidence is refused in one line instead of counted.

    head_0 = ""        head_k = sha256(head_(k−1) | "KIND/NAME" | sha256(chunk k's bytes))

over the chunks in the order they are replayed (by name: the time they were written at). A ledger
replica that died between writing a chunk and moving the tag finds one chunk beyond the tag when it
restarts: it adopts it (`adopt_last`) and moves the tag; nothing else is adopted. Whoever can write
the run's tags can rewrite the chain as well: the chain finds edits by writers of artifacts only,
and `promote --live` reads only the session the candidate's registered version names (live.py).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence


class LiveChainError(ValueError):
    """A session's chunks are not the ones its ledger wrote (one line)."""


def chain_step(head: str, chunk: str, chunk_sha256: str) -> str:
    """The chain after one more chunk (`chunk`: "KIND/NAME"; module docstring)."""
    return hashlib.sha256(f"{head}|{chunk}|{chunk_sha256}".encode()).hexdigest()


def chain_of(chunks: Sequence[tuple[str, str]]) -> str:
    """The chain over (chunk, its sha256) in order; "" for none."""
    head = ""
    for chunk, digest in chunks:
        head = chain_step(head, chunk, digest)
    return head


def chain_tag(chunks: Sequence[tuple[str, str]]) -> str:
    """CHAIN_TAG's value for these chunks: `N:HEX`."""
    return f"{len(chunks)}:{chain_of(chunks)}"


def checked_chain(run_id: str, recorded: str | None, chunks: Sequence[tuple[str, str]], adopt_last: bool) -> str | None:
    """None when `recorded` (CHAIN_TAG's value, None: never written) is the chain of `chunks`; with
    `adopt_last`, the tag to write when it is the chain of all but the last (a ledger that died
    between the chunk and its tag); LiveChainError otherwise."""
    if recorded == chain_tag(chunks) or (recorded is None and not chunks):
        return None
    if adopt_last and chunks and (recorded or "0:") == chain_tag(chunks[:-1]):
        return chain_tag(chunks)
    held = (recorded or "0:").split(":")[0]
    raise LiveChainError(
        f"serving session {run_id}: its {len(chunks)} live chunks are not the {held} its ledger wrote "
        "(chunks changed, added or removed since): its live evidence is refused"
    )
