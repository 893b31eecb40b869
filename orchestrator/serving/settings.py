"""How `congruent serve` serves (batching, the shadow's share, the ledger's chunks) and what each
version replica holds: plain values the deployments, the ledger and the driver share."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RequestLimits:
    """What one request may hold; past a limit the gateway answers 413 (the body) or 400 (the rest)
    in one line, before anything is decoded or sent to a replica."""

    max_body_bytes: int = 16 * 2**20
    max_samples: int = 256
    max_text_chars: int = 100_000  # of one text
    max_image_pixels: int = 4096 * 4096  # of one image, read from its header before any decode
    max_request_pixels: int = 4 * 4096 * 4096  # of all the images of one request, likewise


@dataclass(frozen=True)
class CanaryRule:
    """`congruent serve --canary`: the share of ids the candidate answers, and when it is decided."""

    fraction: float
    max_nfr: float
    min_labelled: int
    confidence: float = 0.95
    auto_promote: bool = False
    max_er_increase: float = 0.0  # the promotion gate's, as `congruent promote --max-er-increase`


@dataclass(frozen=True)
class ServeSettings:
    """How the application serves: batching, the shadow's share, the ledger's chunks."""

    max_batch_size: int = 32
    batch_wait_s: float = 0.005
    shadow_fraction: float = 1.0
    shadow_coalesce_s: float = 0.005  # how long the shadow gathers samples into one candidate call (shadow.py)
    limits: RequestLimits = RequestLimits()
    chunk_rows: int = 512
    flush_s: float = 5.0
    threads: int = 1  # torch threads of a version replica
    call_timeout_s: float = 60.0  # of every call from the gateway to another replica
    max_shadow_bytes: int = 64 * 2**20  # inputs waiting for the candidate (shadow.py)
    max_live_ids: int = 250_000  # ids whose pairs the ledger holds (~70 MB; live_window.py)
    max_live_ids_per_client: int | None = 125_000  # of them, one client's (live_window.py); None: no bound
    canary: CanaryRule | None = None  # the candidate answers a share of ids (canary.py), not a shadow
    allowed_hosts: tuple[str, ...] | None = None  # Host header names answered (served on loopback: its names)


@dataclass(frozen=True)
class Resources:
    """Each version deployment's replicas and what one of them holds."""

    replicas: int = 1
    cpus: float = 1.0
    gpus: float = 0.0
