"""The bad-input corpus, continued (tests/bad_inputs.py holds the cases' helpers and the spec's
cases): the old version and where the model starts (init, freeze), each a real `congruent` command
line that must fail with one line naming the problem and exit code 2."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import bad_files
from bad_inputs import MODEL, Assets, BadInput, _run_spec, _with
from workers.models.checkpoints import ModelSettings


def _old(write: Callable[[Path], None], **changes) -> Callable[[Path, Assets], dict]:
    """A spec whose old checkpoint is a file written by `write`."""

    def document(folder: Path, assets: Assets) -> dict:
        path = folder / "old-bad.pt"
        write(path)
        return _with(method__name="fd-lm", old=str(path), **changes)

    return document


def _init_file(write: Callable[[Path], None], name: str = "start.pth", **changes) -> Callable[[Path, Assets], dict]:
    """A spec whose `init` is a file written by `write` (nothing written: `write` does nothing)."""

    def document(folder: Path, assets: Assets) -> dict:
        path = folder / name
        write(path)
        return _with(init=str(path), **changes)

    return document


def _mlp_state_dict(path: Path) -> None:
    import torch

    torch.save(ModelSettings("mlp-small", 10).build(seed=0).state_dict(), path)


MODEL_CASES = [
    # the old version
    BadInput(
        "old-missing-for-fd", "old: method 'fd-lm' needs an old model", _run_spec("no-old", _with(method__name="fd-lm"))
    ),
    BadInput(
        "old-checkpoint-missing",
        "no such checkpoint",
        _run_spec("old-gone", lambda folder, a: _with(method__name="fd-lm", old=str(folder / "v1.pt"))),
    ),
    BadInput(
        "old-registry-version-missing",
        "corpus@champion: no such registered model version (no registered model 'corpus')",
        _run_spec("old-ref", _with(method__name="fd-lm", old=f"{MODEL}@champion")),
    ),
    BadInput(
        "old-registry-version-without-checkpoint",
        "corpus-parent version 2 has no checkpoint",
        _run_spec("old-empty", _with(method__name="fd-lm", old="corpus-parent@empty")),
    ),
    BadInput(
        "old-class-mismatch", "has 5 classes, the data has 10", _run_spec("classes", _old(bad_files.five_classes))
    ),
    BadInput(
        "old-registry-class-mismatch-names-the-reference",
        (
            "old: corpus-parent@five has 5 classes, the data has 10",
            "old: corpus-parent version 3 was evaluated on eval split 0123456789ab",  # a second problem of it
        ),
        _run_spec("five", _with(method__name="fd-lm", old="corpus-parent@five")),
    ),
    BadInput(
        "old-relative-path-as-written",
        "old: v1.pt: no such checkpoint",
        _run_spec("relative", _with(method__name="fd-lm", old="v1.pt")),
    ),
    BadInput(
        "old-text-file",
        "not a readable checkpoint (not a file torch.save writes: neither a zip archive nor a pickle)",
        _run_spec("text", _old(lambda path: path.write_text("hello, I am not a checkpoint\n"))),
    ),
    BadInput(
        "old-registry-unknown-alias",
        "corpus-parent@nosuchalias: no such registered model version (corpus-parent "
        "has no alias 'nosuchalias'; its aliases: champion, empty, five)",
        _run_spec("alias", _with(method__name="fd-lm", old="corpus-parent@nosuchalias")),
    ),
    BadInput(
        "old-registry-unknown-version",
        "corpus-parent/9: no such registered model version (corpus-parent has no version 9; its versions: 1, 2, 3)",
        _run_spec("version9", _with(method__name="fd-lm", old="corpus-parent/9")),
    ),
    BadInput(
        "old-truncated-checkpoint", "not a readable checkpoint", _run_spec("truncated", _old(bad_files.truncated))
    ),
    BadInput(
        "old-other-architecture",
        "weights do not fit architecture 'mlp-small'",
        _run_spec("foreign", _old(bad_files.other_architecture)),
    ),
    BadInput(
        "old-pickled-object",
        "not a readable checkpoint (UnpicklingError: Trying to load unsupported GLOBAL posix.system",
        _run_spec("pickled", _old(bad_files.pickled_object)),
    ),
    BadInput("old-plain-pickle", "not a readable checkpoint", _run_spec("plain-pickle", _old(bad_files.plain_pickle))),
    BadInput(
        "old-not-a-congruent-checkpoint",
        "not a Congruent checkpoint",
        _run_spec("foreign-dict", _old(bad_files.not_a_checkpoint_dict)),
    ),
    BadInput(
        "bcwi-other-architecture",
        "bcwi interpolates weights",
        _run_spec("bcwi", lambda folder, a: _with(method__name="bcwi", arch="mlp", old=a.old_checkpoint)),
    ),
    BadInput(
        "old-on-another-eval-split",
        "was evaluated on eval split 0123456789ab",
        _run_spec("split", lambda folder, a: _with(method__name="fd-lm", old=a.other_split_reference)),
    ),
    # where the model starts (init) and what trains (freeze)
    BadInput(
        "init-torchvision-weights-not-cached",
        "init: resnet50 IMAGENET1K_V2 needs torchvision's file resnet50-11ad3fa6.pth in",
        _run_spec("tv-cache", _with(arch="resnet50", init="IMAGENET1K_V2")),
    ),
    BadInput(
        "init-unknown-torchvision-weights",
        "init: resnet18 has no torchvision weights 'IMAGENET1K_V7' (known: DEFAULT, IMAGENET1K_V1)",
        _run_spec("tv-name", _with(arch="resnet18", init="IMAGENET1K_V7")),
    ),
    BadInput(
        "init-torchvision-weights-for-another-arch",
        "init: torchvision weights IMAGENET1K_V1 exist for resnet18/34/50, not small-cnn",
        _run_spec("tv-arch", _with(arch="small-cnn", init="IMAGENET1K_V1")),
    ),
    BadInput("init-not-a-known-form", "init: 'imagenet' is neither old", _run_spec("form", _with(init="imagenet"))),
    BadInput("init-file-missing", "start.pth: no such file", _run_spec("init-missing", _init_file(lambda path: None))),
    BadInput(
        "init-file-of-another-architecture",
        "does not fit this model (missing: 0.weight",
        _run_spec("init-foreign", _init_file(_mlp_state_dict, arch="small-cnn")),
    ),
    BadInput(
        "init-file-not-weights",
        "start.pth: not a readable state_dict",
        _run_spec("init-text", _init_file(lambda path: path.write_text("weights, honest\n"))),
    ),
    BadInput(
        "init-old-without-old",
        "init: old starts from the deployed version's weights; give `old`",
        _run_spec("init-old", _with(init="old")),
    ),
    BadInput(
        "init-old-of-another-arch",
        "init: old starts from the old model's weights, so arch must be 'mlp-small'",
        _run_spec("init-old-arch", lambda folder, a: _with(arch="small-cnn", init="old", old=a.old_checkpoint)),
    ),
    BadInput(
        "freeze-without-init",
        "train.freeze: freezing the backbone needs starting weights (init, or arch hf:DIR)",
        _run_spec("freeze", _with(train__freeze="backbone")),
    ),
    BadInput(
        "image-size-on-text",
        "data: image_size: the data is text",
        _run_spec("text-size", _with(arch="text-bag", data={"dataset": "tweet-sentiment", "image_size": 32})),
    ),
    BadInput(
        "modality-disagrees",
        "data: modality: tweet-sentiment is text, not image",
        _run_spec("modality", _with(arch="small-cnn", data={"dataset": "tweet-sentiment", "modality": "image"})),
    ),
]
