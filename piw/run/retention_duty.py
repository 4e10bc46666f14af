"""``piw host``'s retention duty: apply ``[retention]`` of ``config.toml`` once a day (``docs/cli.md``, "Retention").

The host looks at most once a minute; when the table is set and the last pass (``PIW_HOME/retention.last``, epoch
ms, so a restarted host does not pass again) is a day old, it runs one ``piw gc`` pass with those options and says
what it removed; in database mode each host's pass removes rows in one transaction per run, so hosts passing at
once remove each run once.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path

from piw.errors import PiwError
from piw.run.periodic import PeriodicDuty
from piw.store.db.database import Clock, now_ms

log = logging.getLogger(__name__)

DAY_MS = 86_400_000
LOOK_MS = 60_000
STAMP = "retention.last"


class RetentionDuty(PeriodicDuty):
    """Called from every pass of the host loop; looks every :data:`LOOK_MS`."""

    every_ms = LOOK_MS

    def __init__(self, home: Path, report: Callable[[str], None], clock: Clock = now_ms) -> None:
        super().__init__(clock)
        self.home = home
        self.report = report

    def tick(self, now: int) -> bool:
        """One pass if one is due; whether it ran."""
        from piw.config.settings import load_config

        try:
            table = load_config(self.home).retention
        except PiwError:
            return False  # the config's own error is reported where the config is used
        if table is None or now - self._last() < DAY_MS:
            return False
        from piw.store.retention import GcPlan, run_gc

        self._stamp(now)
        try:
            plan = GcPlan.parse(table.older_than, table.status, table.keep_last)
            export = Path(table.export).expanduser() if table.export else None
            result = run_gc(self.home, plan, export_dir=export, report=self.report)
        except PiwError as exc:
            self.report(f"retention: {exc}")
            return True
        self.report(f"retention: removed {len(result.removed)} runs ([retention] in config.toml)")
        return True

    def _last(self) -> int:
        try:
            return int((self.home / STAMP).read_text(encoding="ascii").strip() or 0)
        except (OSError, ValueError):
            return 0

    def _stamp(self, now: int) -> None:
        path = self.home / STAMP
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="ascii") as handle:
            handle.write(str(now))
