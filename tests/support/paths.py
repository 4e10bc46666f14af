"""Where the repository, the tests and their fixture files are, independent of the module asking."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TESTS = REPO / "tests"
FIXTURES = TESTS / "fixtures"
WORKFLOW_FIXTURES = FIXTURES / "workflows"
AGENT_FIXTURES = FIXTURES / "agent"
