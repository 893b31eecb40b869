"""What one request may hold (orchestrator/serving/settings.py `RequestLimits`), without Ray: a body
over its limit is refused before the rest of it is read (413), a text over its length and an image
whose header declares more pixels than allowed are refused in one line (400) before any decode; the
shadow holds a bounded number of bytes for a hung candidate, whose calls time out, and pairs the
samples of a call that the candidate can read."""

from __future__ import annotations

import asyncio
import base64
import struct
import zlib

import numpy as np
import pytest
from PIL import Image
from starlette.requests import Request

from orchestrator.serving.requests import BodyTooLarge, RequestError, image_pixels, parse_predict, read_json
from orchestrator.serving.settings import RequestLimits
from reliability_records import record
from test_serving import png


def png_header(width: int, height: int) -> bytes:
    """A PNG's signature and IHDR chunk declaring `width`×`height` grey pixels, and no pixel data:
    what a decompression bomb shows before anything is inflated."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IEND", b"")


def body(value: str) -> dict:
    return {"inputs": [value]}


def test_an_image_declaring_too_many_pixels_is_refused_from_its_header_without_decoding(monkeypatch):
    def no_decoding(self, *args, **kwargs):
        raise AssertionError("a pixel was decoded")

    small = png(np.zeros((28, 28), np.uint8))  # encoded before decoding is forbidden
    monkeypatch.setattr(Image.Image, "load", no_decoding)
    limits = RequestLimits(max_image_pixels=4096 * 4096)
    assert image_pixels(png_header(5000, 5000)) == 25_000_000
    with pytest.raises(RequestError, match=r"input 0: 25,000,000 pixels; at most 16,777,216 \(--max-image-pixels\)"):
        parse_predict(body(base64.b64encode(png_header(5000, 5000)).decode()), "image", limits)
    # past what PIL opens at all (2 × its MAX_IMAGE_PIXELS): 900 million pixels in a 45-byte header
    assert len(png_header(30_000, 30_000)) == 45  # the size docs/guide/serve.md and the record give
    with pytest.raises(RequestError, match="input 0: more pixels than PIL opens; at most 16,777,216"):
        parse_predict(body(base64.b64encode(png_header(30_000, 30_000)).decode()), "image", limits)
    assert image_pixels(small) == 784
    [sample] = parse_predict(body(base64.b64encode(small).decode()), "image", RequestLimits(max_image_pixels=784))
    assert sample.payload == small
    with pytest.raises(RequestError, match="784 pixels; at most 783"):
        parse_predict(body(base64.b64encode(small).decode()), "image", RequestLimits(max_image_pixels=783))
    record("serving_security", check="a decompression bomb (900 million pixels declared in a 45-byte PNG header) is "
           "refused with 400 from its header, before any pixel is decoded", passed=True)  # fmt: skip


def test_a_request_of_many_images_each_within_the_bound_is_refused_by_their_sum(monkeypatch):
    """Each 4096² header is within --max-image-pixels, but a 16 MB body holds thousands of them (~4 Gpx
    of decoding asked for): the sum of the request's declared pixels is bounded too, before any decode."""

    def no_decoding(self, *args, **kwargs):
        raise AssertionError("a pixel was decoded")

    monkeypatch.setattr(Image.Image, "load", no_decoding)
    header = base64.b64encode(png_header(4096, 4096)).decode()
    limits = RequestLimits(max_samples=256)
    assert limits.max_request_pixels == 4 * 4096 * 4096
    parse_predict({"inputs": [header] * 4}, "image", limits)
    with pytest.raises(RequestError, match=r"inputs 0 to 4: 83,886,080 pixels; at most 67,108,864 in one request"):
        parse_predict({"inputs": [header] * 200}, "image", limits)
    record("serving_security", check="a request of many images each within --max-image-pixels is refused (400) "
           "once their declared pixels pass --max-request-pixels, before any decode", passed=True)  # fmt: skip


def test_a_text_over_its_length_and_too_many_samples_are_refused_in_one_line():
    limits = RequestLimits(max_text_chars=10, max_samples=2)
    assert [s.payload for s in parse_predict(body("x" * 10), "text", limits)] == ["x" * 10]
    with pytest.raises(RequestError, match=r"input 0: 11 characters; at most 10 \(--max-text-chars\)"):
        parse_predict(body("x" * 11), "text", limits)
    with pytest.raises(RequestError, match=r"3 samples in one request; at most 2 \(--max-samples\)"):
        parse_predict({"inputs": ["a", "b", "c"]}, "text", limits)


def streamed(chunks: list[bytes], headers: list[tuple[bytes, bytes]] | None = None) -> tuple[Request, list[int]]:
    """A POST whose body arrives in `chunks`; the count of chunks the server read."""
    read = [0]

    async def receive() -> dict:
        index = read[0]
        read[0] += 1
        last = index >= len(chunks) - 1
        return {"type": "http.request", "body": chunks[index] if index < len(chunks) else b"", "more_body": not last}

    scope = {"type": "http", "method": "POST", "path": "/", "headers": headers or [], "query_string": b""}
    return Request(scope, receive), read


def test_a_body_over_its_limit_is_refused_before_the_rest_of_it_is_read():
    limit = 1000
    request, read = streamed([b'{"inputs": ["' + b"x" * 600, b"x" * 600, b"x" * 600, b'"]}'])  # chunked: no length
    with pytest.raises(BodyTooLarge, match=r"more than 1,000 bytes \(--max-body-mb\)") as refused:
        asyncio.run(read_json(request, limit))
    assert refused.value.status == 413 and read[0] == 2  # the third and fourth chunks were never read
    declared, read = streamed([b"{}"], [(b"content-length", b"5000000")])
    with pytest.raises(BodyTooLarge):
        asyncio.run(read_json(declared, limit))
    assert read[0] == 0  # refused on the length it declared
    fits, _ = streamed([b'{"inputs": ', b'["a"]}'])
    assert asyncio.run(read_json(fits, limit)) == {"inputs": ["a"]}
    not_json, _ = streamed([b"inputs=a"])
    with pytest.raises(RequestError, match="the body is not JSON") as bad:
        asyncio.run(read_json(not_json, limit))
    assert bad.value.status == 400
    record("serving_security", check="a body over --max-body-mb gets 413 once it declares or has sent more: the "
           "rest is never read", passed=True)  # fmt: skip


def shadow_samples(ids: list[str], size: int = 0) -> list:
    from orchestrator.serving.requests import Sample, digest

    return [Sample(i, i if not size else i.ljust(size, "x"), digest(i)) for i in ids]


def test_a_hung_candidate_holds_no_more_than_the_shadow_s_bytes_and_each_call_times_out():
    from orchestrator.serving.shadow import Shadow

    calls = []

    async def hung(payloads):
        calls.append(len(payloads))
        await asyncio.Event().wait()

    async def ledger(rows):
        raise AssertionError("nothing is paired while the candidate hangs")

    async def scenario():
        shadow = Shadow(hung, ledger, 1.0, max_queued_bytes=10_000, timeout_s=0.3, coalesce_s=0.001)
        shadow.send(shadow_samples([f"first-{i}" for i in range(10)], 1000), [(0, 0.9)] * 10, 1.0)
        await asyncio.sleep(0.05)  # taken into the hung call
        held = []
        for n in range(100):
            shadow.send(shadow_samples([f"s{n}"], 1000), [(0, 0.9)], 2.0)
            held.append(shadow.queued_bytes)
        assert max(held) <= 10_000 and shadow.queued_bytes == 10_000 and shadow.dropped == 90
        await asyncio.sleep(0.4)  # the first call timed out: counted, and the next batch is asked
        assert shadow.failures == 1 and calls == [10, 10] and shadow.queued_bytes == 0
        record("serving_security", check="a hung candidate: the gateway holds at most --max-shadow-mb of inputs for "
               "it (the oldest dropped, counted) and each call to it times out", passed=True)  # fmt: skip
        for task in shadow.tasks:
            task.cancel()

    asyncio.run(scenario())


def test_a_sample_the_candidate_cannot_read_is_counted_and_the_others_of_its_call_are_paired():
    from orchestrator.serving.shadow import Shadow

    taken: list[str] = []

    async def picky(payloads):
        if "unreadable" in payloads:
            return RequestError("input 1: not an image PIL can read")
        return "2", [(1, 0.5)] * len(payloads)

    async def ledger(rows):
        taken.extend(row["id"] for row in rows)

    async def scenario():
        shadow = Shadow(picky, ledger, 1.0, coalesce_s=0.01)
        shadow.send(shadow_samples(["ok-1", "unreadable", "ok-2"]), [(0, 0.9)] * 3, 1.0)
        await shadow.drain(timeout=5)
        assert taken == ["ok-1", "ok-2"] and (shadow.unreadable, shadow.failures) == (1, 0)

    asyncio.run(scenario())
