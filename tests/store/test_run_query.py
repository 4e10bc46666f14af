"""The filters of ``piw runs`` return exactly the right runs, newest first, on a generated home of 10,000 runs."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from piw.store.history import find_runs
from piw.store.run_query import RunQuery, parse_instant
from tests.support.cli import Cli
from tests.support.generated import BASE_MS, GenRun, plan_runs, write_home

COUNT = 10_000


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[GenRun]]:
    home = tmp_path_factory.mktemp("ten-thousand")
    runs = plan_runs(COUNT)
    write_home(home, runs, whole=False)
    return home, runs


def newest_first(runs: list[GenRun], keep: Callable[[GenRun], bool]) -> list[str]:
    return [run.run_id for run in sorted(runs, key=lambda run: run.run_id, reverse=True) if keep(run)]


def ids(home: Path, query: RunQuery) -> list[str]:
    return [row.run_id for row in find_runs(home, query)]


HOUR = 3_600_000


@pytest.mark.parametrize(
    ("query", "keep"),
    [
        (RunQuery(), lambda run: True),
        (RunQuery(workflow="digest"), lambda run: run.workflow == "digest"),
        (RunQuery(statuses=("failed", "cancelled")), lambda run: run.status in ("failed", "cancelled")),
        (RunQuery(statuses=("waiting",)), lambda run: run.status == "waiting"),
        (RunQuery(search="zürich"), lambda run: "zürich" in (run.title + str(run.input)).lower()),
        (RunQuery(search="item 4242"), lambda run: "item 4242" in run.input["text"]),
        (RunQuery(schedule="nightly"), lambda run: run.schedule == "nightly"),
        (
            RunQuery(since_ms=BASE_MS + 100 * HOUR, until_ms=BASE_MS + 101 * HOUR),
            lambda run: BASE_MS + 100 * HOUR <= run.started_ms < BASE_MS + 101 * HOUR,
        ),
        (
            RunQuery(workflow="backup", statuses=("completed",), search="weekly", limit=7),
            lambda run: (
                run.workflow == "backup"
                and run.status == "completed"
                and "weekly" in run.title + run.input["text"]
            ),
        ),
    ],
)
def test_each_filter_returns_exactly_its_runs_newest_first(
    generated: tuple[Path, list[GenRun]], query: RunQuery, keep: Callable[[GenRun], bool]
) -> None:
    home, runs = generated
    expected = newest_first(runs, keep)
    if query.limit is not None:
        expected = expected[: query.limit]
    assert expected, "the generated home has runs for every filter"
    assert ids(home, query) == expected


def test_parent_finds_a_runs_continuations(generated: tuple[Path, list[GenRun]]) -> None:
    home, runs = generated
    child = next(run for run in reversed(runs) if run.parent)
    assert ids(home, RunQuery(parent=child.parent)) == newest_first(
        runs, lambda run: run.parent == child.parent
    )


def test_the_cli_takes_every_filter(generated: tuple[Path, list[GenRun]], tmp_path: Path) -> None:
    home, runs = generated
    cli = Cli(home, tmp_path)
    rows = cli.json(
        "runs", "--workflow", "triage", "--status", "completed,failed", "--search", "crash",
        "--since", "2026-05-29", "--until", "2026-05-30", "--limit", "50", "--json",
    )  # fmt: skip
    since = int(datetime(2026, 5, 29, tzinfo=UTC).timestamp() * 1000)
    expected = newest_first(
        runs,
        lambda run: (
            run.workflow == "triage"
            and run.status in ("completed", "failed")
            and "crash" in (run.title + run.input["text"])
            and since <= run.started_ms < since + 2 * 86_400_000
        ),  # --until a date includes that day
    )[:50]
    assert [row["runId"] for row in rows] == expected and expected
    scheduled = cli.json("runs", "--schedule", "nightly", "--limit", "3", "--json")
    assert all(row["schedule"]["name"] == "nightly" for row in scheduled) and len(scheduled) == 3
    bad = cli("runs", "--since", "last tuesday")
    assert bad.returncode == 2 and "--since 'last tuesday'" in bad.stderr
    unknown = cli("runs", "--status", "completed,sleeping")
    assert unknown.returncode == 2 and "Unknown status 'sleeping'" in unknown.stderr


def test_ages_and_dates_are_read() -> None:
    now = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
    assert parse_instant("2d", "--since", now) == int(
        datetime(2026, 12, 1, 12, tzinfo=UTC).timestamp() * 1000
    )
    end = parse_instant("2026-12-01", "--until", now, end_of_day=True)
    assert end == int(datetime(2026, 12, 2, tzinfo=UTC).timestamp() * 1000)
