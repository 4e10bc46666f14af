"""Snapshots of every view for a completed, a failed, a running and a waiting run, at 80 and 40 columns.

The runs are real (see ``tests.support.views``); rendering goes through a plain ``Console`` with no colour, so
the snapshot is exactly what a pipe would receive.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from piw.views import VIEW_NAMES, view_for
from piw.views.frame import FrameModel
from tests.support.views import (
    RUN_IDS,
    Runs,
    assert_terminal_safe,
    check_snapshot,
    max_width,
    render,
    shared_runs,
)

KINDS = ("completed", "failed", "running", "waiting")
WIDTHS = (80, 40)


@pytest.fixture(scope="session")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    return shared_runs(tmp_path_factory)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("view", VIEW_NAMES)
@pytest.mark.parametrize("kind", KINDS)
def test_view_snapshot(runs: Runs, kind: str, view: str, width: int) -> None:
    text = render(view_for(view, runs.load(kind)), width)
    assert text.strip(), "a view never prints nothing"
    assert max_width(text) <= width
    assert_terminal_safe(text)
    check_snapshot(f"{kind}-{view}-{width}", text)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("kind", KINDS)
def test_frame_snapshot(runs: Runs, kind: str, width: int) -> None:
    """The live frame (``piw watch --once``): summary, graph, step card, progress, notifications."""
    data = runs.load(kind)
    model = FrameModel(data.snapshot)
    model.add_events(data.events())
    model.add_entries(data.entries())
    assert model.state == data.state
    text = render(model.frame(data.now, live=data.live), width)
    assert max_width(text) <= width
    assert_terminal_safe(text)
    check_snapshot(f"{kind}-frame-{width}", text)


def test_frame_is_bounded_by_height(runs: Runs) -> None:
    data = runs.load("running")
    model = FrameModel(data.snapshot)
    model.add_events(data.events())
    model.add_entries(data.entries())
    text = render(model.frame(data.now, live=False, height=20), 80, height=20)
    lines = text.splitlines()
    assert len(lines) <= 20
    assert any("┏" in line for line in lines), "the current node stays in view when the graph is cut"
    assert "Progress" in text and "▶ Demo" in text


@pytest.mark.parametrize("kind", KINDS)
def test_views_show_hostile_text_literally(runs: Runs, kind: str) -> None:
    """Markup in data stays literal and control characters become visible escapes, in every view."""
    data = runs.load(kind)
    combined = "".join(render(view_for(view, data), 200) for view in VIEW_NAMES)
    assert_terminal_safe(combined)
    assert "[red]x[/red]" in combined
    assert "\\x1b[2J" in combined


def test_running_run_reads_as_possibly_interrupted(runs: Runs) -> None:
    text = render(view_for("state", runs.load("running")), 100)
    assert "▶ running · possibly interrupted" in text
    assert "reply (agent)" in text and "waiting for the model" in text


def test_expanded_conversation_shows_prompt_and_thinking(runs: Runs) -> None:
    data = runs.load("completed")
    compact = render(view_for("conversation", data), 100)
    expanded = render(view_for("conversation", data, expanded=True), 100)
    assert "Classify the rows" not in compact
    assert "Classify the rows \\x1b[2J" in expanded
    assert "attempt: " in expanded and "completion: assistant response" in expanded
    assert "hmm \\x1b[2J" in expanded and "hmm" not in compact
    assert "↻ Demo" in compact and "· reminder" in compact
    assert "⚙ workflow" in compact and "↳ workflow: Output accepted" in compact


def test_run_ids_are_normalised(runs: Runs) -> None:
    for kind, run_id in RUN_IDS.items():
        assert runs.load(kind).state.run_id == run_id


@pytest.mark.parametrize("width", (80, 40, 17, 3))
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", ("steps", "trace"))
def test_the_plain_tables_are_the_rich_ones_without_styles(
    runs: Runs, kind: str, width: int, name: str
) -> None:
    """Off a terminal ``inspect --view steps|trace`` writes plain lines straight out; they are what rich would
    print (hostile text included: the fixtures carry markup, escapes and wide characters)."""
    view = view_for(name, runs.load(kind))
    assert "\n".join(view.plain_lines(width)) + "\n" == render(view, width)  # type: ignore[attr-defined]


def test_row_numbers_of_a_run_past_99999_steps_are_shown_whole() -> None:
    """The ``#`` column is five wide; from row 100,000 on it read ``1000…`` on every row."""
    from piw.store.fold import RunState, StepList, StepRecord
    from piw.views.steps import steps_view

    steps = [
        StepRecord(attempt_id=f"a{n}", node_id="work", node_type="compute", outcome="ok",
                   finished_at="2026-01-01T00:00:00.000Z", prompt=None, output=n)
        for n in range(100_002)
    ]  # fmt: skip
    view = steps_view(RunState(run_id="r", steps=StepList(steps)), datetime(2026, 1, 1, tzinfo=UTC))
    plain = list(view.plain_lines(100))  # type: ignore[union-attr]
    assert plain[-1].split()[:3] == ["100002", "work", "✓"] and plain[1].split()[:2] == ["1", "work"]
    rich = [line.plain for line in [view.header(100), *view.row_lines(100_000, 100_002, 100)]]
    assert rich == [plain[0], plain[-2], plain[-1]]  # the pager's rows (the viewer) are the same


@given(st.datetimes(timezones=st.just(UTC)), st.sampled_from(["Z", "z", "+00:00", "+05:30"]), st.booleans())
@example(datetime(2026, 2, 28, 23, 59, 59, 999000, tzinfo=UTC), "Z", True)
def test_the_clock_of_a_timestamp_is_what_parsing_it_prints(
    moment: datetime, suffix: str, millis: bool
) -> None:
    """``fmt_clock`` reads piw's own timestamps by position; any text gives what parsing and formatting give."""
    from piw.progress import parse_instant
    from piw.views.base import fmt_clock

    text = (
        moment.strftime("%Y-%m-%dT%H:%M:%S")
        + (f".{moment.microsecond // 1000:03d}" if millis else "")
        + suffix
    )
    parsed = parse_instant(text)
    expected = parsed.strftime("%H:%M:%S.") + f"{parsed.microsecond // 1000:03d}" if parsed else text[:12]
    assert fmt_clock(text) == expected


@pytest.mark.parametrize(
    "text", ["2026-02-30T10:00:00.000Z", "2026-13-01T10:00:00.000Z", "2026-01-01T24:00:00.000Z"]
)
def test_an_impossible_timestamp_is_shown_as_its_text(text: str) -> None:
    from piw.views.base import fmt_clock

    assert fmt_clock(text) == text[:12]


@pytest.mark.parametrize(
    "odd", ["2026-01-01T10:00:00.1x0Z", "2026-01-01T10:00:00.\u0661\u0662\u0663Z", "2026-01-01T10:00:00,123Z"]
)
def test_a_clock_read_once_per_second_still_checks_every_timestamps_milliseconds(odd: str) -> None:
    """The second ``2026-01-01T10:00:00`` is known valid after the first call; the odd one is still parsed."""
    from piw.progress import parse_instant
    from piw.views.base import fmt_clock

    assert fmt_clock("2026-01-01T10:00:00.123Z") == "10:00:00.123"
    parsed = parse_instant(odd)
    expected = parsed.strftime("%H:%M:%S.") + f"{parsed.microsecond // 1000:03d}" if parsed else odd[:12]
    assert fmt_clock(odd) == expected


def test_every_printable_latin_1_character_is_one_cell_wide_in_rich() -> None:
    """The plain tables measure such text by ``len`` (``piw.views.table._one_cell_each``); if rich ever measured
    one of these characters otherwise, the plain and the rich tables would stop lining up the same way."""
    from rich.cells import cell_len

    other = [hex(code) for code in range(0x20, 0x100) if chr(code).isprintable() and cell_len(chr(code)) != 1]
    assert other == []


@pytest.mark.parametrize("width", (60, 33, 9, 2))
def test_plain_cells_of_narrow_and_wide_text_are_the_rich_cells(width: int) -> None:
    """Latin text with `` · ``, wide characters and combining marks: clipped and padded as rich does (cells are
    sanitized text: every view passes them through ``single_line`` first)."""
    from piw.views.table import Column, table_lines, table_plain

    columns = (Column("n", 2, 4, right=True), Column("text", 4, 80, flex=True))
    values = ['ok · 3ms · {"n":3}', "naïve café ÿ ǅ ʘ ˥" * 3, "漢字かな" * 5, "e\u0301" * 30, "x\\x1by", ""]
    rows = [[str(n), value] for n, value in enumerate(values)]
    plain = list(table_plain(columns, rows, width))
    rich = [line.plain for line in table_lines(columns, rows, width)]
    assert plain == rich


@pytest.mark.parametrize("ms", [0, 1, 7, 999, 1000, 61_000, -3])
def test_a_whole_number_of_milliseconds_reads_as_the_same_number_as_a_float(ms: int) -> None:
    """``fmt_duration`` has a shortcut for whole milliseconds under a second (most steps of a long run)."""
    from piw.views.base import fmt_duration

    assert fmt_duration(ms) == fmt_duration(float(ms))
    assert fmt_duration(7) == "7ms" and fmt_duration(-3) == "0ms" and fmt_duration(1000) == "1.0s"


def test_short_ids_are_sanitized_before_they_are_cut() -> None:
    from piw.views.base import short_id

    assert short_id("a3d1335777104567af92b4dba556e8b3") == "a3d13357"
    assert short_id("\x1b[2Jabcdef") == "\\x1b[2Ja" and short_id("ab\ncd") == "ab cd" and short_id(None) == ""
