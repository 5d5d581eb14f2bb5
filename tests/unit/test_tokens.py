"""The one bearer check the daemon and the controller service share."""

from __future__ import annotations

from pathlib import Path

import pytest

from deskpod.agentd.app import authorized
from deskpod.agentd.config import AgentdConfig
from deskpod.service.server.service_state import ControllerService
from deskpod.tokens import bearer_refusal, new_token, token_sha256

TOKEN = "k" * 43


def test_a_new_token_is_43_url_safe_characters_and_fresh() -> None:
    tokens = {new_token() for _ in range(8)}
    assert len(tokens) == 8
    assert all(len(t) == 43 and t.replace("-", "").replace("_", "").isalnum() for t in tokens)


@pytest.mark.parametrize(
    ("header", "refusal"),
    [
        (f"Bearer {TOKEN}", None),
        (f"bearer {TOKEN}", None),  # RFC 9110 11.1: the scheme is case-insensitive
        (f"BEARER {TOKEN} ", None),
        (None, "missing token"),
        ("", "missing token"),
        (TOKEN, "missing token"),
        ("Bearer ", "missing token"),
        (f"Basic {TOKEN}", "missing token"),
        ("Bearer " + "x" * 43, "wrong token"),
        (f"Bearer {token_sha256(TOKEN)}", "wrong token"),  # the digest is not the token
    ],
)
def test_bearer_refusal(header: str | None, refusal: str | None) -> None:
    assert bearer_refusal(header, token_sha256(TOKEN)) == refusal


@pytest.mark.parametrize("scheme", ["Bearer", "bearer", "BeArEr"])
def test_the_daemon_and_the_service_agree_on_every_spelling(scheme: str, tmp_path: Path) -> None:
    """They used to differ: the service accepted only ``Bearer``."""
    digest = token_sha256(TOKEN)
    config = AgentdConfig.from_env({"DESKPOD_TOKEN_SHA256": digest})
    service = ControllerService(digest, audit_dir=str(tmp_path / "audit"))
    header = f"{scheme} {TOKEN}"
    assert authorized({"authorization": header}, config) == (True, "ok")
    assert service.authorized(header)
    assert authorized({"authorization": f"{scheme} wrong"}, config) == (False, "wrong token")
    assert not service.authorized(f"{scheme} wrong")
