"""The stack's own setup steps, run as one-shot services of docker-compose.yml (in the mlflow image,
which copies this file) and by the tests' native topology (tests/servers.py): the standard library,
and psycopg for lock-role.

    python stack_setup.py new-env [TEMPLATE]      # .env.example with every placeholder replaced
    python stack_setup.py check-secrets NAME...   # refuse placeholder, short or unquotable secrets
    python stack_setup.py pipeline-user           # the MLflow user jobs run as: created, not admin
    python stack_setup.py lock-role               # the PostgreSQL role the registry's locks use
    python stack_setup.py accounts                # lock-role, then pipeline-user

`check-secrets` reads the named variables from its environment and exits 2 with one line per bad one:
unset, a `change-me` placeholder, under MIN_SECRET_CHARS, outside SECRET_CHARS (the values go
into SeaweedFS's JSON identities and MLflow's ini file unquoted), or the same as another's. `pipeline-user` logs in to
MLFLOW_TRACKING_URI as MLFLOW_ADMIN_USERNAME and makes MLFLOW_PIPELINE_USERNAME a non-admin user
with MLFLOW_PIPELINE_PASSWORD (created, or its password and admin flag reset when it exists); what
that user may touch is MLflow's basic-auth default (READ) plus MANAGE on what it creates.
`lock-role` logs in to PostgreSQL (POSTGRES_HOST, POSTGRES_PORT, POSTGRES_USER, POSTGRES_PASSWORD,
POSTGRES_DB) and makes POSTGRES_LOCK_USERNAME a login role with POSTGRES_LOCK_PASSWORD and no other
right: it takes the registry's advisory locks (orchestrator/tracking/pg_locks.py; they need no
privilege) and reads none of MLflow's tables.
"""

from __future__ import annotations

import base64
import json
import os
import re
import secrets
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

PLACEHOLDER = "change-me"
MIN_SECRET_CHARS = 16
SECRET_CHARS = re.compile(r"[A-Za-z0-9+/=_.-]+")
READY_WAIT_S = 120  # how long pipeline-user waits for the MLflow server to answer /health


def secret_problem(name: str, value: str | None) -> str | None:
    """Why the secret `name` = `value` must not be used, or None."""
    if not value:
        return f"{name} is not set"
    if PLACEHOLDER in value.lower():
        return f"{name} is still the placeholder of .env.example: set a secret of your own"
    if len(value) < MIN_SECRET_CHARS:
        return f"{name} has {len(value)} characters: use at least {MIN_SECRET_CHARS}"
    if not SECRET_CHARS.fullmatch(value):
        return f"{name} may hold only letters, digits and + / = _ . -"
    return None


def check_secrets(names: list[str], env: dict[str, str]) -> list[str]:
    """One line per variable of `names` whose value in `env` must not be used, and one per variable
    whose value an earlier one already has (each secret its own: a serve token that is also the
    feedback token lets every predicting client label)."""
    problems = [problem for name in names if (problem := secret_problem(name, env.get(name)))]
    first: dict[str, str] = {}
    for name in names:
        value = env.get(name)
        if value and value in first:
            problems.append(f"{name} is the same as {first[value]}: each secret must be its own")
        elif value:
            first[value] = name
    return problems


def new_env(template: str) -> str:
    """`template` (.env.example) with every placeholder value replaced by a fresh random secret."""
    lines = []
    for line in template.splitlines():
        name, sep, value = line.partition("=")
        if sep and not line.lstrip().startswith("#") and PLACEHOLDER in value:
            line = f"{name}={secrets.token_urlsafe(24)}"
        lines.append(line)
    return "\n".join(lines) + "\n"


def _call(uri: str, path: str, method: str, body: dict, user: str, password: str) -> tuple[int, dict]:
    login = base64.b64encode(f"{user}:{password}".encode()).decode()
    request = urllib.request.Request(
        uri.rstrip("/") + path,
        data=json.dumps(body).encode(),
        method=method,
        headers={"Content-Type": "application/json", "Authorization": f"Basic {login}"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as error:
        text = error.read().decode(errors="replace")
        try:
            return error.code, json.loads(text)
        except ValueError:
            return error.code, {"message": text}


def _wait_for_health(uri: str, wait_s: float) -> None:
    deadline = time.monotonic() + wait_s
    while True:
        try:
            with urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=10):
                return
        except (urllib.error.URLError, OSError):
            if time.monotonic() > deadline:
                raise SystemExit(f"pipeline-user: no answer from {uri}/health in {wait_s:.0f} s") from None
            time.sleep(2)


def pipeline_user(env: dict[str, str], wait_s: float = READY_WAIT_S) -> str:
    """Make the pipeline's MLflow user exist with the given password and no admin rights."""
    uri = env["MLFLOW_TRACKING_URI"]
    admin = (env["MLFLOW_ADMIN_USERNAME"], env["MLFLOW_ADMIN_PASSWORD"])
    user, password = env["MLFLOW_PIPELINE_USERNAME"], env["MLFLOW_PIPELINE_PASSWORD"]
    if user == admin[0]:
        raise SystemExit("pipeline-user: MLFLOW_PIPELINE_USERNAME must not be the admin account")
    _wait_for_health(uri, wait_s)
    account = {"username": user, "password": password}
    status, answer = _call(uri, "/api/2.0/mlflow/users/create", "POST", account, *admin)
    if status == 200:
        return f"pipeline-user: created MLflow user {user} (not admin)"
    if answer.get("error_code") != "RESOURCE_ALREADY_EXISTS":
        raise SystemExit(f"pipeline-user: creating {user} failed: HTTP {status} {answer.get('message', '')[:200]}")
    for path, method, body in (
        ("/api/2.0/mlflow/users/update-password", "PATCH", account),
        ("/api/2.0/mlflow/users/update-admin", "PATCH", {"username": user, "is_admin": False}),
    ):
        status, answer = _call(uri, path, method, body, *admin)
        if status != 200:
            raise SystemExit(
                f"pipeline-user: {path} for {user} failed: HTTP {status} {answer.get('message', '')[:200]}"
            )
    return f"pipeline-user: MLflow user {user} exists; its password is reset and it is not admin"


def lock_role(env: dict[str, str]) -> str:
    """Make the lock role exist with the given password and only LOGIN (module docstring)."""
    import psycopg
    from psycopg import sql

    role, password = env["POSTGRES_LOCK_USERNAME"], env["POSTGRES_LOCK_PASSWORD"]
    if role == env["POSTGRES_USER"]:
        raise SystemExit("lock-role: POSTGRES_LOCK_USERNAME must not be POSTGRES_USER (the database's owner)")
    admin = {
        "host": env.get("POSTGRES_HOST", "postgres"),
        "port": env.get("POSTGRES_PORT", "5432"),
        "user": env["POSTGRES_USER"],
        "password": env.get("POSTGRES_PASSWORD", ""),
        "dbname": env["POSTGRES_DB"],
    }
    with psycopg.connect(**admin, autocommit=True, connect_timeout=30) as connection:
        exists = connection.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone()
        verb = "ALTER" if exists else "CREATE"
        connection.execute(
            sql.SQL("{} ROLE {} WITH LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION PASSWORD {}").format(
                sql.SQL(verb), sql.Identifier(role), sql.Literal(password)
            )
        )
    return f"lock-role: PostgreSQL role {role} {'updated' if exists else 'created'} (LOGIN only: advisory locks)"


def main(argv: list[str]) -> int:
    command, args = (argv[0], argv[1:]) if argv else ("", [])
    if command == "new-env":
        template = Path(args[0] if args else Path(__file__).resolve().parent.parent / ".env.example")
        sys.stdout.write(new_env(template.read_text()))
        return 0
    if command == "check-secrets" and args:
        problems = check_secrets(args, dict(os.environ))
        for problem in problems:
            print(f"check-secrets: {problem}", file=sys.stderr)
        if not problems:
            print(f"check-secrets: {len(args)} secrets set")
        return 2 if problems else 0
    if command in ("pipeline-user", "lock-role", "accounts"):
        env = dict(os.environ)
        if command in ("lock-role", "accounts"):
            print(lock_role(env), flush=True)
        if command in ("pipeline-user", "accounts"):
            print(pipeline_user(env))
        return 0
    print(__doc__.split("\n\n")[1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
