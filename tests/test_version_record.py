"""A registered version's record and its registry tags: written exactly as earlier releases wrote
them, and read back from what they wrote (fewer tags included)."""

import datetime
import json
from types import SimpleNamespace

import pytest

from orchestrator.driver.publish import version_record
from orchestrator.tracking.version_record import VersionRecord, upper_bounds

CLASSES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"]

FIRST_TAGS = {  # v1 as the pipeline tags it: no parent, no flips
    "method": "none",
    "arch": "mlp-small",
    "label": "v1",
    "fingerprint": "3f2a9c01",
    "spec_hash": "a1b2c3d4",
    "error_rate": "0.152300",
    "old": "checkpoints/v0.pt",
    "classes": json.dumps(CLASSES),
}

GROWN_TAGS = {  # v2 from v1@champion, which knew classes 0..4 only
    "method": "elodi",
    "arch": "small-cnn",
    "label": "v2-elodi",
    "fingerprint": "3f2a9c01",
    "spec_hash": "e5f6a7b8",
    "error_rate": "0.104200",
    "parent_version": "1",
    "old": "fmnist@champion",
    "nfr": "0.014900",
    "pfr": "0.063000",
    "rel_nfr": "0.812345",
    "n_compared": "1000",
    "nfr_classes": "0,1,2,3,4",
    "classes": json.dumps(CLASSES),
}


def test_a_first_version_round_trips_without_parent_or_flips():
    record = VersionRecord.from_tags(FIRST_TAGS, "1")
    assert record == VersionRecord(
        version="1",
        method="none",
        arch="mlp-small",
        label="v1",
        fingerprint="3f2a9c01",
        spec_hash="a1b2c3d4",
        error_rate=0.1523,
        old="checkpoints/v0.pt",
        class_names=tuple(CLASSES),
    )
    assert record.parent_version is record.nfr is record.pfr is record.rel_nfr is record.n_compared is None
    assert record.nfr_classes is None and record.nfr_upper is None and record.er_increase_upper is None
    assert record.to_tags() == FIRST_TAGS
    assert list(record.to_tags()) == list(FIRST_TAGS)  # the order it was always written in


def test_a_version_with_flips_nfr_classes_and_class_names_round_trips():
    record = VersionRecord.from_tags(GROWN_TAGS, "2")
    assert (record.parent_version, record.old) == ("1", "fmnist@champion")
    assert (record.nfr, record.pfr, record.rel_nfr, record.n_compared) == (0.0149, 0.063, 0.812345, 1000)
    assert record.nfr_classes == (0, 1, 2, 3, 4) and record.class_names[-1] == "Ankle boot"
    assert record.to_tags() == GROWN_TAGS and list(record.to_tags()) == list(GROWN_TAGS)
    assert record.nfr_upper == upper_bounds(0.0149, 0.063, 1000)["nfr_upper"]
    assert record.nfr_upper is not None and record.nfr_upper > record.nfr


def test_versions_of_earlier_releases_read_with_the_fields_they_lack_empty():
    older = {"method": "none", "fingerprint": "fp", "spec_hash": "h", "parent_version": "", "nfr": "0.020000"}
    record = VersionRecord.from_tags(older, "4")
    assert (record.label, record.arch, record.error_rate, record.parent_version) == ("", "", None, None)
    assert (record.nfr, record.pfr, record.n_compared, record.class_names) == (0.02, None, None, ())
    assert record.to_tags() == {"method": "none", "fingerprint": "fp", "spec_hash": "h", "nfr": "0.020000"}
    broken = VersionRecord.from_tags({"classes": "not json", "nfr_classes": "a,b"}, "5")
    assert broken.class_names == () and broken.nfr_classes is None


def test_class_names_too_long_for_a_tag_are_left_out():
    record = VersionRecord(method="none", class_names=tuple(f"class {i:05d}" for i in range(1000)))
    assert "classes" not in record.to_tags()


def test_a_model_version_reads_with_its_number_aliases_and_registration_time():
    stamp = datetime.datetime(2025, 1, 2, 3, 4, 5)
    mv = SimpleNamespace(version=2, tags=GROWN_TAGS, creation_timestamp=stamp.timestamp() * 1000)
    record = VersionRecord.from_model_version(mv, ("challenger",))
    assert (record.version, record.aliases, record.created) == ("2", ("challenger",), "2025-01-02T03:04:05")
    row = record.row()
    assert list(row) == [
        "version", "label", "method", "arch", "parent_version", "error_rate", "nfr", "pfr", "rel_nfr",
        "nfr_upper", "er_increase_upper", "fingerprint", "aliases", "created",
    ]  # fmt: skip
    assert row["aliases"] == ["challenger"] and json.loads(json.dumps(row)) == row


@pytest.mark.parametrize("parent", [None, "1"])
def test_the_pipeline_records_what_it_always_tagged(parent):
    spec = SimpleNamespace(
        method=SimpleNamespace(name="elodi" if parent else "none"),
        arch="small-cnn" if parent else "mlp-small",
        version="v2-elodi" if parent else "v1",
        spec_hash=GROWN_TAGS["spec_hash"] if parent else FIRST_TAGS["spec_hash"],
        old=None if parent else "checkpoints/v0.pt",
        train=SimpleNamespace(adapter=None),  # no adapter tag
    )
    plan = SimpleNamespace(
        splits=SimpleNamespace(eval_fingerprint="3f2a9c01", class_names=tuple(CLASSES)),
        old=SimpleNamespace(
            parent=SimpleNamespace(version=parent) if parent else None,
            written="fmnist@champion",
            classes=(0, 1, 2, 3, 4) if parent else None,
            foreign=None,
        ),
        start=SimpleNamespace(arch_key=None),  # not an hf:DIR model: no base_digest tag
    )
    vs_old = {"n": 1000, "er_old": 0.15, "er_new": 0.1042, "nfr": 0.0149, "pfr": 0.063, "rel_nfr": 0.8123449}
    metrics = {"error_rate": 0.1042, "vs_old": vs_old} if parent else {"error_rate": 0.1523}
    assert version_record(spec, plan, metrics).to_tags() == (GROWN_TAGS if parent else FIRST_TAGS)


def test_every_recorded_field_has_one_tag():
    """tags.py names the tag of each field a version's record writes (all but what MLflow itself
    says of it): a new field without a tag fails here, not in a registry."""
    from dataclasses import fields

    from orchestrator.tracking.tags import VERSION_TAGS

    recorded = {f.name for f in fields(VersionRecord)} - {"version", "aliases", "created"}
    assert set(VERSION_TAGS) == recorded
    assert len(set(VERSION_TAGS.values())) == len(VERSION_TAGS)
