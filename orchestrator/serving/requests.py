"""What `POST /predict` and `POST /feedback` hold, checked into plain values (no Ray, no torch), each
within the endpoint's `RequestLimits` (settings.py).

    POST /predict   {"inputs": [x, ...], "ids": [id, ...]}   or   {"input": x, "id": id}
    POST /feedback  {"labels": [{"id": id, "label": k}, ...]}   or   {"id": id, "label": k}

x is a text (a text model) or an image's encoded bytes as base64 (PNG, JPEG, …: an image model). Ids
are the caller's (strings); without them the gateway draws one per sample. A body that is not one
of these raises RequestError, which the gateway answers with HTTP 400 and its one line.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import json
import uuid
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request

from orchestrator.serving.settings import RequestLimits

MAX_ID_LENGTH = 200


class RequestError(ValueError):
    """A request body that cannot be served, in one line (answered with `status`)."""

    status = 400


class BodyTooLarge(RequestError):
    """A body over `RequestLimits.max_body_bytes`: refused before it is all read (HTTP 413)."""

    status = 413


@dataclass(frozen=True)
class Sample:
    """One sample of a request: its id, its input (a text, or an encoded image's bytes) and the
    input's digest (sha256, first 32 hex digits), which the live ledger keeps instead of the input."""

    id: str
    payload: str | bytes
    digest: str
    client: str = ""  # a digest of the peer that sent it (`client_of`): its ids in the live window are bounded


def digest(payload: str | bytes) -> str:
    data = payload.encode() if isinstance(payload, str) else payload
    return hashlib.sha256(data).hexdigest()[:32]


def client_of(request: Any) -> str:
    """Who sent a request, as the live window counts clients: a digest of the peer's address the
    proxy saw (never a header the client writes); "" when the server knows none."""
    peer = getattr(request, "client", None)
    return digest(f"peer:{peer.host}")[:16] if peer is not None and peer.host else ""


def _id(value: Any, where: str) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise RequestError(f"{where}: an id is a string or an integer, not {type(value).__name__}")
    text = str(value)
    if not text or len(text) > MAX_ID_LENGTH:
        raise RequestError(f"{where}: an id holds 1 to {MAX_ID_LENGTH} characters")
    return text


def _payload(value: Any, modality: str, where: str, limits: RequestLimits) -> tuple[str | bytes, int]:
    """A sample's payload within `limits`, and the pixels its image header declares (0 for a text)."""
    if not isinstance(value, str):
        raise RequestError(f"{where}: expected a {'text' if modality == 'text' else 'base64 image'} string")
    if modality == "text":
        if len(value) > limits.max_text_chars:
            most = f"at most {limits.max_text_chars:,} (--max-text-chars)"
            raise RequestError(f"{where}: {len(value):,} characters; {most}")
        return value, 0
    try:
        data = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise RequestError(f"{where}: not base64 (an image is sent as its encoded bytes in base64)") from None
    pixels = image_pixels(data)
    if pixels is None or pixels > limits.max_image_pixels:
        declared = "more pixels than PIL opens" if pixels is None else f"{pixels:,} pixels"
        problem = f"{declared}; at most {limits.max_image_pixels:,} (--max-image-pixels)"
        raise RequestError(f"{where}: {problem}, refused before decoding")
    return data, pixels


def image_pixels(data: bytes) -> int | None:
    """Width × height an encoded image's header declares, read without decoding a pixel (PIL opens
    lazily); None when it declares more than PIL opens at all (its DecompressionBombError); 0 when PIL
    cannot identify it (the version's decode says why)."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as image:
            width, height = image.size
    except Image.DecompressionBombError:
        return None
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError):
        return 0
    return width * height


def parse_predict(body: Any, modality: str, limits: RequestLimits, client: str = "") -> list[Sample]:
    """The samples of a /predict body (module docstring) for a model reading `modality`, each within
    `limits`, sent by `client` (`client_of`)."""
    if not isinstance(body, dict):
        raise RequestError("the body is a JSON object with `inputs` (a list) or `input`")
    if ("inputs" in body) == ("input" in body):
        raise RequestError("give `inputs` (a list) or `input` (one sample), not both or neither")
    single = "input" in body
    inputs = [body["input"]] if single else body["inputs"]
    ids = [body["id"]] if single and "id" in body else body.get("ids")
    if not isinstance(inputs, list) or not inputs:
        raise RequestError("`inputs` is a non-empty list")
    if len(inputs) > limits.max_samples:
        raise RequestError(f"{len(inputs)} samples in one request; at most {limits.max_samples} (--max-samples)")
    if ids is not None and (not isinstance(ids, list) or len(ids) != len(inputs)):
        raise RequestError("`ids` is a list with one id per input")
    samples, pixels = [], 0
    for i, value in enumerate(inputs):
        payload, declared = _payload(value, modality, f"input {i}", limits)
        pixels += declared
        if pixels > limits.max_request_pixels:
            most = f"at most {limits.max_request_pixels:,} in one request (--max-request-pixels)"
            raise RequestError(f"inputs 0 to {i}: {pixels:,} pixels; {most}, refused before decoding")
        sample_id = _id(ids[i], f"id {i}") if ids is not None else uuid.uuid4().hex
        samples.append(Sample(sample_id, payload, digest(payload), client))
    return samples


def parse_feedback(body: Any, num_classes: int) -> list[tuple[str, int]]:
    """(id, label) pairs of a /feedback body; labels are class ids of the served model."""
    if not isinstance(body, dict):
        raise RequestError("the body is a JSON object with `labels` (a list) or `id` and `label`")
    entries = body.get("labels", [body] if "id" in body else None)
    if not isinstance(entries, list) or not entries:
        raise RequestError("give `labels`, a non-empty list of {id, label}, or one `id` and `label`")
    pairs = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or "id" not in entry or "label" not in entry:
            raise RequestError(f"label {i}: an object with `id` and `label`")
        label = entry["label"]
        if isinstance(label, bool) or not isinstance(label, int) or not 0 <= label < num_classes:
            raise RequestError(f"label {i}: a class id in 0..{num_classes - 1}, not {label!r}")
        pairs.append((_id(entry["id"], f"label {i}"), label))
    return pairs


def wants_relabel(body: Any) -> bool:
    """Whether a /feedback body asks that its labels replace those its ids have (`"relabel": true`);
    without it, an id's first label stands."""
    relabel = body.get("relabel", False) if isinstance(body, dict) else False
    if not isinstance(relabel, bool):
        raise RequestError(f"`relabel` is true or false, not {relabel!r}")
    return relabel


def shadowed(sample_id: str, fraction: float) -> bool:
    """Whether a sample goes to the shadow too: a `fraction` of ids, decided by the id alone (the
    same id always is, or never is, whichever replica answers it)."""
    if fraction >= 1:
        return True
    draw = int.from_bytes(hashlib.sha256(sample_id.encode()).digest()[:8], "big") / 2**64
    return draw < fraction


async def read_json(request: Request, max_bytes: int) -> Any:
    """The body as JSON; BodyTooLarge as soon as it declares or has sent more than `max_bytes` (the
    rest is never read), RequestError when it is not JSON."""
    too_large = BodyTooLarge(f"the body holds more than {max_bytes:,} bytes (--max-body-mb)")
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise too_large
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_bytes:
            raise too_large
        chunks.append(chunk)
    try:
        return json.loads(b"".join(chunks))
    except ValueError:
        raise RequestError("the body is not JSON") from None
