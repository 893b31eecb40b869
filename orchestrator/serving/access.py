"""Who may call the endpoint: with CONGRUENT_SERVE_TOKEN set where `congruent serve` runs, every
route but `GET /healthz` asks for `Authorization: Bearer TOKEN` (401 otherwise), and the clients
here (`congruent feedback`, the driver's own calls) send it from the same variable.

Three scopes, so that a client allowed to predict cannot steer the live gate nor watch it: `predict`
(`/predict`: CONGRUENT_SERVE_TOKEN), `feedback` (`/feedback`, `/live`, `/status`:
CONGRUENT_FEEDBACK_TOKEN) and `control`
(`/champion`, `/flush`: CONGRUENT_CONTROL_TOKEN). A scope whose variable is not set takes the serve
token (`congruent serve` says so when a serve token is set without the other two).

The gateway is given the token's SHA-256 digest, never the token: its arguments sit in the cluster's
state (Serve keeps them to restart a replica), where anyone who can read the cluster could read a
token. Comparing digests in constant time (`hmac.compare_digest`) tells nothing of the token.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import urllib.parse

from starlette.requests import Request
from starlette.responses import JSONResponse

TOKEN_ENV = "CONGRUENT_SERVE_TOKEN"
SCOPE_ENV = {"predict": TOKEN_ENV, "feedback": "CONGRUENT_FEEDBACK_TOKEN", "control": "CONGRUENT_CONTROL_TOKEN"}
LOOPBACK = ("127.0.0.1", "localhost", "::1")


def token_digest(token: str | None) -> str | None:
    """The hex SHA-256 of `token`; None when there is none (the endpoint is open)."""
    return hashlib.sha256(token.encode()).hexdigest() if token else None


def scope_token(scope: str) -> str | None:
    """The token of `scope` in this environment: its own variable's, else the serve token."""
    return os.environ.get(SCOPE_ENV[scope]) or os.environ.get(TOKEN_ENV) or None


def scope_digests() -> dict[str, str | None]:
    """What the gateway is given: each scope's token digest (None: that scope is open)."""
    return {scope: token_digest(scope_token(scope)) for scope in SCOPE_ENV}


def shared_scopes() -> list[str]:
    """The scopes that take the serve token because their own variable is not set (none without one)."""
    if not os.environ.get(TOKEN_ENV):
        return []
    return [scope for scope, name in SCOPE_ENV.items() if scope != "predict" and not os.environ.get(name)]


def scopes_not_their_own(flag: str) -> str | None:
    """Why `flag` (--shadow, --canary, --auto-promote: labels then decide what ships) cannot start, in
    one line: with a predict token set, the feedback and control tokens must be set and differ from it
    and from each other, or a client that may predict could label and promote. None without any token
    (an endpoint open on this machine: `open_beyond_this_machine` keeps it there)."""
    tokens = {scope: os.environ.get(name) or None for scope, name in SCOPE_ENV.items()}
    if tokens["predict"] is None:
        return None
    values = list(tokens.values())
    if None not in values and len(set(values)) == len(values):
        return None
    return (
        f"{flag} lets labels decide what ships: set {SCOPE_ENV['feedback']} and {SCOPE_ENV['control']}, each "
        f"other than {TOKEN_ENV} and each other, so that a client that may predict cannot label or promote"
    )


def authorised(header: str | None, digest: str | None) -> bool:
    """Whether an `Authorization` header value carries the token whose digest is `digest` (any
    header does when there is no token)."""
    if digest is None:
        return True
    scheme, _, token = (header or "").partition(" ")
    presented = token_digest(token.strip()) or ""
    return scheme.lower() == "bearer" and hmac.compare_digest(presented, digest)


def auth_headers(scope: str = "predict") -> dict[str, str]:
    """The header a client here sends for a route of `scope`: that scope's token in this
    environment, if any."""
    token = scope_token(scope)
    return {"authorization": f"Bearer {token}"} if token else {}


def open_beyond_this_machine(host: str) -> str | None:
    """Why serving on `host` is refused, in one line: an address other machines reach, with no token."""
    if host in LOOPBACK or scope_token("predict"):
        return None
    return (
        f"--host {host} opens the endpoint to other machines: set {TOKEN_ENV} (clients then send "
        "`Authorization: Bearer TOKEN`), or serve on 127.0.0.1"
    )


def host_name(header: str | None) -> str | None:
    """The name of a `Host` header ("127.0.0.1:8000" → "127.0.0.1", "[::1]:8000" → "::1"); None when
    there is none."""
    if not header:
        return None
    try:
        return urllib.parse.urlsplit(f"//{header}").hostname
    except ValueError:
        return None


def refusal(
    request: Request, digests: dict[str, str | None], scope: str, hosts: tuple[str, ...] | None = None
) -> JSONResponse | None:
    """A 403 when `hosts` is given and the request's `Host` names none of them: an endpoint served on
    loopback answers only its loopback names, so a web page whose name was rebound to 127.0.0.1 (DNS
    rebinding) cannot call it; a 401 when the request does not carry the token of the route's `scope`
    (access.py); a 415 for a POST whose body is not declared JSON: a web page can send a cross-origin
    `text/plain` POST without asking first, never an `application/json` one."""
    if hosts is not None and host_name(request.headers.get("host")) not in hosts:
        problem = f"this endpoint answers requests to {', '.join(hosts)} only, not {request.headers.get('host')!r}"
        return JSONResponse({"error": problem}, 403)
    if not authorised(request.headers.get("authorization"), digests.get(scope)):
        env = SCOPE_ENV[scope]
        problem = f"this route asks for `Authorization: Bearer TOKEN` (the {scope} token: {env} it was started with)"
        return JSONResponse({"error": problem}, 401, headers={"www-authenticate": "Bearer"})
    media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if request.method == "POST" and media_type != "application/json":
        problem = f"POST bodies are JSON: send `content-type: application/json`, not {media_type or 'none'!r}"
        return JSONResponse({"error": problem}, 415)
    return None
