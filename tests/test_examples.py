"""The shipped example specs, one per kind of update users have, checked with `congruent check` in
chain order — each v2 against the v1 an earlier example registers — from a folder holding what
they read: colour photos, torchvision's weights file in its cache (fresh weights in torchvision's
own format), a Hugging Face model directory; the text examples read the corpus and the encoder `make` installs."""

from pathlib import Path

import torch
from PIL import Image

from orchestrator.cli import main

FOLDER = Path(__file__).resolve().parent.parent / "pipelines" / "examples"
ORDER = [  # chain order: each spec's old names a model an earlier one registers
    "v1-small.yaml",
    "elodi-small.yaml",
    "tune-small.yaml",
    "fine-tune-from-old.yaml",
    "tickets-v1.yaml",
    "tickets-v2-elodi.yaml",
    "photos-v1.yaml",
    "hf-v1.yaml",
    "minilm-v1.yaml",
    "minilm-v2-lora.yaml",
]


def test_the_chain_order_names_every_example():
    assert sorted(ORDER) == sorted(p.name for p in FOLDER.glob("*.yaml"))


def photos(folder: Path) -> None:
    """An ImageFolder of two classes, 12 colour images each, of assorted sizes."""
    generator = torch.Generator().manual_seed(0)
    for label, colour in (("cats", (200, 120, 40)), ("dogs", (40, 90, 200))):
        (folder / label).mkdir(parents=True)
        for i in range(12):
            size = (48 + 8 * i, 40 + 4 * i)
            noise = torch.randint(0, 60, (size[1], size[0], 3), generator=generator)
            pixels = (torch.tensor(colour) + noise).clamp(0, 255).to(torch.uint8).numpy()
            Image.fromarray(pixels, "RGB").save(folder / label / f"{i}.png")


def test_every_example_passes_congruent_check_in_chain_order(tmp_path, monkeypatch, capsys):
    from torchvision.models import resnet18

    from test_hf_models import tiny_bert
    from workers.data import load_splits

    monkeypatch.chdir(tmp_path)  # the examples' relative paths: photos/, models/my-bert, runs
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    photos(tmp_path / "photos")
    cache = tmp_path / "torch" / "hub" / "checkpoints"
    cache.mkdir(parents=True)
    torch.save(resnet18(weights=None).state_dict(), cache / "resnet18-f37072fd.pth")
    tiny_bert(tmp_path / "models" / "my-bert", list(load_splits("tweet-sentiment").train.texts[:400]), labels=3)
    code = main(["check", *(str(FOLDER / name) for name in ORDER)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    lines = captured.out.strip().splitlines()
    assert [line.split(": ok: ")[0] for line in lines] == [str(FOLDER / name) for name in ORDER]
    assert "old tickets@champion" in lines[ORDER.index("tickets-v2-elodi.yaml")]
    assert not (tmp_path / "mlflow.db").exists()  # checked before any version exists: nothing registered
