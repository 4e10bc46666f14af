"""Sending :class:`~piw.telemetry.spans.SpanSpec` values over OTLP/HTTP with the OpenTelemetry SDK.

The only module that imports the SDK (``piw[otel]``), and only when a span is sent: ``piw`` starts without it
(``docs/development.md``, the start-up rule). Spans are handed to the OTLP/HTTP exporter as finished
``ReadableSpan`` values with the ids and times the builder derived, so no tracer, provider or clock of the SDK is
involved and the same run always gives the same spans (``docs/telemetry.md``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from piw.errors import TelemetryError
from piw.telemetry.spans import SpanSpec

if TYPE_CHECKING:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

TRACES_PATH = "/v1/traces"
BATCH = 512
"""Spans per request: large runs are sent in several requests, each well under a collector's size limit."""


def traces_url(endpoint: str) -> str:
    """The traces URL of an OTLP/HTTP endpoint: ``/v1/traces`` is appended to a base URL (as
    ``OTEL_EXPORTER_OTLP_ENDPOINT`` means it), a URL that already ends with it is kept."""
    parts = urlsplit(endpoint.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise TelemetryError(
            f"{shown_endpoint(endpoint)!r} is not an OTLP/HTTP endpoint; give a URL such as http://127.0.0.1:4318."
        )
    path = parts.path.rstrip("/")
    if not path.endswith(TRACES_PATH):
        path += TRACES_PATH
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


def shown_endpoint(endpoint: str) -> str:
    """The endpoint as shown to a user: without a ``user:password@`` part."""
    parts = urlsplit(endpoint.strip())
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, host, parts.path, "", "")) if parts.scheme else endpoint


def exporter(endpoint: str, timeout_s: float) -> OTLPSpanExporter:
    """An OTLP/HTTP span exporter for ``endpoint``; ``TelemetryError`` when ``piw[otel]`` is not installed."""
    url = traces_url(endpoint)
    quiet = logging.getLogger("opentelemetry")  # piw reports failures itself, in one line
    if not quiet.handlers:
        quiet.addHandler(logging.NullHandler())
        quiet.propagate = False
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError:
        raise TelemetryError(
            "OpenTelemetry export needs the optional packages: pip install 'piw[otel]'."
        ) from None
    return OTLPSpanExporter(endpoint=url, timeout=timeout_s)


def to_readable(specs: Sequence[SpanSpec]) -> list[Any]:
    """The SDK's finished spans for ``specs`` (resource ``service.name=piw``)."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope
    from opentelemetry.trace import SpanContext, SpanKind, TraceFlags
    from opentelemetry.trace.status import Status, StatusCode

    from piw import __version__

    resource = Resource.create({"service.name": "piw", "service.version": __version__})
    scope = InstrumentationScope("piw", __version__)
    flags = TraceFlags(TraceFlags.SAMPLED)
    spans = []
    for spec in specs:
        context = SpanContext(spec.trace_id, spec.span_id, is_remote=False, trace_flags=flags)
        parent = (
            SpanContext(spec.trace_id, spec.parent_id, is_remote=False, trace_flags=flags)
            if spec.parent_id is not None
            else None
        )
        status = Status(StatusCode.ERROR, spec.error) if spec.error is not None else Status(StatusCode.OK)
        spans.append(
            ReadableSpan(
                spec.name,
                context=context,
                parent=parent,
                resource=resource,
                attributes=dict(spec.attributes),
                kind=SpanKind.CLIENT if spec.kind == "client" else SpanKind.INTERNAL,
                status=status,
                start_time=spec.start_ns,
                end_time=spec.end_ns,
                instrumentation_scope=scope,
            )
        )
    return spans


def send(sender: OTLPSpanExporter, specs: Sequence[SpanSpec]) -> bool:
    """Send ``specs`` in batches; ``False`` as soon as one batch is refused or cannot be delivered."""
    from opentelemetry.sdk.trace.export import SpanExportResult

    for start in range(0, len(specs), BATCH):
        if sender.export(to_readable(specs[start : start + BATCH])) is not SpanExportResult.SUCCESS:
            return False
    return True


def export_specs(endpoint: str, specs: Sequence[SpanSpec], timeout_s: float = 10.0) -> None:
    """Send every span to ``endpoint`` now (``piw export --otlp``); ``TelemetryError`` when it cannot."""
    sender = exporter(endpoint, timeout_s)
    try:
        delivered = send(sender, specs)
    finally:
        sender.shutdown()  # type: ignore[no-untyped-call]
    if not delivered:
        raise TelemetryError(
            f"The collector at {shown_endpoint(endpoint)} did not accept the spans; check that it runs and "
            "listens for OTLP/HTTP there."
        )
