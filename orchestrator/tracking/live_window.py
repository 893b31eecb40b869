"""A serving session's live figures counted as its pairs and labels arrive, in bounded memory.

`LiveWindow` keeps the last `max_ids` ids it was given a pair of (each id's latest pair and label)
and running totals of live.py's `LiveCounts` over every id it has seen: a pair or a label changes an
id's contribution (subtract the old one, add the new), and an id that leaves the window takes its
contribution with it into the totals, so the figures stay exact for every id while memory holds only
the window. Inside the window, as `live_counts` over each id's latest pair (by time) and its label,
the first label standing unless a relabel is asked. A labelled pair is immutable: an id that holds
a label and is sent again with another input (its digest) is refused and counted
(`resent_after_label`), so a client that may only predict cannot turn a labelled flip into another;
sent again with the same input it changes nothing. Beyond the window: a label for an id that left is
`unmatched` (as one never served), and an id sent again after it left counts as a new pair. With
`max_ids_per_client`, one client (the peer the gateway saw, by digest) holds at most that many ids
of the window: a client that floods unique ids pushes out its own oldest, not the others' pairs
still waiting for their labels.

A ledger that restarts, and `run_counts`, replay the session's chunks through a window of the same
size in the order they were written (`replay`): one chunk in memory at a time."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class LiveCounts:
    """Counts of the pairs seen: all of them and their disagreements, and of the labelled ones the
    errors of each version and the flips (NFR = negative_flips / labelled, PFR likewise)."""

    pairs: int
    disagreements: int
    labelled: int
    champion_errors: int
    candidate_errors: int
    negative_flips: int
    positive_flips: int

    def figures(self, confidence: float) -> dict[str, Any]:
        """Rates with Wilson bounds at `confidence`: `*_upper` one-sided upper, the disagreement's
        lower one too (None where nothing was counted)."""
        from workers.confidence import wilson_upper

        def rate(k: int, n: int) -> float | None:
            return k / n if n else None

        def upper(k: int, n: int) -> float | None:
            return wilson_upper(k, n, confidence) if n else None

        return {
            **asdict(self),
            "confidence": confidence,
            "disagreement": rate(self.disagreements, self.pairs),
            "disagreement_upper": upper(self.disagreements, self.pairs),
            "disagreement_lower": 1 - wilson_upper(self.pairs - self.disagreements, self.pairs, confidence)
            if self.pairs
            else None,
            "champion_error_rate": rate(self.champion_errors, self.labelled),
            "candidate_error_rate": rate(self.candidate_errors, self.labelled),
            "nfr": rate(self.negative_flips, self.labelled),
            "nfr_upper": upper(self.negative_flips, self.labelled),
            "pfr": rate(self.positive_flips, self.labelled),
        }


Entry = tuple[float, int, int, int, str | None]  # (time, champion's, candidate's class, label or −1, input digest)
FIELDS: tuple[str, ...] = ("pairs", "disagreements", "labelled", "champion_errors", "candidate_errors")
FIELDS += ("negative_flips", "positive_flips")


def contribution(champion: int, candidate: int, label: int) -> tuple[int, ...]:
    """One id's share of each LiveCounts field (FIELDS' order); `label` −1 when none came."""
    labelled = label >= 0
    right_before, right_after = labelled and champion == label, labelled and candidate == label
    return (
        1,
        int(champion != candidate),
        int(labelled),
        int(labelled and not right_before),
        int(labelled and not right_after),
        int(right_before and not right_after),
        int(labelled and not right_before and right_after),
    )


class LiveWindow:
    """The last `max_ids` ids' pairs and labels and the totals over all (module docstring)."""

    def __init__(self, max_ids: int | None = None, max_ids_per_client: int | None = None) -> None:
        for bound in (max_ids, max_ids_per_client):
            if bound is not None and bound < 1:
                raise ValueError(f"a live window holds at least 1 id, not {bound}")
        self.max_ids, self.max_ids_per_client = max_ids, max_ids_per_client
        self.entries: OrderedDict[str, Entry] = OrderedDict()
        self.client_of: dict[str, str] = {}  # an id's client, for the ids in the window that have one
        self.ids_of: dict[str, OrderedDict[str, None]] = {}  # a client's ids in the window, oldest first
        self.over: set[str] = set()  # clients holding more than max_ids_per_client until `shrink`
        self.totals = [0] * len(FIELDS)
        self.forgotten = 0  # ids that left the window (their contributions stay in the totals)
        self.resent_after_label = 0  # pairs refused: a labelled id sent again with another input
        self.crowded_out = 0  # ids that left because their client held max_ids_per_client (in `forgotten` too)

    def _count(self, entry: Entry, sign: int) -> None:
        for i, n in enumerate(contribution(entry[1], entry[2], entry[3])):
            self.totals[i] += sign * n

    def add_pair(
        self,
        sample_id: str,
        time: float,
        champion: int,
        candidate: int,
        digest: str | None = None,
        evict: bool = True,
        client: str | None = None,
    ) -> bool:
        """An id's pair of the input whose digest is `digest`, sent by `client`; False when it is
        refused: the id holds a label and this is another input (counted in `resent_after_label`). The
        same input again, or a pair older than the id's latest (a row resent late), changes nothing.
        With `evict` False the oldest ids (the window's, a client's beyond `max_ids_per_client`) stay
        until `shrink` (a replay, below)."""
        old = self.entries.get(sample_id)
        if old is not None and old[3] >= 0:
            if digest != old[4]:
                self.resent_after_label += 1
                return False
            self.entries.move_to_end(sample_id)
            return True
        if old is not None:
            if time < old[0]:
                return True
            self._count(old, -1)
            self.entries.move_to_end(sample_id)
        entry = (time, champion, candidate, -1, digest)
        self.entries[sample_id] = entry
        self._count(entry, +1)
        if client is not None and self.max_ids_per_client is not None:
            self._hold_for(client, sample_id)
        if evict:
            self.shrink()
        return True

    def _hold_for(self, client: str, sample_id: str) -> None:
        """`sample_id` is `client`'s newest; a client over `max_ids_per_client` is trimmed by `shrink`."""
        self._release(sample_id)
        held = self.ids_of.setdefault(client, OrderedDict())
        held[sample_id], self.client_of[sample_id] = None, client
        if self.max_ids_per_client is not None and len(held) > self.max_ids_per_client:
            self.over.add(client)

    def _release(self, sample_id: str) -> None:
        client = self.client_of.pop(sample_id, None)
        if client is not None:
            held = self.ids_of[client]
            del held[sample_id]
            if not held:
                del self.ids_of[client]

    def shrink(self) -> None:
        """A client's oldest ids beyond `max_ids_per_client`, then the oldest beyond `max_ids`, leave
        (their contributions stay counted)."""
        for client in self.over:
            held = self.ids_of.get(client, OrderedDict())  # its ids may all have moved to another client since
            while self.max_ids_per_client is not None and len(held) > self.max_ids_per_client:
                oldest, _ = held.popitem(last=False)
                del self.client_of[oldest], self.entries[oldest]
                self.forgotten += 1
                self.crowded_out += 1
        self.over.clear()
        while self.max_ids is not None and len(self.entries) > self.max_ids:
            oldest, _ = self.entries.popitem(last=False)
            self._release(oldest)
            self.forgotten += 1

    def add_label(self, sample_id: str, label: int, relabel: bool = False) -> str:
        """`accepted`, `relabelled`, `unchanged` (the id's first label stands, or the same one came
        again) or `unmatched` (no pair of that id in the window)."""
        old = self.entries.get(sample_id)
        if old is None:
            return "unmatched"
        if old[3] >= 0 and (old[3] == label or not relabel):
            return "unchanged"
        self._count(old, -1)
        self.entries[sample_id] = (old[0], old[1], old[2], label, old[4])
        self._count(self.entries[sample_id], +1)
        return "accepted" if old[3] < 0 else "relabelled"

    def counts(self) -> LiveCounts:
        return LiveCounts(**dict(zip(FIELDS, self.totals)))


def replay(window: LiveWindow, chunks: Iterable[tuple[str, Sequence[Mapping[str, Any]]]]) -> LiveWindow:
    """Feed (kind, rows) chunks, in the order they were written, into `window`: pairs as pairs, the
    labels (those the ledger kept, in the order it kept them) each replacing the id's label; a pair
    of a labelled id with another input is refused as the ledger refused it. A flush
    writes its pairs, then the labels that came meanwhile, some for ids that had left by the flush:
    a pairs chunk's ids leave only once the labels after it are in (at the next pairs chunk), so every
    label written finds its id, and the window ends as the ledger's did. (One case counts apart: an id
    that left and was sent again within one chunk's rows is one pair in a replay, two in the ledger.)"""
    for kind, rows in chunks:
        if kind == "pairs":
            window.shrink()
        for row in rows:
            if kind == "pairs":
                classes = int(row["champion_class"]), int(row["candidate_class"])
                client = row.get("client")
                window.add_pair(str(row["id"]), float(row["time"]), *classes, row.get("digest"), False, client)
            else:
                window.add_label(str(row["id"]), int(row["label"]), relabel=True)
    window.shrink()
    return window
