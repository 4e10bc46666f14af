"""The viewer's runs list never cuts the end of a run id (issue 26, confusing).

The eight hex digits at the end are what tells two runs of one workflow started in the same millisecond apart,
and a prefix typed on the command line needs the start. The id is shown whole when it fits; when the column is
narrower, the middle (the workflow slug, which the title column shows anyway) gives way: ``…-9b26d682`` stays.
"""

from __future__ import annotations

import pytest
from rich.console import Console

from piw.app.runs import RunRow
from piw.app.sources import RunsSource

LONG = "20261203T072758281Z-a-rather-long-workflow-name-for-a-slug-9b26d682"
SHORT = "20261203T072758281Z-hello-1f0b5219"


def _row(run_id: str) -> RunRow:
    return RunRow(run_id, "completed", "Title", "wf", "2026-12-03T07:27:58.281Z", "", None, None, False)


def _lines(ids: list[str], width: int) -> list[str]:
    source = RunsSource([_row(run_id) for run_id in ids], lambda row: "1m")
    console = Console(width=width)
    return [line.plain for line in source.rows(console, width, 0, len(ids))]


@pytest.mark.parametrize("width", [60, 80, 100, 120, 160])
def test_the_end_of_a_run_id_is_never_cut(width: int) -> None:
    long_line, short_line = _lines([LONG, SHORT], width)
    if "20261203T" not in long_line:  # the column was left out whole at this width: nothing was cut
        assert "1f0b5219" not in short_line
        return
    for line, run_id in ((long_line, LONG), (short_line, SHORT)):
        assert run_id[-9:] in line  # the suffix, whole
        assert "20261203T072758281Z" in line  # and the start time
        assert run_id in line or f"…{run_id[-9:]}" in line


def test_a_wide_list_shows_every_id_whole() -> None:
    long_line, short_line = _lines([LONG, SHORT], 160)
    assert LONG in long_line and SHORT in short_line
