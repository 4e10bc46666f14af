"""Placeholders for what differs between machines and runs, so a case file holds no absolute path and no run id.

Recording replaces the project folder, ``PIW_HOME`` and the user's home folder with ``<project>``, ``<home>`` and
``<user-home>``, and the run's id with ``<runId>``; replaying puts the replaying run's values back before comparing
(``docs/testing.md``, "The case folder").
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Places:
    """The folders of one machine (and the run id of one run) and their placeholders."""

    project: Path
    home: Path
    run_id: str = ""

    def _pairs(self) -> list[tuple[str, str]]:
        pairs: list[tuple[str, str]] = []
        for folder, placeholder in (
            (self.project, "<project>"),
            (self.home, "<home>"),
            (Path.home(), "<user-home>"),
        ):
            for form in {str(folder), str(folder.resolve())}:
                if len(form) > 1:  # never "/"
                    pairs.append((form, placeholder))
        # The longest first: a home inside the project becomes <home>, not <project>/home.
        pairs.sort(key=lambda pair: len(pair[0]), reverse=True)
        if self.run_id:
            pairs.insert(0, (self.run_id, "<runId>"))
        return pairs

    def generalize(self, text: str) -> str:
        for value, placeholder in self._pairs():
            text = text.replace(value, placeholder)
        return text

    def specialize(self, text: str) -> str:
        seen: set[str] = set()
        for value, placeholder in self._pairs():
            if (
                placeholder not in seen
            ):  # the first (resolved or given) form of each folder is the one put back
                seen.add(placeholder)
                text = text.replace(placeholder, value)
        return text

    def generalize_value(self, value: Any) -> Any:
        return json.loads(self.generalize(json.dumps(value, ensure_ascii=False)))

    def specialize_value(self, value: Any) -> Any:
        return json.loads(self.specialize(json.dumps(value, ensure_ascii=False)))
