"""Who may call the endpoint: with CONGRUENT_SERVE_TOKEN set where `congruent serve` runs, every
route but `GET /healthz` asks for `Authorization: Bearer TOKEN` (401 otherwise), and the clients
here (`congruent feedback`, the driver's own calls) send it from the same variable.

The gateway is given the token's SHA-256 digest, never the token: its arguments sit in the cluster's
state (Serve keeps them to restart a replica), where anyone who can read the cluster could read a
token. Comparing digests in constant time (`hmac.compare_digest`) tells nothing of the token.
"""

from __future__ import annotations

import hashlib
import hmac
import os

TOKEN_ENV = "CONGRUENT_SERVE_TOKEN"
LOOPBACK = ("127.0.0.1", "localhost", "::1")


def token_digest(token: str | None) -> str | None:
    """The hex SHA-256 of `token`; None when there is none (the endpoint is open)."""
    return hashlib.sha256(token.encode()).hexdigest() if token else None


def authorised(header: str | None, digest: str | None) -> bool:
    """Whether an `Authorization` header value carries the token whose digest is `digest` (any
    header does when there is no token)."""
    if digest is None:
        return True
    scheme, _, token = (header or "").partition(" ")
    presented = token_digest(token.strip()) or ""
    return scheme.lower() == "bearer" and hmac.compare_digest(presented, digest)


def auth_headers() -> dict[str, str]:
    """The header a client here sends: the token of this environment, if any."""
    token = os.environ.get(TOKEN_ENV)
    return {"authorization": f"Bearer {token}"} if token else {}


def open_beyond_this_machine(host: str) -> str | None:
    """Why serving on `host` is refused, in one line: an address other machines reach, with no token."""
    if host in LOOPBACK or os.environ.get(TOKEN_ENV):
        return None
    return (
        f"--host {host} opens the endpoint to other machines: set {TOKEN_ENV} (clients then send "
        "`Authorization: Bearer TOKEN`), or serve on 127.0.0.1"
    )
