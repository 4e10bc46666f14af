"""When a schedule fires: a cron expression in a time zone, or a fixed interval (``docs/schedules.md``).

A cron schedule is read with ``croniter`` over *wall-clock* times of its zone (``zoneinfo``), and each wall-clock
time that matches becomes one instant:

- a time that happens twice (the hour repeated when clocks go back) fires once, at its first occurrence;
- a time that does not exist (the hour skipped when clocks go forward) fires once, at the instant the clocks
  change (``30 2 * * *`` in Europe/Paris fires at 03:00 local time on the last Sunday of March), as cron does.

An ``--every`` schedule counts fixed intervals of real time from when it was added, whatever the zone: ``--every
1h`` stays one hour apart across a DST change. Instants are integer epoch milliseconds, like every time column.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any

from piw.errors import UsageError

_PART = re.compile(r"(\d+)\s*(ms|s|m|h|d|w)")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 7 * 86_400_000}
MIN_EVERY_MS = 1000
"""The shortest ``--every`` interval."""


@dataclass(frozen=True)
class Timing:
    """When a schedule fires: ``cron`` with its zone, or ``every_ms`` counted from ``anchor_ms``."""

    cron: str | None = None
    tz: str = "UTC"
    every_ms: int | None = None
    anchor_ms: int = 0

    def to_json(self) -> dict[str, Any]:
        if self.cron is not None:
            return {"kind": "cron", "cron": self.cron, "tz": self.tz}
        return {"kind": "every", "everyMs": self.every_ms, "anchorMs": self.anchor_ms}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Timing:
        if data.get("kind") == "cron":
            return cls(cron=str(data["cron"]), tz=str(data.get("tz") or "UTC"))
        return cls(every_ms=int(data["everyMs"]), anchor_ms=int(data.get("anchorMs") or 0))

    def describe(self) -> str:
        if self.cron is not None:
            return f"cron '{self.cron}' ({self.tz})"
        return f"every {format_interval(self.every_ms or 0)}"

    def after(self, after_ms: int) -> Iterator[int]:
        """Every fire instant strictly after ``after_ms``, in order (endless)."""
        if self.every_ms is not None:
            step = self.every_ms
            k = max(0, (after_ms - self.anchor_ms) // step + 1)
            while True:
                yield self.anchor_ms + k * step
                k += 1
        assert self.cron is not None
        yield from _cron_after(self.cron, zone(self.tz), after_ms)

    def between(self, after_ms: int, until_ms: int, cap: int) -> tuple[list[int], bool]:
        """Fire instants in ``(after_ms, until_ms]``, at most ``cap`` of the newest; and whether more were cut."""
        found: list[int] = []
        cut = False
        for instant in self.after(after_ms):
            if instant > until_ms:
                break
            found.append(instant)
            if len(found) > cap:
                found.pop(0)
                cut = True
        return found, cut

    def next(self, after_ms: int, count: int) -> list[int]:
        out = []
        for instant in self.after(after_ms):
            out.append(instant)
            if len(out) >= count:
                break
        return out


def zone(name: str) -> tzinfo:
    """The ``zoneinfo`` zone ``name`` (``UsageError`` naming it when unknown)."""
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    if name.upper() == "UTC":
        return UTC
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise UsageError(
            f"Unknown time zone {name!r}; give an IANA zone name such as Europe/Paris or America/New_York."
        ) from None


def parse_interval(text: str) -> int:
    """``--every`` as milliseconds: ``90s``, ``15m``, ``2h``, ``1h30m``, ``1d``, ``1w``; at least one second."""
    value = text.strip().lower().replace(" ", "")
    parts = _PART.findall(value)
    if not value or "".join(number + unit for number, unit in parts) != value:
        raise UsageError(f"--every {text!r} is not an interval; write it like 30s, 15m, 2h, 1h30m or 1d.")
    total = sum(int(number) * _UNIT_MS[unit] for number, unit in parts)
    if total < MIN_EVERY_MS:
        raise UsageError(f"--every {text!r} is too short; give at least 1s.")
    return total


def format_interval(ms: int) -> str:
    parts = []
    for unit in ("d", "h", "m", "s"):
        size = _UNIT_MS[unit]
        if ms >= size:
            parts.append(f"{ms // size}{unit}")
            ms %= size
    return "".join(parts) or f"{ms}ms"


def check_cron(expression: str) -> str:
    """The expression, when ``croniter`` reads it as a five-field cron expression (``UsageError`` otherwise)."""
    from croniter import croniter  # type: ignore[import-untyped]

    text = " ".join(expression.split())
    if len(text.split(" ")) != 5 or not croniter.is_valid(text):
        raise UsageError(
            f"--cron {expression!r} is not a cron expression; give five fields: minute hour day month weekday "
            "(e.g. '0 9 * * 1-5')."
        )
    return text


def _cron_after(expression: str, tz: tzinfo, after_ms: int) -> Iterator[int]:
    from croniter import croniter

    start = datetime.fromtimestamp(after_ms / 1000, tz).replace(tzinfo=None, microsecond=0)
    start -= timedelta(
        hours=3
    )  # a little earlier: wall times repeated by a DST change are seen from before it
    it = croniter(expression, start)
    last = after_ms
    while True:
        wall: datetime = it.get_next(datetime)
        instant = _instant(wall, tz)
        if instant > last:
            last = instant
            yield instant


def _instant(wall: datetime, tz: tzinfo) -> int:
    """The epoch ms of a naive wall time in ``tz``: its first occurrence, or for a skipped time the instant the
    clocks changed (the first instant whose local time is at or after it)."""
    aware = wall.replace(tzinfo=tz, fold=0)
    utc = aware.astimezone(UTC)
    if utc.astimezone(tz).replace(tzinfo=None) == wall:
        return _ms(utc)
    # Skipped: the change lies between the two readings of the offset; find it to the second.
    low = wall.replace(tzinfo=tz, fold=1).astimezone(UTC)
    high = utc
    if low > high:
        low, high = high, low
    while (high - low) > timedelta(seconds=1):
        middle = low + (high - low) / 2
        if middle.astimezone(tz).replace(tzinfo=None) >= wall:
            high = middle
        else:
            low = middle
    return -(-_ms(high) // 1000) * 1000  # the whole second at or after the change


def _ms(moment: datetime) -> int:
    return round(moment.timestamp() * 1000)


def local_text(instant_ms: int, tz_name: str) -> str:
    """``2026-12-01 09:00 CET``: an instant as wall time in the schedule's zone."""
    moment = datetime.fromtimestamp(instant_ms / 1000, zone(tz_name))
    return moment.strftime("%Y-%m-%d %H:%M:%S %Z")
