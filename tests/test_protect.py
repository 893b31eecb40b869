"""A regression suite every version must keep (issue 74 item 3): two text-bag versions trained on
real tweets; `protect --from-flips 2` protects the samples v2 flipped against v1; `promote` then
refuses v2 (it flips them again) unless --max-protected-flips allows as many, and passes a v3
trained as v1 was (it keeps them); the set is versioned, later pipelines score it, `versions
--protected` shows each version on it; bad tables are one line, exit 2."""

from __future__ import annotations

import json

import mlflow
import numpy as np
import pytest

from conftest import run_update
from orchestrator.cli import main
from orchestrator.tracking import registry
from orchestrator.tracking.ledger import COMPARED, pair_counts, read_ledger
from orchestrator.tracking.protected import protected_set
from orchestrator.tracking.version_refs import VersionRef
from reliability_records import record


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main([*argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def document(model: str, version: str, seed: int, epochs: int, path: str, storage: str) -> dict:
    return {
        "model": model,
        "version": version,
        "arch": "text-bag",
        "method": {"name": "none"},
        "data": {"path": path, "label_column": "sentiment"},
        "train": {"epochs": epochs, "lr": 0.5, "batch_size": 64, "seed": seed},
        "resources": {"student": {"cpus": 1}, "teacher_actors": 0, "fresh_stage_workers": False},
        "storage": storage,
        **({"old": f"{model}/1"} if version != "v1" else {}),
    }


@pytest.fixture(scope="module")
def protected_model(ray_cluster, tmp_path_factory):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from workers.data.text_tables import load_tweet_sentiment

    tweets = load_tweet_sentiment()
    rows = range(1, 3000 * 12, 12)
    tmp = tmp_path_factory.mktemp("protect")
    table = {
        "text": [tweets.texts[i] for i in rows],
        "sentiment": [tweets.classes[int(tweets.labels[i])] for i in rows],
    }
    pq.write_table(pa.table(table), tmp / "tweets.parquet")
    model = f"protect-{tmp.name}"[-60:]
    for version, seed, epochs in (("v1", 0, 1), ("v2", 1, 2)):
        run_update(
            document(model, version, seed, epochs, str(tmp / "tweets.parquet"), str(tmp / "storage")), tmp / version
        )
    return model, tmp, table, tweets.classes


def ledger(model: str, version: str) -> dict:
    return read_ledger(registry.ledger_path(registry.run_of(VersionRef(model, version))), COMPARED)


def test_protected_flips_gate_the_next_promotion(protected_model, capsys):
    model, tmp, _, _ = protected_model
    assert cli(capsys, "promote", model, "1", "--max-nfr", "1")[0] == 0  # v1 champion
    flips = pair_counts(ledger(model, "1"), ledger(model, "2")).negative
    code, out, err = cli(capsys, "protect", model, "--from-flips", "2")
    assert code == 0, err
    assert f"protected set 1: {flips:,} samples added, {flips:,} in all" in out and flips > 10

    loose = ["--max-nfr", "1", "--max-er-increase", "1"]
    code, _, err = cli(capsys, "promote", model, "2", *loose)
    assert code == 1 and "protected samples flipped > 0 allowed" in err, err
    again = int(err.split(" protected samples flipped")[0].rsplit(" ", 1)[-1])
    assert again >= 0.95 * flips  # scored from raw texts: the ledger's answers, bar ties
    code, out, err = cli(capsys, "versions", model, "--protected", "--json")
    rows = {r["version"]: r for r in json.loads(out)["protected"]["versions"]}
    assert rows["2"]["flipped_vs_parent"] == rows["2"]["flipped_vs_champion"] == again
    assert rows["1"]["correct"] >= again and rows["1"]["flipped_vs_parent"] is None

    # v3 trained as v1 was: it keeps what v1 got right, so the suite lets it through
    run_update(document(model, "v3", 0, 1, str(tmp / "tweets.parquet"), str(tmp / "storage")), tmp / "v3")
    suite = protected_set(model)
    run = mlflow.MlflowClient().get_run(registry.run_of(VersionRef(model, "3")))
    assert run.data.metrics["protected.n"] == len(suite) and run.data.metrics["protected.set"] == 1
    code, out, err = cli(capsys, "promote", model, "3", *loose)
    assert code == 0, err
    assert f"protected set 1: 0 of {len(suite)} flipped" in out

    # v2 against champion v3 now: as many flips allowed as it makes passes
    code, _, err = cli(capsys, "promote", model, "2", *loose, "--max-protected-flips", str(again - 1))
    assert code == 1, err
    code, out, err = cli(capsys, "promote", model, "2", *loose, "--max-protected-flips", str(again))
    assert code == 0, err


def test_a_table_adds_a_set_version_and_bad_tables_are_one_line(protected_model, capsys, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    model, _, table, classes = protected_model
    before = protected_set(model)
    held = 0 if before is None else len(before)
    good = tmp_path / "good.csv"
    good.write_text(
        "text,sentiment\n"
        + "".join(f'"{t}",{s}\n' for t, s in zip(["my bag is lost", "what a smooth flight"], classes[:2]))
    )
    code, out, err = cli(capsys, "protect", model, str(good))
    assert code == 0, err
    after = protected_set(model)
    assert len(after) == held + 2 and after.version == (1 if before is None else before.version + 1)
    assert np.isin(before.ids, after.ids).all() if before is not None else True  # the old rows stay

    unknown = tmp_path / "unknown.parquet"
    pq.write_table(pa.table({"text": ["fine"], "sentiment": ["furious"]}), unknown)
    twice = tmp_path / "twice.csv"
    twice.write_text(f"text,sentiment\nsame words,{classes[0]}\n same words ,{classes[1]}\n")
    cases = {
        "a label the model does not know": ([str(unknown)], "'furious' in column 'sentiment' is not a class"),
        "one text twice": ([str(twice)], "is given twice"),
        "no table and no flips": ([], "one of them"),
        "flips of a version without parent": (["--from-flips", "1"], "has no registered parent"),
        "no such model": (["nosuchmodel-anywhere", str(good)], "no registered model"),
    }
    for case, (argv, words) in cases.items():
        args = argv if case == "no such model" else [model, *argv]
        code, _, err = cli(capsys, "protect", *args)
        assert code == 2 and len(err.strip().splitlines()) == 1 and words in err, (case, err)
    assert protected_set(model).version == after.version  # nothing written by a refusal


def test_training_takes_each_protected_sample_weight_times(protected_model, capsys, tmp_path):
    """train.protected_weight 3: every protected sample in neither val nor eval is in the train split
    three times (the flips of v2 are eval samples: left out), `check` says how many, the run logs it;
    a model without a protected set is one line, exit 2."""
    import yaml

    from orchestrator.planning.preflight import preflight
    from pipelines.spec import parse_spec
    from workers.data.text_tables import load_tweet_sentiment
    from workers.tasks.resolve import cached_splits

    model, tmp, _, classes = protected_model
    tweets = load_tweet_sentiment()
    outside = tmp_path / "outside.csv"  # tweets the data does not hold: they can only be trained on as protected
    picked = [tweets.texts[i].replace('"', "'") for i in range(7, 40 * 12, 12)]
    outside.write_text("text,sentiment\n" + "".join(f'"{t}",{classes[i % 2]}\n' for i, t in enumerate(picked)))
    assert cli(capsys, "protect", model, str(outside))[0] == 0
    suite = protected_set(model)
    spec = document(model, "v5", 2, 1, str(tmp / "tweets.parquet"), str(tmp / "storage"))
    spec["train"]["protected_weight"] = 3
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    code, out, err = cli(capsys, "check", str(tmp_path / "spec.yaml"))
    assert code == 0, err
    plan = preflight(parse_spec(spec))
    splits = cached_splits(plan.data)
    held = np.concatenate([splits.val.ids.numpy(), splits.eval.ids.numpy()])
    trainable = suite.ids[~np.isin(suite.ids, held)]
    ids, counts = np.unique(splits.train.ids.numpy(), return_counts=True)
    assert (counts[np.isin(ids, trainable)] == 3).all() and np.isin(trainable, ids).all()
    assert len(trainable) >= len(picked) and len(trainable) < len(suite)  # some protected samples are eval's
    left = len(suite) - len(trainable)
    assert f"{len(trainable):,} protected samples in train ×3 ({left:,} of val or eval left out)" in out
    result = run_update(spec, tmp_path / "v5")
    metrics = mlflow.MlflowClient().get_run(result.run_id).data.metrics
    assert metrics["data.protected_trained"] == len(trainable) and metrics["data.protected_left_out"] == left

    alone = {**spec, "model": f"{model}-none"[-60:], "version": "v1"}
    alone.pop("old")
    (tmp_path / "alone.yaml").write_text(yaml.safe_dump(alone))
    code, _, err = cli(capsys, "check", str(tmp_path / "alone.yaml"))
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    assert lines[0].endswith(
        f"train.protected_weight: {alone['model']} has no protected set "
        f"(`congruent protect {alone['model']} TABLE` registers one)"
    ), err


def test_an_image_model_protects_its_flipped_files_and_a_folder_of_class_folders(
    ray_cluster, fashion_mnist, spec_document, capsys, tmp_path
):
    """Two mlp-small versions on an image folder tree (Fashion-MNIST PNGs, CLASS/FILE): `protect
    --from-flips 2` keeps the flipped images' files with the set, promote refuses v2 on them; a folder
    of class folders adds its images; an unknown class folder or an unreadable file is one line."""
    from test_serving import png

    classes = [name.replace("/", "-") for name in fashion_mnist.eval.classes]  # folder names ("T-shirt/top")
    tree = tmp_path / "tree"
    for i in range(1500):
        label = int(fashion_mnist.train.labels[i])
        (tree / classes[label]).mkdir(parents=True, exist_ok=True)
        (tree / classes[label] / f"{i:05d}.png").write_bytes(png(fashion_mnist.train.images[i][0].numpy()))
    model = f"protect-images-{tmp_path.name}"[-60:]
    for version, seed, epochs in (("v1", 0, 1), ("v2", 1, 4)):
        spec = spec_document(
            model=model,
            version=version,
            data={"path": str(tree)},
            train={"epochs": epochs, "lr": 0.05, "batch_size": 64, "seed": seed},
            **({"old": f"{model}/1"} if version == "v2" else {}),
        )
        run_update(spec, tmp_path / version)
    assert cli(capsys, "promote", model, "1", "--max-nfr", "1")[0] == 0
    flips = pair_counts(ledger(model, "1"), ledger(model, "2")).negative
    code, out, err = cli(capsys, "protect", model, "--from-flips", "2")
    assert code == 0, err
    suite = protected_set(model)
    assert len(suite) == flips > 0 and all(image for image in suite.images)
    assert all((tree / name).read_bytes() == image for name, image in zip(suite.inputs, suite.images))
    code, _, err = cli(capsys, "promote", model, "2", "--max-nfr", "1", "--max-er-increase", "1")
    assert code == 1 and "protected samples flipped > 0 allowed" in err, err

    more = tmp_path / "more"
    (more / classes[0]).mkdir(parents=True)
    (more / classes[0] / "a.png").write_bytes(png(fashion_mnist.eval.images[0][0].numpy()))
    code, out, err = cli(capsys, "protect", model, str(more))
    assert code == 0 and f"1 samples added, {flips + 1:,} in all" in out, err
    (more / "not-a-class").mkdir()
    (more / "not-a-class" / "b.png").write_bytes(png(fashion_mnist.eval.images[1][0].numpy()))
    broken = tmp_path / "broken"
    (broken / classes[1]).mkdir(parents=True)
    (broken / classes[1] / "c.png").write_bytes(b"\x89PNG not really")
    for folder, words in ((more, "folder 'not-a-class' is not a class of"), (broken, "c.png: not a readable image")):
        code, _, err = cli(capsys, "protect", model, str(folder))
        assert code == 2 and len(err.strip().splitlines()) == 1 and words in err, err


def test_two_protects_at_once_both_keep_their_rows(protected_model):
    """add_protected reads, extends and writes the set under the model's registry lock: two at once
    (disjoint rows) end in a set holding both, where an unlocked read-modify-write loses one's."""
    from orchestrator.tracking.protected import add_protected
    from test_promotion import run_together

    model = protected_model[0]
    before = protected_set(model)
    held = set() if before is None else set(before.ids.tolist())
    batches = [np.arange(10**9, 10**9 + 5, dtype=np.int64), np.arange(2 * 10**9, 2 * 10**9 + 5, dtype=np.int64)]
    errors: list[BaseException] = []

    def protect(ids: np.ndarray) -> None:
        try:
            add_protected(model, ids, [f"text {i}" for i in ids], np.zeros(len(ids), np.int64), "test")
        except BaseException as e:  # noqa: BLE001  # run_together fails on it
            errors.append(e)

    run_together(protect, batches, errors)
    after = set(protected_set(model).ids.tolist())
    assert after == held | set(np.concatenate(batches).tolist())


def test_a_protected_set_that_cannot_be_read_makes_promote_refuse(protected_model, capsys):
    """The model's tag names a set whose samples are gone (a run with no artifact): promote refuses in
    one line, exit 2, and the champion stays; so does any MLflow error reading the model's tags. The
    gate fails closed: skipping the set would let through what it protects."""
    from mlflow.exceptions import MlflowException

    from orchestrator.tracking import protected
    from orchestrator.tracking.store import experiment_id
    from orchestrator.tracking.tags import PROTECTED_RUN_TAG

    model = protected_model[0]
    client = mlflow.MlflowClient()
    before = client.get_registered_model(model).tags.get(PROTECTED_RUN_TAG)
    if client.get_registered_model(model).aliases.get("champion") is None:  # the set is read against one
        client.set_registered_model_alias(model, "champion", "1")
    champion = client.get_registered_model(model).aliases.get("champion")
    empty = client.create_run(experiment_id(model)).info.run_id
    client.set_terminated(empty)
    client.set_registered_model_tag(model, PROTECTED_RUN_TAG, empty)
    try:
        code, _, err = cli(capsys, "promote", model, "2", "--max-nfr", "1", "--max-er-increase", "1")
        assert code == 2 and len(err.strip().splitlines()) == 1, err
        assert f"{model}'s protected set (run {empty}) cannot be read" in err
        assert client.get_registered_model(model).aliases.get("champion") == champion
    finally:
        if before:
            client.set_registered_model_tag(model, PROTECTED_RUN_TAG, before)
        else:
            client.delete_registered_model_tag(model, PROTECTED_RUN_TAG)

    def unreachable(self, name):
        raise MlflowException("connection refused", error_code="INTERNAL_ERROR")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(mlflow.MlflowClient, "get_registered_model", unreachable)
        with pytest.raises(registry.RegistryError, match="whether it has a protected set cannot be read"):
            protected.protected_set(model)
    assert protected.protected_set("no-such-model-anywhere") is None
    record("serving_security", check="a protected set that cannot be read (its samples gone, the store failing) "
           "makes promote refuse in one line: the gate fails closed", passed=True)  # fmt: skip


def test_from_flips_reads_the_spec_the_version_registered_not_its_run_s_edited_file(protected_model, capsys, tmp_path):
    """A run's spec.yaml is editable by whoever may edit the run: `--from-flips` reads the samples'
    data through the spec the registry recorded (its sha256), so one pointed at another table is refused."""
    import shutil

    import yaml
    from mlflow import MlflowClient

    from orchestrator.tracking.artifact_cache import cache_root

    model, _, _, _ = protected_model
    run_id = registry.run_of(VersionRef(model, "2"))
    client = MlflowClient()
    original = open(client.download_artifacts(run_id, "spec.yaml", str(tmp_path))).read()
    edited = yaml.safe_load(original)
    edited["data"]["path"] = str(tmp_path / "elsewhere.parquet")
    before = protected_set(model)
    client.log_text(run_id, yaml.safe_dump(edited, sort_keys=False), "spec.yaml")
    shutil.rmtree(cache_root() / run_id, ignore_errors=True)  # as on a machine that never fetched it
    try:
        code, out, err = cli(capsys, "protect", model, "--from-flips", "2")
    finally:
        client.log_text(run_id, original, "spec.yaml")
    after = protected_set(model)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert "spec.yaml of run" in err and "differs from the one registered" in err and "not used" in err
    assert (None if before is None else before.run_id) == (None if after is None else after.run_id)  # no new set
    record("serving_security", check="protect --from-flips reads the flipped samples through the spec the version "
           "registered (its sha256), not its run's editable spec.yaml", passed=True)  # fmt: skip
