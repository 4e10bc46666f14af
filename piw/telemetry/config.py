"""Where a run finds its live telemetry endpoint: ``[telemetry]`` in ``config.toml`` (``docs/telemetry.md``).

``otlp_endpoint`` (else the standard ``OTEL_EXPORTER_OTLP_ENDPOINT``) turns live export on for every run of the
home; ``otlp_endpoint = ""`` turns it off even when the variable is set, and so does ``OTEL_SDK_DISABLED=true``.
A run reads only this table, without the provider layer: a file whose other tables are broken still exports.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

ENDPOINT_VARIABLE = "OTEL_EXPORTER_OTLP_ENDPOINT"
DISABLED_VARIABLE = "OTEL_SDK_DISABLED"


@dataclass(frozen=True)
class LiveSettings:
    endpoint: str
    include_content: bool = False
    queue_spans: int = 2048
    timeout_s: float = 2.0


def live_settings(home: Path, env: Mapping[str, str] | None = None) -> LiveSettings | None:
    """The live export settings of ``home``, or ``None`` when no endpoint is configured (or it is disabled).

    A ``config.toml`` that cannot be read or whose ``[telemetry]`` table is invalid exports nothing: a run is never
    stopped by telemetry (the table's errors are reported by ``piw providers``, which validates the whole file)."""
    env = os.environ if env is None else env
    if env.get(DISABLED_VARIABLE, "").strip().lower() == "true":
        return None
    try:
        text = (home / "config.toml").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        text = ""
    if "telemetry" not in text and not env.get(ENDPOINT_VARIABLE, "").strip():
        return None  # the common case, decided without importing anything
    from piw.config.telemetry import (
        TelemetryTable,
    )  # pydantic: only for a home whose config.toml has the table

    table = TelemetryTable()
    if "telemetry" in text:
        try:
            raw = tomllib.loads(text).get("telemetry")
            table = TelemetryTable.model_validate(raw if isinstance(raw, dict) else {})
        except (tomllib.TOMLDecodeError, ValueError):
            return None
    endpoint = table.otlp_endpoint if table.otlp_endpoint is not None else env.get(ENDPOINT_VARIABLE)
    if not endpoint or not endpoint.strip():
        return None
    return LiveSettings(endpoint.strip(), table.include_content, table.queue_spans, table.timeout_s)
