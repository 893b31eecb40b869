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
`unmatched` (as one never served), and an id sent again after it left counts as a new pair.

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

    def __init__(self, max_ids: int | None = None) -> None:
        if max_ids is not None and max_ids < 1:
            raise ValueError(f"a live window holds at least 1 id, not {max_ids}")
        self.max_ids = max_ids
        self.entries: OrderedDict[str, Entry] = OrderedDict()
        self.totals = [0] * len(FIELDS)
        self.forgotten = 0  # ids that left the window (their contributions stay in the totals)
        self.resent_after_label = 0  # pairs refused: a labelled id sent again with another input

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
    ) -> bool:
        """An id's pair of the input whose digest is `digest`; False when it is refused: the id holds
        a label and this is another input (counted in `resent_after_label`). The same input again, or a
        pair older than the id's latest (a row resent late), changes nothing. With `evict` False the
        oldest ids stay until `shrink` (a replay, below)."""
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
        if evict:
            self.shrink()
        return True

    def shrink(self) -> None:
        """The oldest ids beyond `max_ids` leave (their contributions stay counted)."""
        while self.max_ids is not None and len(self.entries) > self.max_ids:
            self.entries.popitem(last=False)
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
                window.add_pair(str(row["id"]), float(row["time"]), *classes, row.get("digest"), evict=False)
            else:
                window.add_label(str(row["id"]), int(row["label"]), relabel=True)
    window.shrink()
    return window
