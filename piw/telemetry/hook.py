"""The one call a run makes into telemetry when it opens (``piw.run.open_run``): cheap when none is configured.

Whether live export is on is decided from the environment and the text of ``config.toml`` without importing the
span builder, pydantic or the SDK (``docs/development.md``, the start-up rule); only a run of a home with an
endpoint loads :mod:`piw.telemetry.live` (``docs/telemetry.md``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from piw.telemetry.config import live_settings

if TYPE_CHECKING:
    from piw.store.session import SessionLog
    from piw.store.writer import Listener, RunWriter


_LIVE: set[str] = set()
"""Runs of this process that have a telemetry listener (only they have spans to flush when they close)."""


def live_listeners(home: Path, writer: RunWriter, session: SessionLog) -> list[Listener]:
    """The run's telemetry listener when live export is configured for ``home``, else none."""
    settings = live_settings(home)
    if settings is None:
        return []
    from piw.telemetry.live import listener_for

    _LIVE.add(writer.bundle.run_id)
    return [listener_for(settings, writer, session, home)]


def flush_live(run_id: str) -> None:
    """When a run closes: its last spans get a bounded moment to leave (none when it exports nothing)."""
    if run_id in _LIVE:
        _LIVE.discard(run_id)
        from piw.telemetry.live import flush_run

        flush_run(run_id)
