"""One registered model version as Congruent records it: `VersionRecord`, and the MLflow registry
tags that hold it (the only place that knows their formats; their names: tags.py).

A version's tags: `method`, `arch`, `label` (the spec's `version`), `fingerprint` (the eval split),
`spec_hash`, `error_rate`; an hf:DIR version `base_digest` (sha256 of the pretrained directory, 16
hex digits) and, trained as an adapter, `adapter` (`lora r8 α16 query,value`); against its old
model `parent_version` (a registered parent), `old` (the reference or path as written),
`foreign_parent` (an old model Congruent did not train: its resolved MLflow URI), `nfr` /
`pfr` / `rel_nfr` (6 decimals), `n_compared` (the samples they count over), `nfr_classes` (the old
model's classes, when it knows fewer than the data has); and `classes` (the class names, JSON in
class-id order, where MLflow's 5,000 characters hold them).
What a version does not have is absent, never "": versions of earlier releases, with fewer tags,
read with those fields empty.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from orchestrator.tracking.tags import VERSION_TAGS
from workers.confidence import paired_increase_upper, wilson_upper

SHOWN_CONFIDENCE = 0.95  # the level of the bounds `versions` and the report show
MAX_TAG = 5000  # MLflow's limit on a tag value


@dataclass(frozen=True)
class VersionRecord:
    """A version's lineage, method, eval split, ER and flips against its parent (its tags), plus
    what the registry says of it (`version`, `aliases`, `created`). Fractions are floats in [0, 1];
    None where the version has none (a first version has no parent, nfr, pfr nor n_compared)."""

    version: str = ""  # MLflow's number ("" before registration)
    method: str = ""
    arch: str = ""
    label: str = ""
    fingerprint: str = ""
    spec_hash: str = ""
    base_digest: str = ""  # hf:DIR: the pretrained directory's digest
    adapter: str = ""  # trained as an adapter on that base: its settings
    error_rate: float | None = None  # None only for a version registered without one
    parent_version: str | None = None
    old: str | None = None
    foreign_parent: str | None = None  # an old model outside Congruent: its MLflow URI (no parent_version)
    nfr: float | None = None
    pfr: float | None = None
    rel_nfr: float | None = None  # None also where it is undefined (the parent's ER 0 or 1)
    n_compared: int | None = None
    nfr_classes: tuple[int, ...] | None = None
    class_names: tuple[str, ...] = ()
    chosen: str = ""  # method auto: the candidate it shipped
    candidates: tuple[dict[str, Any], ...] = ()  # method auto: every candidate's val and eval ER / NFR, seconds
    aliases: tuple[str, ...] = ()  # not a tag: the registered model's aliases pointing here
    created: str = ""  # not a tag: when MLflow registered it (local ISO time, in seconds)

    def to_tags(self) -> dict[str, str]:
        """The registry tags, as Congruent has always written them (tags.py VERSION_TAGS)."""
        texts = {
            "method": self.method,
            "arch": self.arch,
            "label": self.label,
            "fingerprint": self.fingerprint,
            "spec_hash": self.spec_hash,
            "base_digest": self.base_digest,
            "adapter": self.adapter,
        }
        fields = {k: v for k, v in texts.items() if v}
        optional = {
            "error_rate": _six(self.error_rate),
            "parent_version": self.parent_version,
            "old": self.old,
            "foreign_parent": self.foreign_parent,
            "nfr": _six(self.nfr),
            "pfr": _six(self.pfr),
            "rel_nfr": _six(self.rel_nfr),
            "n_compared": str(self.n_compared) if self.n_compared else None,
            "nfr_classes": None if self.nfr_classes is None else ",".join(map(str, self.nfr_classes)),
        }
        fields.update({k: v for k, v in optional.items() if v is not None})
        if self.chosen:
            fields["chosen"] = self.chosen
        candidates = json.dumps([{k: _rounded(v) for k, v in c.items()} for c in self.candidates])
        if self.candidates and len(candidates) <= MAX_TAG:
            fields["candidates"] = candidates
        names = json.dumps(list(self.class_names))
        if self.class_names and len(names) <= MAX_TAG:
            fields["class_names"] = names
        return {VERSION_TAGS[field]: value for field, value in fields.items()}

    @classmethod
    def from_tags(
        cls, tags: Mapping[str, str], version: str, aliases: tuple[str, ...] = (), created: str = ""
    ) -> VersionRecord:
        """The record a version's tags hold; a missing or empty tag leaves its field empty."""
        tag = {field: tags.get(key) for field, key in VERSION_TAGS.items()}
        return cls(
            version=str(version),
            method=tag["method"] or "",
            arch=tag["arch"] or "",
            label=tag["label"] or "",
            fingerprint=tag["fingerprint"] or "",
            spec_hash=tag["spec_hash"] or "",
            base_digest=tag["base_digest"] or "",
            adapter=tag["adapter"] or "",
            error_rate=_fraction(tag["error_rate"]),
            parent_version=tag["parent_version"] or None,
            old=tag["old"] or None,
            foreign_parent=tag["foreign_parent"] or None,
            nfr=_fraction(tag["nfr"]),
            pfr=_fraction(tag["pfr"]),
            rel_nfr=_fraction(tag["rel_nfr"]),
            n_compared=int(n) if (n := tag["n_compared"]) else None,
            nfr_classes=_classes(tag["nfr_classes"]),
            class_names=_names(tag["class_names"]),
            chosen=tag["chosen"] or "",
            candidates=_candidates(tag["candidates"]),
            aliases=aliases,
            created=created,
        )

    @classmethod
    def from_model_version(cls, mv: Any, aliases: tuple[str, ...] = ()) -> VersionRecord:
        """The record of an MLflow ModelVersion (its tags, number and registration time)."""
        created = datetime.datetime.fromtimestamp(mv.creation_timestamp / 1000).isoformat(timespec="seconds")
        return cls.from_tags(mv.tags or {}, str(mv.version), aliases, created)

    @property
    def parent_shown(self) -> str | None:
        """The version's parent as tables show it: its version number, or a foreign old model's URI."""
        return self.parent_version or self.foreign_parent

    def parent_of(self, model: str) -> str | None:
        """The version of `model` this one was measured against: its registered parent, or a foreign
        old model registered under the same name (models:/MODEL/N, whose ledger an update recorded)."""
        prefix = f"models:/{model}/"
        if self.parent_version is None and self.foreign_parent and self.foreign_parent.startswith(prefix):
            return self.foreign_parent.removeprefix(prefix)
        return self.parent_version

    @property
    def method_shown(self) -> str:
        """The method as tables show it: `auto → kd` for auto's choice."""
        return f"{self.method} → {self.chosen}" if self.chosen else self.method

    @property
    def nfr_upper(self) -> float | None:
        return upper_bounds(self.nfr, self.pfr, self.n_compared)["nfr_upper"]

    @property
    def er_increase_upper(self) -> float | None:
        return upper_bounds(self.nfr, self.pfr, self.n_compared)["er_increase_upper"]

    def row(self) -> dict[str, Any]:
        """The version as `congruent versions --json` lists it and the report's chain shows it."""
        return {
            "version": self.version,
            "label": self.label,
            "method": self.method,
            "arch": self.arch,
            "parent_version": self.parent_version,
            **({"foreign_parent": self.foreign_parent} if self.foreign_parent else {}),
            "error_rate": self.error_rate,
            "nfr": self.nfr,
            "pfr": self.pfr,
            "rel_nfr": self.rel_nfr,
            "nfr_upper": self.nfr_upper,
            "er_increase_upper": self.er_increase_upper,
            "fingerprint": self.fingerprint,
            **({"auto": {"chosen": self.chosen, "candidates": list(self.candidates)}} if self.chosen else {}),
            "aliases": list(self.aliases),
            "created": self.created,
        }


def upper_bounds(nfr: float | None, pfr: float | None, n_compared: int | None) -> dict[str, float | None]:
    """One-sided SHOWN_CONFIDENCE upper bounds of a version's NFR and ER increase against its
    parent, from the rates over the `n_compared` samples they count (the ER increase there is
    NFR − PFR); None for a version without a parent or registered before `n_compared` was tagged."""
    if nfr is None or pfr is None or not n_compared:
        return {"nfr_upper": None, "er_increase_upper": None}
    n = int(n_compared)
    worse, better = round(nfr * n), round(pfr * n)
    return {
        "nfr_upper": wilson_upper(worse, n, SHOWN_CONFIDENCE),
        "er_increase_upper": paired_increase_upper(worse, better, n, SHOWN_CONFIDENCE),
    }


def _six(value: float | None) -> str | None:
    return None if value is None else f"{value:.6f}"


def _fraction(text: str | None) -> float | None:
    return float(text) if text not in (None, "") else None


def _classes(text: str | None) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        return tuple(int(c) for c in text.split(",") if c)
    except ValueError:
        return None


def _names(text: str | None) -> tuple[str, ...]:
    try:
        names = json.loads(text) if text else []
    except ValueError:
        return ()
    return tuple(map(str, names)) if isinstance(names, list) else ()


def _rounded(value: Any) -> Any:
    return round(value, 6) if isinstance(value, float) else value


def _candidates(text: str | None) -> tuple[dict[str, Any], ...]:
    try:
        rows = json.loads(text) if text else []
    except ValueError:
        return ()
    return tuple(r for r in rows if isinstance(r, dict)) if isinstance(rows, list) else ()
