"""Unit tests for the controller's URL policy."""

from __future__ import annotations

from pathlib import Path

import pytest

from deskpod.controller.policy.policy_file import check_url, redact_url

ALLOWED = ("demo.test", "docs.example.test")


@pytest.mark.parametrize(
    "url, allowed, rule",
    [
        ("http://demo.test/search?q=x", True, "domain_allowed"),
        ("https://api.demo.test/v1", True, "domain_allowed"),
        ("https://DEMO.TEST./", True, "domain_allowed"),
        ("http://evil.test/", False, "domain_not_allowed"),
        ("http://demo.test.evil.test/", False, "domain_not_allowed"),
        ("http://notdemo.test/", False, "domain_not_allowed"),
        ("http://127.0.0.1/", False, "domain_not_allowed"),
        ("data:text/html,<h1>hi</h1>", False, "scheme_refused:data"),
        ("file:///etc/passwd", False, "scheme_refused:file"),
        ("javascript:alert(1)", False, "scheme_refused:javascript"),
        ("chrome://settings/", False, "scheme_refused:chrome"),
        ("about:blank", True, "neutral_page"),
        ("chrome://newtab/", True, "neutral_page"),
        ("", True, "no_url"),
        (" ", False, "scheme_refused:none"),
    ],
)
def test_the_real_url_is_checked_against_the_allowlist(url: str, allowed: bool, rule: str) -> None:
    decision = check_url(url, ALLOWED)
    assert (decision.allowed, decision.rule) == (allowed, rule)


def test_without_a_domain_list_only_schemes_are_refused() -> None:
    assert check_url("http://anything.test/", []).allowed
    assert not check_url("file:///x", []).allowed


def test_credentials_and_tokens_in_urls_are_flagged_and_redacted() -> None:
    decision = check_url("https://user:pw@demo.test/cb?access_token=abc&q=penguin", ALLOWED)
    assert decision.allowed and set(decision.flags) == {"credentials_in_url", "secret_in_query"}
    shown = redact_url("https://user:pw@demo.test:8443/cb?access_token=abc&q=penguin")
    assert shown == "https://[redacted]@demo.test:8443/cb?access_token=%5Bredacted%5D&q=penguin"
    assert "pw" not in shown and "abc" not in shown
    assert redact_url("http://demo.test/search?q=penguin") == "http://demo.test/search?q=penguin"
    assert redact_url(None) is None


def test_exec_policy_keys_are_validated_and_a_client_can_only_tighten_them(tmp_path: Path) -> None:
    from deskpod.controller.policy.policy_file import Policy, load_policy, tightened
    from deskpod.errors import TaskFileError

    assert Policy().exec_confirm == "risky" and Policy().exec_confirm_patterns == []
    bad = tmp_path / "bad.yaml"
    bad.write_text("exec_confirm_patterns: ['re:(unclosed']\n")
    with pytest.raises(TaskFileError, match="regular expression"):
        load_policy(bad)
    bad.write_text("exec_confirm: sometimes\n")
    with pytest.raises(TaskFileError):
        load_policy(bad)
    base = Policy(exec_confirm="risky", exec_confirm_patterns=["git push*"])
    assert tightened(base, Policy(exec_confirm="none")).exec_confirm == "risky"
    merged = tightened(base, Policy(exec_confirm="all", exec_confirm_patterns=["re:^make"]))
    assert merged.exec_confirm == "all" and merged.exec_confirm_patterns == ["git push*", "re:^make"]
    shipped = load_policy(Path(__file__).resolve().parents[2] / "runtime" / "deskpod" / "tasks" / "policy.yaml")
    assert shipped.exec_confirm == "risky"
