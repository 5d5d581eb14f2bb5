"""Shared test setup: ``tests/support`` (helpers used by more than one test folder) is importable."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "support"))
