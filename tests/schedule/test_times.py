"""When schedules fire: cron in a zone across both DST changes, fixed intervals, and the inputs refused."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime

import pytest

from piw.errors import UsageError
from piw.schedule.times import Timing, check_cron, local_text, parse_interval, zone


def ms(*parts: int) -> int:
    return int(datetime(*parts, tzinfo=UTC).timestamp() * 1000)  # type: ignore[misc]


def test_a_time_skipped_by_the_spring_change_fires_once_at_the_change() -> None:
    daily = Timing(cron="30 2 * * *", tz="Europe/Paris")
    fires = daily.next(ms(2026, 3, 27), 4)
    assert [local_text(f, "Europe/Paris") for f in fires] == [
        "2026-03-27 02:30:00 CET",
        "2026-03-28 02:30:00 CET",
        "2026-03-29 03:00:00 CEST",  # 02:30 does not exist that night: at the change
        "2026-03-30 02:30:00 CEST",
    ]


def test_a_time_repeated_by_the_autumn_change_fires_once() -> None:
    half_hourly = Timing(cron="*/30 * * * *", tz="Europe/London")
    fires = half_hourly.next(ms(2026, 10, 24, 22, 50), 6)
    assert [local_text(f, "Europe/London") for f in fires] == [
        "2026-10-25 00:00:00 BST",
        "2026-10-25 00:30:00 BST",
        "2026-10-25 01:00:00 BST",
        "2026-10-25 01:30:00 BST",  # 01:00 and 01:30 GMT come again: not fired twice
        "2026-10-25 02:00:00 GMT",
        "2026-10-25 02:30:00 GMT",
    ]
    assert fires == sorted(set(fires))


def test_every_counts_real_time_from_its_anchor_across_a_change() -> None:
    hourly = Timing(every_ms=3_600_000, anchor_ms=ms(2026, 3, 29, 0, 15))
    fires = hourly.next(ms(2026, 3, 29, 0, 20), 3)
    assert [b - a for a, b in itertools.pairwise(fires)] == [3_600_000, 3_600_000]
    assert fires[0] == ms(2026, 3, 29, 1, 15)


def test_between_keeps_the_newest_and_says_it_cut() -> None:
    minutely = Timing(every_ms=60_000, anchor_ms=0)
    found, cut = minutely.between(0, 10 * 60_000, 3)
    assert found == [8 * 60_000, 9 * 60_000, 10 * 60_000] and cut


@pytest.mark.parametrize("text", ["0s", "0", "fast", "5x", ""])
def test_bad_intervals_are_refused(text: str) -> None:
    with pytest.raises(UsageError):
        parse_interval(text)


def test_intervals_read_as_written() -> None:
    assert parse_interval("15m") == 900_000 and parse_interval("1h30m") == 5_400_000


@pytest.mark.parametrize("expression", ["bad", "61 * * * *", "* * * *", "0 9 * * 1-5 2026"])
def test_bad_cron_is_refused(expression: str) -> None:
    with pytest.raises(UsageError, match="cron"):
        check_cron(expression)


def test_unknown_zone_is_refused() -> None:
    with pytest.raises(UsageError, match="Mars/Olympus"):
        zone("Mars/Olympus")
