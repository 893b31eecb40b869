"""Corrupt files in a streamed ImageFolder: found when preflight reads every file, failing the check
with the path, or left out and counted with data.skip_corrupt (issue 33, bad input)."""

from __future__ import annotations

import io

import mlflow
import pytest
from PIL import Image

from workers.errors import DataError


def _png(value: int = 40) -> bytes:
    out = io.BytesIO()
    Image.new("L", (16, 16), value).save(out, format="PNG")
    return out.getvalue()


def _jpeg() -> bytes:
    out = io.BytesIO()
    Image.effect_noise((32, 32), 40).convert("RGB").save(out, format="JPEG", quality=90)
    return out.getvalue()


def test_an_image_problem_is_found_from_the_bytes():
    from workers.data.formats.image_folder import image_problem

    png, jpeg = _png(), _jpeg()
    assert image_problem(png) is None and image_problem(jpeg) is None
    assert image_problem(jpeg + b"trailing bytes after the end marker") is None
    assert image_problem(jpeg[: len(jpeg) * 2 // 3]) == "a JPEG cut short: no end-of-image marker after its last scan"
    assert image_problem(png[: len(png) - 20]) is not None  # IEND and a chunk's checksum missing
    assert image_problem(b"these bytes are no image") == "not a format PIL can identify"


def _tree(root, count: int = 60):
    for i in range(count):
        folder = root / ("dark" if i % 2 else "light")
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{i:03d}.png").write_bytes(_png(20 if i % 2 else 200 + i % 50))
    return root


def test_a_corrupt_file_fails_the_stream_or_is_left_out_and_counted(tmp_path):
    from orchestrator.dataplane.image_streams import open_image_stream

    root = _tree(tmp_path / "tree")
    clean = open_image_stream(str(root), image_size=16)
    (root / "dark" / "cut.jpg").write_bytes(_jpeg()[:300])
    (root / "light" / "notes.png").write_bytes(b"not an image at all")
    with pytest.raises(DataError) as caught:
        open_image_stream(str(root), image_size=16)
    line = str(caught.value)
    assert line.startswith(str(root / "dark" / "cut.jpg")) and "(2 such files)" in line
    assert line.endswith("data.skip_corrupt: true leaves such files out")
    skipping = open_image_stream(str(root), image_size=16, skip_corrupt=True)
    assert skipping.skipped == ("dark/cut.jpg", "light/notes.png")
    # the splits and the fingerprint are those of the tree without the two files
    assert skipping.fingerprint == clean.fingerprint
    for left, right in ((skipping.train, clean.train), (skipping.val, clean.val), (skipping.eval, clean.eval)):
        assert left.files == right.files


def test_skip_corrupt_is_refused_where_nothing_would_be_left_out(tmp_path):
    from orchestrator.driver.check import check_specs

    _tree(tmp_path / "tree")
    (tmp_path / "tree" / "dark" / "cut.png").write_bytes(_png()[:40])
    spec = tmp_path / "spec.yaml"
    common = f"model: corrupt\nversion: v1\narch: mlp-small\nstorage: {tmp_path / 'runs'}\n"
    spec.write_text(
        common + f"data: {{path: {tmp_path / 'tree'}, image_size: 16, streaming: false, skip_corrupt: true}}\n"
    )
    (checked,) = check_specs([str(spec)])
    assert any("data.skip_corrupt: only a streamed ImageFolder tree" in line for line in checked.problems)
    spec.write_text(
        common + f"data: {{path: {tmp_path / 'tree'}, image_size: 16, streaming: true, skip_corrupt: true}}\n"
    )
    (checked,) = check_specs([str(spec)])
    assert checked.problems == [] and "(1 corrupt file left out)" in checked.summary


def test_an_update_on_a_streamed_image_tree_logs_what_it_left_out(ray_cluster, fashion_mnist, tmp_path):
    """A streamed ImageFolder with two corrupt files and skip_corrupt, v1 on the 2-node cluster:
    registered, the count an MLflow metric, the list an artifact."""
    from conftest import run_update

    root = tmp_path / "tree"
    images, labels = fashion_mnist.train.images[:600], fashion_mnist.train.labels[:600]
    for i, (image, label) in enumerate(zip(images, labels)):
        folder = root / fashion_mnist.train.classes[int(label)].replace("/", "-")
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(image[0].numpy()).save(folder / f"{i:05d}.png")
    (root / "Bag" / "cut.png").write_bytes(
        (root / "Bag" / next(p.name for p in (root / "Bag").iterdir())).read_bytes()[:50]
    )
    (root / "Coat" / "empty.jpg").write_bytes(b"")
    document = {
        "model": "corrupt-photos",
        "version": "v1",
        "arch": "small-cnn",
        "storage": str(tmp_path / "runs"),
        "data": {"path": str(root), "streaming": True, "skip_corrupt": True},
        "train": {"epochs": 1, "batch_size": 64},
        "resources": {"student": {"cpus": 1}},
    }
    result = run_update(document, tmp_path / "v1")
    assert result.registered_version == "1"
    run = mlflow.get_run(result.run_id)
    assert run.data.metrics["data.skipped_corrupt"] == 2
    listed = mlflow.artifacts.load_text(f"runs:/{result.run_id}/data/skipped_corrupt.txt")
    assert listed == "Bag/cut.png\nCoat/empty.jpg\n"
