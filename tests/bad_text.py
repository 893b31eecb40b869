"""The bad-input corpus's text cases: malformed text tables through `congruent run`, each one line
naming the problem (and, for bytes of another encoding, the option to set), exit 2, before Ray."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from bad_inputs import BadInput, _run_spec, _with


def _table(name: str, content: str | bytes, **data: object) -> Callable[[Path, object], dict]:
    """A text-bag spec over the table `name` holding `content`."""

    def document(folder: Path, assets: object) -> dict:
        path = folder / name
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
        return _with(arch="text-bag", data={"path": str(path), **data})

    return document


ROWS = "".join(f"text {i} is {'good' if i % 2 else 'bad'},{'pos' if i % 2 else 'neg'}\n" for i in range(40))

TEXT_CASES = [
    BadInput(
        "text-missing-column",
        "no column 'text'; the columns are 'body', 'label'",
        _run_spec("no-column", _table("t.csv", "body,label\nhello,pos\nbye,neg\n")),
    ),
    BadInput(
        "text-empty-text",
        "empty text in column 'text'",
        _run_spec("empty-text", _table("t.csv", "text,label\n" + ROWS + ",pos\n")),
    ),
    BadInput(
        "text-one-class",
        "a classifier needs at least two classes",
        _run_spec("one-class", _table("t.csv", "text,label\n" + "".join(f"t{i},pos\n" for i in range(30)))),
    ),
    BadInput(
        "text-not-utf8",
        "set data.encoding to the file's encoding",
        _run_spec("latin", _table("t.csv", ("text,label\n" + ROWS + "caf\xe9,pos\n").encode("latin-1"))),
    ),
    BadInput(
        "text-malformed-jsonl-line",
        "line 3: not valid JSON",
        _run_spec(
            "jsonl",
            _table(
                "t.jsonl",
                json.dumps({"text": "a", "label": 0}) + "\n" + json.dumps({"text": "b", "label": 1}) + "\n{not json\n",
            ),
        ),
    ),
    BadInput(
        "text-ragged-csv-row",
        "line 3: 3 fields, the header has 2",
        _run_spec("ragged", _table("t.csv", "text,label\nhello,pos\nbye,neg,extra\n")),
    ),
    BadInput(
        "text-image-architecture",
        "arch: mlp-small reads image, the data is text",
        _run_spec(
            "image-arch", lambda folder, a: {**_table("t.csv", "text,label\n" + ROWS)(folder, a), "arch": "mlp-small"}
        ),
    ),
]
