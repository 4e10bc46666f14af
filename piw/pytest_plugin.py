"""The pytest plugin (entry point ``pytest11``): ``pytest`` collects piw test case folders beside a project's tests.

Every ``case.json`` of a piw test case (``"schema": "piw.test-case.v1"``) under the paths pytest collects becomes
one item that replays the case offline, exactly as ``piw test`` does, and fails with the same readable report:
what differed (route, output diffs, prompt drift) or why the case is broken (``docs/testing.md``, "In pytest").
Nothing of piw beyond this module is imported until a case runs, so the plugin costs a project's other tests
nothing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from piw.cases.suite import CaseResult

CASE_SCHEMA = "piw.test-case.v1"


def _is_case(path: Path) -> bool:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(raw, dict) and raw.get("schema") == CASE_SCHEMA


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if file_path.name == "case.json" and _is_case(file_path):
        case: pytest.Collector = PiwCaseFile.from_parent(parent, path=file_path)
        return case
    return None


class CaseFailed(Exception):
    """A case that failed or is broken; carries its result for the report."""

    def __init__(self, result: CaseResult) -> None:
        super().__init__(result.name)
        self.result = result


class PiwCaseFile(pytest.File):
    """A ``case.json``: one item, named after its case folder."""

    def collect(self) -> list[pytest.Item]:
        return [PiwCaseItem.from_parent(self, name=self.path.parent.name)]


class PiwCaseItem(pytest.Item):
    """Replays one case offline (its recorded replies, a throwaway ``PIW_HOME``) and grades it."""

    def runtest(self) -> None:
        from piw.cases.suite import run_case

        result = run_case(self.path.parent)
        if result.verdict != "pass":
            raise CaseFailed(result)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        if isinstance(excinfo.value, CaseFailed):
            from piw.cases.report import case_lines

            return "\n".join(case_lines(excinfo.value.result))
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, 0, f"piw test case {self.name}"
