"""A real OTLP/HTTP receiver on loopback for the telemetry tests (``docs/telemetry.md``).

An ``http.server`` on port 0 that decodes each ``POST /v1/traces`` body as an ``ExportTraceServiceRequest`` with
``opentelemetry-proto`` and keeps the spans, keyed by ``(trace id, span id)`` as a collector deduplicates them,
and every raw body (to assert that a secret never left the machine).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class ReceivedSpan:
    trace_id: str
    span_id: str
    parent_id: str
    name: str
    kind: int
    start_ns: int
    end_ns: int
    status_code: int
    status_message: str
    attributes: dict[str, Any]
    resource: dict[str, Any]


def _value(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    if kind == "array_value":
        return tuple(_value(item) for item in any_value.array_value.values)
    return getattr(any_value, kind) if kind else None


def _attributes(items: Any) -> dict[str, Any]:
    return {item.key: _value(item.value) for item in items}


@dataclass
class OtlpReceiver:
    """Start with ``with OtlpReceiver() as receiver:``; ``receiver.endpoint`` is its base URL."""

    bodies: list[bytes] = field(default_factory=list)
    spans: list[ReceivedSpan] = field(default_factory=list)
    status: int = 200

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.path == "/v1/traces":
                    receiver._take(body)
                self.send_response(receiver.status if self.path == "/v1/traces" else 404)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def _take(self, body: bytes) -> None:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        found = []
        for resource_spans in request.resource_spans:
            resource = _attributes(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    found.append(
                        ReceivedSpan(
                            span.trace_id.hex(),
                            span.span_id.hex(),
                            span.parent_span_id.hex(),
                            span.name,
                            span.kind,
                            span.start_time_unix_nano,
                            span.end_time_unix_nano,
                            span.status.code,
                            span.status.message,
                            _attributes(span.attributes),
                            resource,
                        )
                    )
        with self._lock:
            self.bodies.append(body)
            self.spans.extend(found)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def unique(self) -> dict[tuple[str, str], ReceivedSpan]:
        """The spans as a collector keeps them: one per ``(trace id, span id)``."""
        with self._lock:
            return {(span.trace_id, span.span_id): span for span in self.spans}

    def named(self, prefix: str) -> list[ReceivedSpan]:
        return [span for span in self.unique().values() if span.name.startswith(prefix)]

    def wait_for(self, check: Callable[[OtlpReceiver], bool], timeout: float = 30.0) -> bool:
        """Wait (bounded) until ``check`` holds; the result, so a test asserts it."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if check(self):
                return True
            time.sleep(0.02)
        return check(self)

    def __enter__(self) -> OtlpReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
