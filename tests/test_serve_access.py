"""Who may call the endpoint (orchestrator/serving/access.py) and which champion a gateway serves
when it catches up with the registry (`registry_champion`: at a swap, and when a replica starts
after one), without Ray: the registry and the version applications are stand-ins."""

from __future__ import annotations

import asyncio
import hashlib
from types import SimpleNamespace

import pytest

from orchestrator.cli import main
from orchestrator.serving import access
from orchestrator.serving.deployments import ChampionUnavailable, registry_champion
from orchestrator.tracking import registry
from reliability_records import record


def test_only_the_token_s_bearer_is_authorised_and_no_token_means_open():
    digest = access.token_digest("s3cret-token")
    assert digest == hashlib.sha256(b"s3cret-token").hexdigest()
    assert access.authorised("Bearer s3cret-token", digest)
    assert access.authorised("bearer  s3cret-token ", digest)  # the scheme is case-insensitive
    for header in (None, "", "Bearer", "Bearer wrong", "Basic s3cret-token", "s3cret-token", f"Bearer {digest}"):
        assert not access.authorised(header, digest), header
    assert access.token_digest(None) is None and access.token_digest("") is None
    assert access.authorised(None, None)  # no token: the endpoint is open (127.0.0.1 only, below)


def test_clients_here_send_this_environment_s_token(monkeypatch):
    monkeypatch.delenv(access.TOKEN_ENV, raising=False)
    assert access.auth_headers() == {}
    monkeypatch.setenv(access.TOKEN_ENV, "t0ken")
    assert access.auth_headers() == {"authorization": "Bearer t0ken"}


def test_serving_beyond_this_machine_without_a_token_is_refused(monkeypatch, capsys):
    monkeypatch.delenv(access.TOKEN_ENV, raising=False)
    assert main(["serve", "m", "--host", "0.0.0.0"]) == 2
    err = capsys.readouterr().err
    assert "--host 0.0.0.0 opens the endpoint to other machines: set CONGRUENT_SERVE_TOKEN" in err
    assert len(err.strip().splitlines()) == 1
    assert access.open_beyond_this_machine("127.0.0.1") is None
    monkeypatch.setenv(access.TOKEN_ENV, "t0ken")
    assert access.open_beyond_this_machine("0.0.0.0") is None


class _Application:
    """A version's application: answers `describe` at once, after `delay_s`, or not at all (None)."""

    def __init__(self, version: str, delay_s: float | None = 0.0) -> None:
        self.version, self.delay_s = version, delay_s
        self.describe = SimpleNamespace(remote=self._describe)

    async def _describe(self) -> dict:
        if self.delay_s is None:
            await asyncio.Event().wait()  # an application that is not deployed: the handle waits
        await asyncio.sleep(self.delay_s or 0)
        return {"version": self.version}


def _registry_names(monkeypatch, version: str | None) -> None:
    def resolve(reference: str):
        if version is None:
            raise ConnectionError("MLflow is down")
        assert reference == "m@champion"
        return SimpleNamespace(name="m", version=version)

    monkeypatch.setattr(registry, "resolve", resolve)


def test_the_gateway_follows_the_registry_s_champion_once_its_application_answers(monkeypatch):
    deployed = {"1": _Application("1"), "2": _Application("2"), "3": _Application("3", delay_s=None)}

    def catch_up(served: str, timeout_s: float = 0.5):
        return asyncio.run(registry_champion("m", served, timeout_s, lambda _model, v: deployed[v]))

    _registry_names(monkeypatch, "1")
    assert catch_up("1") is None  # nothing moved
    _registry_names(monkeypatch, "2")  # v2 promoted and deployed: served from now on
    version, handle, described = catch_up("1")
    assert (version, handle, described) == ("2", deployed["2"], {"version": "2"})
    _registry_names(monkeypatch, "3")  # promoted, its application not up (yet): said, bounded
    with pytest.raises(ChampionUnavailable, match="v3 is not deployed: TimeoutError"):
        catch_up("2")
    _registry_names(monkeypatch, "4")  # promoted, its application unknown to Serve (a handle refused)
    with pytest.raises(ChampionUnavailable, match="v4 is not deployed: KeyError"):
        catch_up("2")
    _registry_names(monkeypatch, None)  # the registry out of reach: said, the served one stays
    with pytest.raises(ChampionUnavailable, match="the registry did not answer: ConnectionError"):
        catch_up("2")


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["--shadow", "2"], "--shadow"),
        (["--canary", "2", "--max-nfr", "0.01"], "--canary"),
        (["--canary", "2", "--max-nfr", "0.01", "--auto-promote"], "--auto-promote"),
    ],
)
def test_a_shadow_or_canary_with_a_serve_token_asks_for_feedback_and_control_tokens_of_their_own(
    monkeypatch, capsys, argv, flag
):
    """With only the serve token set, the feedback and control scopes would take it: labels, and so
    promotions, would be any predicting client's. One line naming the flag, exit 2, before anything
    starts; the same with a feedback token equal to the serve token; distinct tokens pass."""
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    for name in access.SCOPE_ENV.values():
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(access.TOKEN_ENV, "predict-token")
    assert main(["serve", "m", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert f"{flag} lets labels decide what ships: set CONGRUENT_FEEDBACK_TOKEN and CONGRUENT_CONTROL_TOKEN" in err
    assert len(err.splitlines()) == 1
    monkeypatch.setenv("CONGRUENT_FEEDBACK_TOKEN", "predict-token")
    monkeypatch.setenv("CONGRUENT_CONTROL_TOKEN", "control-token")
    assert access.scopes_not_their_own(flag) is not None
    monkeypatch.setenv("CONGRUENT_FEEDBACK_TOKEN", "feedback-token")
    assert access.scopes_not_their_own(flag) is None
    for name in access.SCOPE_ENV.values():
        monkeypatch.delenv(name)
    assert access.scopes_not_their_own(flag) is None  # no token at all: open on this machine only
    if flag == "--auto-promote":  # one row for the three flags
        record("serving_security", check="serve --shadow, --canary and --auto-promote refuse, in one line naming "
               "the flag, a serve token without feedback and control tokens of their own", passed=True)  # fmt: skip
