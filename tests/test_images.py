"""Colour images at a chosen size: resize and centre crop, colour conversion, per-channel
normalisation, random-resized crops — each checked against values computed by hand."""

from __future__ import annotations

import pytest
import torch
from PIL import Image

from workers.data import load_splits
from workers.data.augment import (
    RESIZED_CROP_RATIO,
    RESIZED_CROP_SCALE,
    AugmentDraws,
    apply_augmentation,
    channel_statistics,
    resized_crops,
    to_model_input,
)
from workers.data.batches import Batch
from workers.data.formats.image_folder import load_image_folder
from workers.data.images import ImageSet, fit_to_size
from workers.data.input_spec import InputSpec
from workers.models.checkpoints import ModelSettings, load_model, save_checkpoint


def test_fit_to_size_resizes_the_shorter_side_then_takes_the_centre():
    """A 4×16 image whose left and right quarters are 0 and the middle half 200: to size 2 the
    shorter side halves (2×8), and the centre 2×2 comes from the middle, 200 everywhere (the
    antialiasing filter reaches a column beyond it on each side, still 200)."""
    image = torch.zeros(1, 1, 4, 16, dtype=torch.uint8)
    image[..., 4:12] = 200
    out = fit_to_size(image, 2)
    assert out.shape == (1, 1, 2, 2) and out.dtype == torch.uint8
    assert torch.equal(out, torch.full((1, 1, 2, 2), 200, dtype=torch.uint8))


def test_a_folder_of_grey_rgb_and_rgba_images_of_any_size_becomes_rgb_at_the_size(tmp_path):
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    Image.new("L", (10, 6), 90).save(tmp_path / "a" / "grey.png")
    Image.new("RGB", (6, 6), (255, 0, 0)).save(tmp_path / "a" / "red.png")
    Image.new("RGBA", (20, 20), (0, 0, 255, 255)).save(tmp_path / "b" / "blue.png")
    Image.new("RGBA", (8, 8), (0, 255, 0, 0)).save(tmp_path / "b" / "clear.png")  # transparent: black
    data = load_image_folder(tmp_path, image_size=4)
    assert data.images.shape == (4, 3, 4, 4) and data.classes == ("a", "b")
    colours = [tuple(int(v) for v in data.images[i, :, 1, 1]) for i in range(4)]
    assert colours == [(90, 90, 90), (255, 0, 0), (0, 0, 255), (0, 0, 0)]
    with pytest.raises(ValueError, match="set data.image_size to resize them"):
        load_image_folder(tmp_path)


def _noise_tree(root, count: int, side: int):
    """`count` images of side² noise in two class folders, every fourth grey (the others RGB)."""
    import numpy as np

    rng = np.random.default_rng(count)
    for i in range(count):
        folder = root / f"c{i % 2}"
        folder.mkdir(parents=True, exist_ok=True)
        mode = "L" if i % 4 == 0 else "RGB"
        shape = (side, side) if mode == "L" else (side, side, 3)
        Image.fromarray(rng.integers(0, 256, shape, dtype=np.uint8), mode).save(folder / f"{i}.png")
    return root


@pytest.mark.parametrize("side, image_size", [(48, None), (160, 32)])
def test_an_image_folder_is_loaded_within_two_copies_of_its_pixels(tmp_path, side, image_size):
    """What loading allocates per image (tracemalloc sees numpy's; the slope between 80 and 240
    images, so imports and fixed costs drop out) stays under 2.2 × what it adds to the result: the
    image at its final size, then its place in the array. The loader held every decoded original
    (25 × a 32-px result at 160 px), then np.stack's copy, then the transposed one."""
    import tracemalloc

    def peak_of(count: int) -> tuple[int, int]:
        tree = _noise_tree(tmp_path / f"n{count}", count, side)
        tracemalloc.start()
        try:
            data = load_image_folder(tree, image_size=image_size)
            return tracemalloc.get_traced_memory()[1], data.images.numel()
        finally:
            tracemalloc.stop()

    load_image_folder(_noise_tree(tmp_path / "warm", 4, side), image_size=image_size)  # imports
    (small, small_bytes), (large, large_bytes) = peak_of(80), peak_of(240)
    assert large_bytes == 240 * 3 * (image_size or side) ** 2
    slope = (large - small) / (large_bytes - small_bytes)
    assert slope < 2.2, f"{slope:.2f} bytes allocated per byte of the result"


def test_fashion_mnist_at_a_chosen_size(fashion_mnist):
    splits = load_splits("fashion-mnist", train_limit=100, eval_limit=50, image_size=40)
    assert splits.train.images.shape == (100, 1, 40, 40) and splits.eval.images.shape == (50, 1, 40, 40)
    as_stored = load_splits("fashion-mnist", train_limit=100, eval_limit=50)
    assert splits.train.labels.tolist() == as_stored.train.labels.tolist()  # the same samples, resized
    assert splits.train.ids.tolist() == as_stored.train.ids.tolist()


def test_channel_statistics_and_the_normalisation_they_give(monkeypatch):
    images = torch.zeros(2, 2, 1, 2, dtype=torch.uint8)
    images[:, 0] = torch.tensor([[0, 255]], dtype=torch.uint8)  # channel 0: half 0, half 1
    images[:, 1] = 51  # channel 1: 0.2 everywhere
    mean, std = channel_statistics(images)
    assert mean == pytest.approx((0.5, 0.2)) and std == pytest.approx((0.5, 0.001))  # a flat channel: std floor
    assert channel_statistics(iter([images[:1], images[1:]])) == (mean, std)  # a stream's batches, summed as they come
    varied = torch.randint(0, 256, (5, 3, 64, 64), dtype=torch.uint8)
    monkeypatch.setattr("workers.data.augment.STATISTICS_CHUNK", 3 * 64 * 64)  # one image per float64 chunk
    assert channel_statistics(varied) == channel_statistics([varied[:2], varied[2:]])
    x = to_model_input(images, mean, std)
    assert x[0, 0].flatten().tolist() == pytest.approx([-1.0, 1.0]) and x[0, 1].flatten().tolist() == pytest.approx(
        [0.0, 0.0], abs=1e-4
    )
    assert torch.equal(to_model_input(images), (images.float() / 255 - 0.5) / 0.5)  # no statistics: the fixed map


def test_an_encoded_split_reads_images_as_its_model_normalises_them():
    """Three images of different values (51, 102, 153 everywhere): rows and a batch give each one,
    in its place, normalised per channel as the model's InputSpec says."""
    images = torch.stack([torch.full((3, 2, 2), value, dtype=torch.uint8) for value in (51, 102, 153)])
    data = ImageSet(images, torch.tensor([0, 1, 0]), ("x", "y"))
    spec = InputSpec.image(3, 2, (0.4, 0.2, 0.0), (0.2, 0.1, 0.5))
    rows = data.encoded(spec).rows(0, 3)
    by_hand = [[(v / 255 - m) / s for m, s in zip(spec.mean, spec.std)] for v in (51, 102, 153)]
    assert [r.tolist() for r in rows[:, :, 0, 0]] == [pytest.approx(row) for row in by_hand]
    assert rows[1:3, :, 0, 0].tolist() == [pytest.approx([0.0, 2.0, 0.8]), pytest.approx([1.0, 4.0, 1.2])]
    batch = data.encoded(spec).batch(Batch(torch.tensor([2, 0], dtype=torch.int32)))
    assert torch.equal(batch, rows[[2, 0]]) and not torch.equal(batch, rows[[0, 2]])


def test_the_normalisation_travels_in_the_checkpoint(tmp_path):
    settings = ModelSettings("small-cnn", 2, InputSpec.image(3, 16, (0.1, 0.2, 0.3), (0.4, 0.5, 0.6)))
    path = save_checkpoint(tmp_path / "m.pt", settings.build(seed=0), settings)
    assert load_model(path)[1] == settings


def test_a_whole_image_box_is_the_image_and_a_quadrant_is_its_bilinear_enlargement():
    generator = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (2, 3, 8, 8), generator=generator, dtype=torch.uint8)
    whole = torch.tensor([[0.0, 0.0, 1.0, 1.0]] * 2, dtype=torch.float16)
    assert torch.equal(resized_crops(images, whole), images)
    quadrant = torch.tensor([[0.0, 0.0, 0.5, 0.5], [0.5, 0.5, 0.5, 0.5]], dtype=torch.float16)
    out = resized_crops(images.float(), quadrant)
    expected = [
        torch.nn.functional.interpolate(part[None].float(), size=(8, 8), mode="bilinear", align_corners=False)[0]
        for part in (images[0, :, :4, :4], images[1, :, 4:, 4:])
    ]
    # the border rows and columns differ, as they should: where the box meets the rest of the image the
    # sampling point lies a quarter pixel beyond the box and blends the neighbour in (the crop alone clamps)
    for got, want in zip(out, expected):
        assert torch.allclose(got[:, 1:-1, 1:-1], want[:, 1:-1, 1:-1], atol=1e-3)


def test_resized_crop_draws_are_seeded_and_within_their_ranges():
    draw = AugmentDraws.draw(4096, torch.Generator().manual_seed(3), padding=2, flip=True, resized=True)
    again = AugmentDraws.draw(4096, torch.Generator().manual_seed(3), padding=2, flip=True, resized=True)
    assert draw.boxes is not None and again.boxes is not None and torch.equal(draw.boxes, again.boxes)
    assert draw.shift_y is None and draw.padding == 0 and draw.mirror is not None
    top, left, height, width = draw.boxes.float().unbind(1)
    assert bool(((top >= 0) & (left >= 0) & (top + height <= 1.001) & (left + width <= 1.001)).all())
    area = height * width
    assert area.min() >= RESIZED_CROP_SCALE[0] * 0.5 and area.max() <= RESIZED_CROP_SCALE[1] + 1e-3
    ratio = (width / height)[(width < 0.999) & (height < 0.999)]  # boxes cut to the image change ratio
    assert ratio.min() >= RESIZED_CROP_RATIO[0] - 0.01 and ratio.max() <= RESIZED_CROP_RATIO[1] + 0.01
    images = torch.randint(0, 256, (8, 3, 16, 16), dtype=torch.uint8)
    out = apply_augmentation(images, draw.take(slice(0, 8)))
    assert out.shape == images.shape and out.dtype == torch.uint8 and not torch.equal(out, images)


def test_an_epoch_with_resized_crops_carries_a_few_bytes_a_sample():
    from workers.data.batches import epoch_batches

    batch = next(epoch_batches(1000, 100, seed=0, epoch=0, augment=True, padding=0, flip=True, resized=True))
    assert batch.draws is not None and batch.draws.boxes is not None
    assert batch.nbytes() == 100 * (4 + 8 + 1)  # index, four float16 fractions, the mirror bit
