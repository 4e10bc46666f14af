"""The Guarantees page names the test behind each claim: every ``tests/…py::test_name`` it cites must exist, so a
renamed or deleted test cannot leave a claim backed by nothing."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "guarantees.md"
CITATION = re.compile(r"(tests/[\w/]+\.py)(?:::(\w+))?|…::(\w+)")


def _test_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {node.name for node in tree.body if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)}


def test_every_test_the_guarantees_page_cites_exists() -> None:
    text = PAGE.read_text(encoding="utf-8")
    cited: list[tuple[str, str | None]] = []
    last_file = ""
    for match in CITATION.finditer(text):
        file, name, continued = match.groups()
        if file:
            last_file = file
            cited.append((file, name))
        else:
            cited.append((last_file, continued))  # "…::name" continues the file cited just before
    assert len(cited) >= 20, "the page cites its tests"
    missing = []
    for file, name in cited:
        path = ROOT / file
        if not path.is_file():
            missing.append(file)
        elif name and name not in _test_names(path):
            missing.append(f"{file}::{name}")
    assert not missing, f"docs/guarantees.md cites tests that do not exist: {missing}"
