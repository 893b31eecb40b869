"""Loaders on the real Fashion-MNIST files and on other formats; splits, subsets, augmentation."""

import gzip
import os
import struct
import tempfile

import numpy as np
import pytest
import torch
from PIL import Image

from workers.data import DataError, augment_batch, fingerprint, load_images, load_splits, to_model_input
from workers.data.formats.idx import read_idx
from workers.data.keys import LIMIT_SEED, rank
from workers.data.sources import FASHION_MNIST_CLASSES


def test_fashion_mnist_from_the_debian_package(fashion_mnist):
    s = fashion_mnist
    assert len(s.train) + len(s.val) == 60000 and len(s.eval) == 10000
    assert abs(len(s.val) - 6000) < 3 * np.sqrt(60000 * 0.1 * 0.9)  # val: the ids hashed into the last 10 %
    assert s.train.images.shape[1:] == (1, 28, 28) and s.train.images.dtype == torch.uint8
    assert s.eval.classes == FASHION_MNIST_CLASSES
    # the official test set is balanced: 1,000 images a class
    assert torch.bincount(s.eval.labels).tolist() == [1000] * 10
    assert 70 < s.train.images.float().mean().item() < 75  # Fashion-MNIST's mean pixel is ~72.9


def test_splits_are_deterministic_and_disjoint(fashion_mnist):
    again = load_splits("fashion-mnist")
    assert again.fingerprint == fashion_mnist.fingerprint
    assert torch.equal(again.val.images, fashion_mnist.val.images)
    pool, _ = load_images("fashion-mnist")
    # train and val are a partition of the 60k training file: no image index in both
    train_keys = {hash(img.numpy().tobytes()) for img in fashion_mnist.train.images[:3000]}
    val_keys = {hash(img.numpy().tobytes()) for img in fashion_mnist.val.images}
    assert len(train_keys & val_keys) <= 5  # Fashion-MNIST holds a few exact duplicate images
    assert len(fashion_mnist.train) + len(fashion_mnist.val) == len(pool)


def test_fingerprint_follows_the_eval_split(fashion_mnist):
    sliced = load_splits("fashion-mnist", eval_limit=500, train_limit=100)
    assert len(sliced.eval) == 500 and len(sliced.train) == 100
    assert sliced.fingerprint != fashion_mnist.fingerprint
    # the limit keeps the 500 ids of lowest rank, wherever they are in the file
    ranks = rank(fashion_mnist.eval.ids.numpy(), LIMIT_SEED)
    lowest = np.sort(np.argsort(ranks, kind="stable")[:500])
    assert torch.equal(sliced.eval.ids, fashion_mnist.eval.ids[lowest]) and lowest.max() > 9000
    assert sliced.fingerprint == fingerprint(fashion_mnist.eval.take(torch.from_numpy(lowest)))
    flipped = sliced.eval.take(slice(0, 500))
    flipped.labels[0] = (flipped.labels[0] + 1) % 10
    assert fingerprint(flipped) != sliced.fingerprint


def test_data_growth_subsets(fashion_mnist):
    half_c = load_splits("fashion-mnist", subset="half-classes")
    assert set(torch.unique(half_c.train.labels).tolist()) == {0, 1, 2, 3, 4}
    assert half_c.num_classes == 10 and len(half_c.eval) == 10000
    assert half_c.fingerprint == fashion_mnist.fingerprint  # eval split untouched
    half_s = load_splits("fashion-mnist", subset="half-samples")
    full_counts = torch.bincount(fashion_mnist.train.labels).double()
    share = torch.bincount(half_s.train.labels) / full_counts  # each class keeps about half (binomial)
    assert ((share - 0.5).abs() < 4 * torch.sqrt(0.25 / full_counts)).all()
    assert set(half_s.train.ids.tolist()) < set(fashion_mnist.train.ids.tolist())
    with pytest.raises(DataError, match="subset"):
        load_splits("fashion-mnist", subset="most")


def _write_idx(path, array):
    codes = {np.uint8: 0x08}
    header = bytes([0, 0, codes[array.dtype.type], array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wb") as f:
        f.write(header + array.tobytes())


def test_idx_directory_of_real_images(tmp_path, fashion_mnist):
    images = fashion_mnist.train.images[:200, 0].numpy()
    labels = fashion_mnist.train.labels[:200].numpy().astype(np.uint8)
    _write_idx(tmp_path / "train-images-idx3-ubyte", images)
    _write_idx(tmp_path / "train-labels-idx1-ubyte.gz", labels)
    pool, test = load_images(tmp_path)
    assert test is None and torch.equal(pool.images[:, 0], torch.from_numpy(images))
    splits = load_splits(tmp_path, val_fraction=0.1, eval_fraction=0.2)
    assert len(splits.train) + len(splits.val) + len(splits.eval) == 200
    assert 20 < len(splits.eval) < 60 and 5 < len(splits.val) < 30
    (tmp_path / "bad-images-idx3-ubyte").write_bytes(b"\x01\x02\x03\x04")
    with pytest.raises(DataError, match="bad magic"):
        read_idx(tmp_path / "bad-images-idx3-ubyte")


def test_a_gzipped_idx_file_is_decompressed_once_and_read_again_when_it_changes(tmp_path, monkeypatch, fashion_mnist):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))  # a cache folder of this test's own
    (tmp_path / "tmp").mkdir()
    images = fashion_mnist.train.images[:100, 0].numpy()
    path = tmp_path / "train-images-idx3-ubyte.gz"
    _write_idx(path, images)
    assert np.array_equal(read_idx(path), images)
    cache = tmp_path / "tmp" / f"congruent-data-{os.getuid()}"
    (kept,) = cache.iterdir()
    assert kept.stat().st_mode & 0o777 == 0o600 and (cache.stat().st_mode & 0o777) == 0o700
    decompress = gzip.decompress
    monkeypatch.setattr(gzip, "decompress", lambda data: pytest.fail("decompressed again"))
    assert np.array_equal(read_idx(path), images)  # from the cache
    monkeypatch.setattr(gzip, "decompress", decompress)
    _write_idx(path, images[:50])  # the file changed: another key, never the old copy
    assert np.array_equal(read_idx(path), images[:50]) and len(list(cache.iterdir())) == 2


def test_a_data_cache_folder_others_may_write_is_not_read(tmp_path, monkeypatch, fashion_mnist):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    images = fashion_mnist.train.images[:100, 0].numpy()
    path = tmp_path / "train-images-idx3-ubyte.gz"
    _write_idx(path, images)
    read_idx(path)
    cache = tmp_path / "tmp" / f"congruent-data-{os.getuid()}"
    (kept,) = cache.iterdir()
    planted = bytes(kept.read_bytes()[:16]) + images[::-1].tobytes()  # a valid IDX file of other images
    os.chmod(cache, 0o777)  # as if someone else could have written it
    kept.write_bytes(planted)
    assert np.array_equal(read_idx(path), images)  # decompressed, the planted copy not read
    os.chmod(cache, 0o700)
    assert np.array_equal(read_idx(path), images[::-1])  # the test means something: a private one is read


def test_image_folder_tree_of_real_images(tmp_path, fashion_mnist):
    for i in range(30):
        label = int(fashion_mnist.eval.labels[i])
        folder = tmp_path / f"class_{label}"
        folder.mkdir(exist_ok=True)
        Image.fromarray(fashion_mnist.eval.images[i, 0].numpy()).save(folder / f"{i}.png")
    pool, test = load_images(tmp_path)
    assert test is None and len(pool) == 30 and pool.images.shape[1:] == (1, 28, 28)
    first_class = sorted(p.name for p in tmp_path.iterdir())[0]
    assert pool.classes[0] == first_class


def test_npz_file(tmp_path, fashion_mnist):
    x = fashion_mnist.eval.images[:50, 0].numpy()
    np.savez(tmp_path / "d.npz", x=x, y=fashion_mnist.eval.labels[:50].numpy())
    pool, _ = load_images(tmp_path / "d.npz")
    assert pool.images.shape == (50, 1, 28, 28) and torch.equal(pool.images[:, 0], torch.from_numpy(x))
    np.savez(tmp_path / "float.npz", x=x[..., None] / 255.0, y=np.arange(50) % 3)  # N×H×W×1 floats
    pool, _ = load_images(tmp_path / "float.npz")
    assert torch.equal(pool.images[:, 0], torch.from_numpy(x)) and pool.num_classes == 3


@pytest.mark.parametrize(
    "make,problem",
    [
        (lambda p: p / "missing", "no such file"),
        (lambda p: (p / "empty").mkdir() or p / "empty", "ImageFolder"),
        (lambda p: np.savez(p / "x.npz", x=np.zeros((2, 4, 4), np.uint8)) or p / "x.npz", "'x' and 'y'"),
        (lambda p: (p / "n.txt").write_text("hi") and p / "n.txt", "must be an .npz"),
    ],
)
def test_bad_sources_name_the_problem(tmp_path, make, problem):
    with pytest.raises(DataError, match=problem):
        load_images(make(tmp_path))


def test_augment_batch_shifts_and_flips():
    image = torch.zeros(1, 1, 8, 8, dtype=torch.uint8)
    image[0, 0, 4, 5] = 255
    unchanged = augment_batch(image, torch.Generator().manual_seed(0), padding=0, flip=False)
    assert torch.equal(unchanged, image)
    positions = set()
    for seed in range(40):
        out = augment_batch(image, torch.Generator().manual_seed(seed), padding=2, flip=False)
        assert out.shape == image.shape and out.dtype == torch.uint8
        if out.sum() > 0:
            r, c = torch.nonzero(out[0, 0])[0].tolist()
            assert abs(r - 4) <= 2 and abs(c - 5) <= 2
            positions.add((r, c))
    assert len(positions) > 5
    flips = [augment_batch(image, torch.Generator().manual_seed(s), padding=0)[0, 0, 4, 2].item() for s in range(20)]
    assert 0 < flips.count(255) < 20  # mirrored column 7 − 5 = 2 in some draws, not all


def test_model_input_range():
    x = to_model_input(torch.tensor([[[[0, 255]]]], dtype=torch.uint8))
    assert x.tolist() == [[[[-1.0, 1.0]]]]


def test_label_ids_with_gaps_are_refused_unless_the_class_count_is_declared(tmp_path, fashion_mnist):
    """Labels 0–9 plus a stray 200 and 17 would make a 201-class model: refused, naming the file and
    the first missing ids, unless data.num_classes declares the count (then labels must lie below it)."""
    from datafiles import write_idx, write_idx_dataset

    images = fashion_mnist.train.images[:102, 0].numpy()
    labels = np.concatenate([fashion_mnist.train.labels[:100].numpy(), [200, 17]])
    write_idx_dataset(tmp_path, images, labels)
    with pytest.raises(
        DataError,
        match=r"train-labels-idx1-ubyte: class ids must run 0..C−1 without gaps, but the "
        r"labels reach 200 and 189 ids below it never occur \(10, 11, 12, 13, 14, …\)",
    ):
        load_images(tmp_path)
    pool, _ = load_images(tmp_path, num_classes=201)
    assert pool.num_classes == 201 and pool.classes[-1] == "200"
    with pytest.raises(DataError, match="label 200 is not below data.num_classes = 20"):
        load_images(tmp_path, num_classes=20)
    # the test file counts too: train holds 0–9, t10k a 12
    write_idx(tmp_path / "train-labels-idx1-ubyte", np.arange(102, dtype=np.uint8) % 10)
    write_idx(tmp_path / "t10k-images-idx3-ubyte", images[:3])
    write_idx(tmp_path / "t10k-labels-idx1-ubyte", np.array([0, 12, 3], dtype=np.uint8))
    with pytest.raises(
        DataError, match=r"t10k-labels-idx1-ubyte: .* reach 12 and 2 ids below it never occur \(10, 11\)"
    ):
        load_images(tmp_path)
    np.savez(tmp_path / "d.npz", x=images[:6], y=np.array([0, 1, 3, 3, 1, 0]))
    with pytest.raises(DataError, match=r"d.npz: .* reach 3 and 1 ids below it never occur \(2\)"):
        load_images(tmp_path / "d.npz")
    assert load_images(tmp_path / "d.npz", num_classes=4)[0].num_classes == 4


def test_limits_above_the_split_and_train_splits_missing_classes_are_refused(tmp_path, fashion_mnist):
    """A limit above what the split holds was silently capped; a train split without some class
    (`train_limit: 1`) trained and registered a model that never saw it."""
    from datafiles import write_idx, write_idx_dataset

    n_train = len(fashion_mnist.train)
    with pytest.raises(DataError, match=f"train_limit 60000 is above the {n_train} training samples"):
        load_splits("fashion-mnist", train_limit=60000)
    with pytest.raises(DataError, match="eval_limit 10001 is above the 10000 regression-eval samples"):
        load_splits("fashion-mnist", eval_limit=10001)
    assert len(load_splits("fashion-mnist", train_limit=n_train, eval_limit=10000).train) == n_train  # all: fine
    with pytest.raises(DataError, match=r"the train split holds 1 of the 10 classes .*; train_limit 1 is too small"):
        load_splits("fashion-mnist", train_limit=1)
    with pytest.raises(DataError, match=r"holds 2 of the 5 classes of the first half \(none of 1, 3, 4\)"):
        load_splits("fashion-mnist", subset="half-classes", train_limit=3)
    # a class that only the test file holds cannot be learnt either
    images, labels = fashion_mnist.train.images[:300, 0].numpy(), fashion_mnist.train.labels[:300].numpy()
    keep = labels != 7
    write_idx_dataset(tmp_path, images[keep], labels[keep])
    write_idx(tmp_path / "t10k-images-idx3-ubyte", images[:20])
    write_idx(tmp_path / "t10k-labels-idx1-ubyte", labels[:20].astype(np.uint8) * 0 + 7)
    with pytest.raises(DataError, match=r"holds 9 of the 10 classes \(none of 7\)$"):
        load_splits(tmp_path)
