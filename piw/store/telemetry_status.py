"""``telemetry.json``: what live OpenTelemetry export did for one run (``docs/telemetry.md``).

A side file, not part of the trace: the process that runs the run replaces it (atomically, 0600) after its
exporter sent or dropped spans, and ``piw inspect`` shows it. Nothing that folds, resumes or forks a run reads it;
delete it and only the counts are gone.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

TELEMETRY_FILE = "telemetry.json"
SCHEMA = "piw.telemetry.v1"


def read_telemetry(bundle_path: Path) -> dict[str, Any] | None:
    """The run's export counts ``{endpoint, sent, dropped, lastError?, updatedAt}``; ``None``: none, unreadable."""
    try:
        value = json.loads((bundle_path / TELEMETRY_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) and value.get("schema") == SCHEMA else None


def write_telemetry(bundle_path: Path, counts: dict[str, Any]) -> None:
    """Replace the run's ``telemetry.json`` (a bundle that is gone is left alone)."""
    from piw.store.bundle import write_private_file

    if not bundle_path.is_dir():
        return
    data = (
        json.dumps({"schema": SCHEMA, **counts}, ensure_ascii=False, sort_keys=True).encode("utf-8") + b"\n"
    )
    write_private_file(bundle_path / TELEMETRY_FILE, data)


def telemetry_line(counts: dict[str, Any]) -> str:
    """One line for ``piw inspect``: ``12 spans sent to URL, 3 dropped (collector unreachable)``."""
    sent, dropped = int(counts.get("sent") or 0), int(counts.get("dropped") or 0)
    line = f"{sent} span{'s' if sent != 1 else ''} sent to {counts.get('endpoint', '?')}"
    if dropped:
        line += f", {dropped} dropped"
        if counts.get("lastError"):
            line += f" ({counts['lastError']})"
    return line
