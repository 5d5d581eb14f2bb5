"""The entries of ``DESKPOD_SERVE_SANDBOXES``: the sandboxes ``deskpod serve`` vouches for or owns.

The variable is a comma-separated list (a TOML list of strings in the configuration
file) of entries, each in one of three forms:

- ``URL`` (``ws://sandbox:8765/v1/ws``): a sandbox the service *vouches for*. A session
  on it (its opener gives this URL and the sandbox's token) may type host-held secrets
  and ask a person for a credential; the service neither holds its token nor resets it.
- ``NAME=URL token_file=PATH [token_env=VAR]`` (``stack=ws://sandbox:8765/v1/ws
  token_file=/var/lib/deskpod/sandbox/stack.token token_env=DESKPOD_TOKEN``): a sandbox
  the service *owns*, vouched for too. An agent opens a session on it by ``NAME`` and
  never holds its token: the service reads the token in force from ``token_file``
  (its first line), resets the sandbox before each session (the reset rotates the token)
  and writes the new one back to ``token_file`` (mode 0600), where the operator's own
  tools read it (``--token-file``). ``token_env`` names a variable of the service's
  environment that holds the token the sandbox was started with: written to
  ``token_file`` when that file is missing, and tried when the file's token is refused
  (the sandbox was restarted since).
- ``NAME=pool:POOL`` (``lab=pool:default``): a warm pool of this host (``deskpod pool
  up --name POOL``) the service *owns* sessions on: a session opened by ``NAME`` gets a
  sandbox leased from the pool for its duration (a fresh one: the pool resets every
  sandbox at its release), renewed while the session runs and released (reset) when it
  ends; vouched for too. The agent never holds the slot's token. A pool whose every
  sandbox is leased answers ``busy`` with a retry hint.

``NAME`` and ``POOL``: 1 to 32 of ``a-z 0-9 _ -``, starting with a letter or digit
(:data:`SANDBOX_NAME_PATTERN`). ``PATH``: absolute. ``VAR``: an environment variable's
name. Options are separated by spaces, each ``key=value`` once.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Final


__all__ = ["SANDBOX_NAME_PATTERN", "SandboxEntry", "parse_sandbox_entries", "parse_sandbox_entry"]

SANDBOX_NAME_PATTERN: Final = r"^[a-z0-9][a-z0-9_-]{0,31}$"
"""What a registered sandbox's name must match."""

_NAME = re.compile(SANDBOX_NAME_PATTERN)
_URL = re.compile(r"^wss?://[^/\s]+\S*$")
_VARIABLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
_OPTIONS: Final = ("token_file", "token_env")


@dataclass(frozen=True)
class SandboxEntry:
    """One entry of ``DESKPOD_SERVE_SANDBOXES`` (see the module).

    ``name``: what sessions open it by (``None``: vouched for only, opened by URL and
    token). ``url``: the daemon's websocket URL as the service reaches it (``""`` for a pool).
    ``token_file``: where the token in force is kept (``None`` for an unnamed entry or a pool).
    ``token_env``: the variable holding the token the sandbox was started with (``None``: none).
    ``pool``: the warm pool its sessions lease a sandbox from (``None``: one sandbox).
    """

    name: str | None
    url: str
    token_file: Path | None = None
    token_env: str | None = None
    pool: str | None = None


def parse_sandbox_entry(text: str) -> SandboxEntry:
    """Read one entry (``URL``, ``NAME=URL token_file=PATH [token_env=VAR]`` or ``NAME=pool:POOL``).

    Raises:
        ValueError: the entry is neither form; the message says what is wrong.
    """
    words = text.split()
    if not words:
        raise ValueError("an empty entry")
    head, options = words[0], words[1:]
    name, sep, url = head.partition("=")
    if not sep or "://" in name:
        name, url = "", head
    if sep and url.startswith("pool:"):
        return _pool_entry(name, url[len("pool:"):], options)
    if not _URL.match(url):
        raise ValueError(f"must be a ws:// or wss:// URL, or NAME=URL: not {head[:200]!r}")
    if not name:
        if options:
            raise ValueError(f"{url[:200]!r}: options need a name (NAME=URL token_file=PATH)")
        return SandboxEntry(name=None, url=url)
    if not _NAME.match(name):
        raise ValueError(f"bad sandbox name {name[:40]!r}: 1-32 of a-z 0-9 _ -, starting with a letter or digit")
    given: dict[str, str] = {}
    for option in options:
        key, sep, value = option.partition("=")
        if key not in _OPTIONS or not sep or not value:
            raise ValueError(f"sandbox {name!r}: unknown option {option[:80]!r} (token_file=PATH, token_env=VAR)")
        if key in given:
            raise ValueError(f"sandbox {name!r}: {key} given twice")
        given[key] = value
    if "token_file" not in given or not Path(given["token_file"]).is_absolute():
        raise ValueError(f"sandbox {name!r}: needs token_file=PATH, an absolute path (where the service keeps "
                         "its current token)")
    if "token_env" in given and not _VARIABLE.match(given["token_env"]):
        raise ValueError(f"sandbox {name!r}: token_env must name an environment variable")
    return SandboxEntry(name=name, url=url, token_file=Path(given["token_file"]), token_env=given.get("token_env"))


def _pool_entry(name: str, pool: str, options: list[str]) -> SandboxEntry:
    """``NAME=pool:POOL`` (no options)."""
    if not _NAME.match(name):
        raise ValueError(f"bad sandbox name {name[:40]!r}: 1-32 of a-z 0-9 _ -, starting with a letter or digit")
    if not _NAME.match(pool):
        raise ValueError(f"sandbox {name!r}: bad pool name {pool[:40]!r}: 1-32 of a-z 0-9 _ -")
    if options:
        raise ValueError(f"sandbox {name!r}: a pool entry takes no options (NAME=pool:POOL)")
    return SandboxEntry(name=name, url="", pool=pool)


def parse_sandbox_entries(texts: Iterable[str]) -> tuple[SandboxEntry, ...]:
    """Read every entry, sorted by URL; a name, or an owned sandbox's URL, appears once.

    Raises:
        ValueError: an entry does not parse, or a name or an owned URL is given twice.
    """
    entries = sorted((parse_sandbox_entry(t) for t in texts), key=lambda e: (e.url, e.name or ""))
    names = [e.name for e in entries if e.name is not None]
    owned_urls = [e.url for e in entries if e.name is not None and e.pool is None]
    for seen, what in ((names, "name"), (owned_urls, "owned sandbox's URL")):
        twice = sorted({x for x in seen if seen.count(x) > 1})
        if twice:
            raise ValueError(f"the {what} {twice[0]!r} is given twice")
    return tuple(entries)
