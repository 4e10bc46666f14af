"""docs/authoring.md §10 lists exactly what ``from piw import …`` offers (issue 26, confusing: the list was stale)."""

from __future__ import annotations

import re

import piw
from tests.support.paths import REPO


def test_the_public_api_section_names_every_export_and_nothing_else() -> None:
    text = (REPO / "docs" / "authoring.md").read_text(encoding="utf-8")
    section = text.split("## 10. The public API", 1)[1].split("\n## ", 1)[0]
    listed = section.split("Progress helpers", 1)[0]
    names = set(re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)`", listed)) - {"piw"}
    assert names == set(piw.__all__)
