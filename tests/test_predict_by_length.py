"""Text inference in length groups (workers/models/predict.py): samples sorted by length, each group
cut to its longest and read at once, the logits put back in the batch's order."""

import torch

from test_hf_models import TEXTS as BERT_TEXTS
from test_hf_models import tiny_bert
from test_text_models import TEXTS, build
from workers.data.encoded import EncodedSplit
from workers.data.input_spec import InputSpec
from workers.data.tokenizer import encode_texts, text_input
from workers.models.hf import build_hf, read_directory
from workers.models.predict import forward_by_length, length_groups, predict_logits
from workers.models.text import TEXT_ARCHITECTURES


class Widths(torch.nn.Module):
    """`model`, recording the shape of every input it reads."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model, self.shapes = model, []

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        self.shapes.append(tuple(ids.shape))
        return self.model(ids)


def test_length_groups_by_hand():
    """Lengths 5, 1, 3, 3, 8 with 8 tokens a group: by length 1, 3 | 3 | 5 | 8 (two rows of 3 are 6
    tokens, a third would be 9; a 5 with a 3 is 10); a sample longer than the budget is a group alone."""
    groups = length_groups(torch.tensor([5, 1, 3, 3, 8]), tokens=8)
    assert [g.tolist() for g in groups] == [[1, 2], [3], [0], [4]]
    assert [g.tolist() for g in length_groups(torch.tensor([2, 2, 2, 2]), tokens=8)] == [[0, 1, 2, 3]]
    assert length_groups(torch.tensor([], dtype=torch.long)) == []


def test_every_text_architecture_gives_the_whole_batchs_logits_reading_each_group_at_its_longest():
    spec = text_input(TEXTS, "wordpiece", vocab_size=400, max_length=32)
    texts = ["Rain", *TEXTS[:9], "Snow.", TEXTS[3] + " " + TEXTS[4]]
    ids, lengths = encode_texts(spec, texts)
    for arch in sorted(TEXT_ARCHITECTURES):
        model = Widths(build(arch, spec, random_linear=True).eval())
        with torch.no_grad():
            whole = model(ids)
            model.shapes.clear()
            grouped = forward_by_length(model, ids, "cpu", tokens=3 * int(lengths.max()))
        assert torch.allclose(grouped, whole, atol=1e-5), arch
        assert len(model.shapes) > 1 and sum(rows for rows, _ in model.shapes) == len(ids)
        assert sum(rows * width for rows, width in model.shapes) < ids.numel(), arch  # less padding read


def test_a_pretrained_encoder_predicts_a_split_as_it_reads_the_whole_batch(tmp_path, monkeypatch):
    """hf: (a tiny BERT): `predict_logits` over a split in length groups equals one forward of each
    inference batch, and reads fewer tokens than the batches padded to their longest."""
    found = read_directory(str(tiny_bert(tmp_path / "bert", BERT_TEXTS)))
    spec = InputSpec(
        "text", tokenizer=found.tokenizer, vocab_size=found.vocab_size, max_length=24, add_special_tokens=True
    )
    texts = [" ".join(BERT_TEXTS[i : i + 1 + i % 5]) for i in range(40)]
    ids, lengths = encode_texts(spec, texts)
    torch.manual_seed(0)
    model = Widths(build_hf(found.config, 2).eval())
    with torch.no_grad():
        whole = torch.cat([model(ids[:16, : int(lengths[:16].max())]), model(ids[16:, : int(lengths[16:].max())])])
    model.shapes.clear()
    monkeypatch.setattr("workers.models.predict.TEXT_FORWARD_TOKENS", 64)
    split = EncodedSplit(ids.int(), lengths)
    logits = predict_logits(model, split, batch_size=16)
    assert torch.allclose(logits, whole, atol=1e-5)
    padded = sum(len(ids[s : s + 16]) * int(lengths[s : s + 16].max()) for s in range(0, 40, 16))
    assert sum(rows * width for rows, width in model.shapes) < padded
