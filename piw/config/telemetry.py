"""The ``[telemetry]`` table of ``config.toml`` (``docs/telemetry.md``): one field line in ``PiwConfig``.

Its own module so that a run reads it with pydantic only when the table is there (:mod:`piw.telemetry.config`).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class TelemetryTable(BaseModel):
    """``[telemetry]``: where live spans go and how much may wait for the collector."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    otlp_endpoint: str | None = None
    """The collector's OTLP/HTTP base URL (``/v1/traces`` is appended), e.g. ``http://127.0.0.1:4318``."""
    include_content: bool = False
    """Attach prompts, replies and tool arguments to live spans (as ``piw export --otlp --include-content``)."""
    queue_spans: int = Field(default=2048, ge=1, le=1_000_000)
    """Spans that may wait for the collector; more are dropped (and counted), never waited for."""
    timeout_s: float = Field(default=2.0, gt=0, le=60, allow_inf_nan=False)
    """How long one export request may take, and how long a finishing process waits for the last spans."""
