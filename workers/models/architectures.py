"""Model registry: every architecture Congruent trains, built by name with a seed.

`build_model(arch, num_classes, inputs, seed)` gives the same weights for the same seed; `inputs`
(workers/data/input_spec.py) says what the model reads. Image architectures:

- `mlp-small` (784-128-C), `mlp` (784-512-512-C): fast, few flips.
- `small-cnn` (3 conv + BN, ~24k params), `lenet` (LeNet-5 style, ~0.4M params).
- `resnet8`, `resnet20`, `resnet32`: CIFAR-style ResNets (He et al. 2016, §4.2: 3 stages of
  n basic blocks, widths 16/32/64, depth 6n+2).
- `resnet18`, `resnet34`, `resnet50`: torchvision's ImageNet ResNets adapted to small images
  (3×3 stride-1 stem, no max-pool, 1 or 3 input channels).
- Text: `text-linear`, `text-bag`, `text-cnn`, `text-transformer` (workers/models/text.py), reading token ids.
- `hf:DIR`: a Hugging Face sequence classifier from a local directory (workers/models/hf.py).
- A user factory `package.module:function` taking (num_classes, inputs: InputSpec) — only when
  `allow_user_factories=True` is passed, since it imports and runs user code.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

import torch
from torch import nn

from workers.data.input_spec import InputSpec
from workers.models.text import TEXT_ARCHITECTURES
from workers.names import ANSWER_TABLE, check_architecture, is_hf, modality_of

ModelFactory = Callable[[int, InputSpec], nn.Module]


class ModelError(ValueError):
    """An architecture that cannot be built."""


def _mlp(hidden: tuple[int, ...]) -> ModelFactory:
    def build(num_classes: int, inputs: InputSpec) -> nn.Module:
        layers: list[nn.Module] = [nn.Flatten()]
        width = inputs.channels * inputs.size * inputs.size
        for h in hidden:
            layers += [nn.Linear(width, h), nn.ReLU(inplace=True)]
            width = h
        layers.append(nn.Linear(width, num_classes))
        return nn.Sequential(*layers)

    return build


def _conv_bn(cin: int, cout: int, stride: int = 1) -> list[nn.Module]:
    return [nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True)]


def small_cnn(num_classes: int, inputs: InputSpec) -> nn.Module:
    """3×(conv3×3-BN-ReLU), max-pools between, global average pool, linear head."""
    return nn.Sequential(
        *_conv_bn(inputs.channels, 16),
        nn.MaxPool2d(2),
        *_conv_bn(16, 32),
        nn.MaxPool2d(2),
        *_conv_bn(32, 64),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(64, num_classes),
    )


def lenet(num_classes: int, inputs: InputSpec) -> nn.Module:
    """LeNet-5 shape with ReLU and max-pool: conv5-32, conv5-64, fc 128 (padding keeps 28→7)."""
    side = inputs.size // 4
    return nn.Sequential(
        nn.Conv2d(inputs.channels, 32, 5, padding=2),
        nn.ReLU(inplace=True),
        nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 5, padding=2),
        nn.ReLU(inplace=True),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(64 * side * side, 128),
        nn.ReLU(inplace=True),
        nn.Linear(128, num_classes),
    )


class BasicBlock(nn.Module):
    """CIFAR ResNet basic block: two 3×3 convs with BN, identity or 1×1 projection shortcut."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(out)) + self.shortcut(x))


def _cifar_resnet(depth: int) -> ModelFactory:
    if (depth - 2) % 6:
        raise ModelError(f"CIFAR ResNet depth must be 6n+2, got {depth}")
    n = (depth - 2) // 6

    def build(num_classes: int, inputs: InputSpec) -> nn.Module:
        layers: list[nn.Module] = [*_conv_bn(inputs.channels, 16)]
        cin = 16
        for stage, width in enumerate((16, 32, 64)):
            for block in range(n):
                layers.append(BasicBlock(cin, width, 2 if stage > 0 and block == 0 else 1))
                cin = width
        layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, num_classes)]
        return nn.Sequential(*layers)

    return build


def _torchvision_resnet(name: str) -> ModelFactory:
    def build(num_classes: int, inputs: InputSpec) -> nn.Module:
        import torchvision.models  # only these three need it: it takes a second to import

        model = getattr(torchvision.models, name)(weights=None, num_classes=num_classes)
        model.conv1 = nn.Conv2d(inputs.channels, 64, 3, 1, 1, bias=False)
        model.maxpool = nn.Identity()
        return model

    return build


ARCHITECTURES: dict[str, ModelFactory] = {  # the names of workers.names.ARCHITECTURES, in that order
    "mlp-small": _mlp((128,)),
    "mlp": _mlp((512, 512)),
    "small-cnn": small_cnn,
    "lenet": lenet,
    "resnet8": _cifar_resnet(8),
    "resnet20": _cifar_resnet(20),
    "resnet32": _cifar_resnet(32),
    "resnet18": _torchvision_resnet("resnet18"),
    "resnet34": _torchvision_resnet("resnet34"),
    "resnet50": _torchvision_resnet("resnet50"),
    **TEXT_ARCHITECTURES,  # text-linear, text-bag, text-cnn, text-transformer (workers/models/text.py)
}


def resolve_factory(arch: str, allow_user_factories: bool = False, config: str | None = None) -> ModelFactory:
    """The factory for a registered name, for `hf:DIR` (built from `config`, a checkpoint's, else
    the directory's own), or for `module:function` when user factories are allowed."""
    if arch == ANSWER_TABLE:  # built only to load a table's checkpoint: no spec trains one
        from workers.models.answer_table import AnswerTable

        return AnswerTable
    try:
        check_architecture(arch, allow_user_factories)
    except ValueError as e:
        raise ModelError(str(e)) from None
    if is_hf(arch):
        from workers.models.hf import HfError, build_hf, hf_directory, read_directory

        try:
            hf_config = config if config is not None else read_directory(str(hf_directory(arch))).config
        except HfError as e:
            raise ModelError(str(e)) from None
        return lambda num_classes, inputs: build_hf(hf_config, num_classes)
    if arch in ARCHITECTURES:
        return ARCHITECTURES[arch]
    module_name, _, function_name = arch.partition(":")
    try:
        factory = getattr(importlib.import_module(module_name), function_name)
    except (ImportError, AttributeError) as e:
        raise ModelError(f"cannot import model factory {arch!r}: {e}") from None
    if not callable(factory):
        raise ModelError(f"model factory {arch!r} is not callable")
    return factory


def build_model(
    arch: str,
    num_classes: int,
    inputs: InputSpec = InputSpec(),
    seed: int = 0,
    allow_user_factories: bool = False,
    config: str | None = None,
) -> nn.Module:
    """Build `arch` for `inputs` with weights initialised from `seed` (the global RNG is left
    untouched); `config`: an `hf:DIR` model's config JSON (workers/models/hf.py)."""
    factory = resolve_factory(arch, allow_user_factories, config)
    reads = modality_of(arch)
    if reads is not None and reads != inputs.modality:
        raise ModelError(f"{arch} reads {reads}, the data is {inputs.modality}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = factory(num_classes, inputs)
    if not isinstance(model, nn.Module):
        raise ModelError(f"model factory {arch!r} returned {type(model).__name__}, not a torch.nn.Module")
    return model
