"""Accepting updates from running attempts (``updates-progress.md`` §4), in the spec's order.

Active attempt → (agent) idempotency → envelope and type validation → current-pair limit → rate limit → fence,
append ``update_published`` durably, fold. A failed check writes nothing.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from typing import Any

from piw.errors import AttemptInactive, UpdateRejected
from piw.updates import TokenBucket, UpdateReceipt, check_pair_limit, new_update_id, validate_update
from piw.writer import RunWriter


class UpdatePublisher:
    """One per run: shares the run's token bucket between every publisher of that run."""

    def __init__(self, writer: RunWriter, bucket: TokenBucket | None = None) -> None:
        self.writer = writer
        self.bucket = bucket or TokenBucket()

    def publish(
        self,
        node_id: str,
        attempt_id: str,
        raw: Any,
        *,
        is_active: Any = None,
        idempotency_key: str | None = None,
        wait_for_token: threading.Event | None = None,
    ) -> UpdateReceipt:
        """Validate and durably record one update for the active attempt; returns its receipt."""
        with self.writer.mutex:
            current = self.writer.state.current
            active = current is not None and current.node_id == node_id and current.attempt_id == attempt_id
            if not active or (is_active is not None and not is_active()):
                raise AttemptInactive(node_id, attempt_id)
            if idempotency_key is not None:
                previous = self._find_idempotent(attempt_id, idempotency_key)
                if previous is not None:
                    if _canonical(raw) != _canonical(
                        {"type": previous.type, "key": previous.key, "data": previous.data}
                    ):
                        raise UpdateRejected(f"update reuses tool call id {idempotency_key} with different content")
                    return previous.receipt
            update = validate_update(raw)
            check_pair_limit(self.writer.state.updates.keys(), update.type, update.key)
            if wait_for_token is None:
                self.bucket.take_or_reject()
        if wait_for_token is not None:
            self.bucket.wait_take(wait_for_token)
        with self.writer.mutex:
            current = self.writer.state.current
            if current is None or current.attempt_id != attempt_id or (is_active is not None and not is_active()):
                raise AttemptInactive(node_id, attempt_id)
            payload: dict[str, Any] = {
                "updateId": new_update_id(),
                "type": update.type,
                "key": update.key,
                "data": update.data,
            }
            if idempotency_key is not None:
                payload["idempotencyKey"] = idempotency_key
            event = self.writer.append("node", "update_published", payload, node_id=node_id, attempt_id=attempt_id,
                                       sync=True)  # fmt: skip
            return UpdateReceipt(payload["updateId"], event.seq, event.at, update.type, update.key)

    def _find_idempotent(self, attempt_id: str, key: str) -> _Previous | None:
        """Agent tool-call ids: the trace is the commit point, so look up the attempt's earlier publication."""
        from piw.trace import read_trace

        for event in read_trace(self.writer.bundle.trace_path).events:
            payload = event.payload
            if (
                event.type == "update_published"
                and event.attempt_id == attempt_id
                and payload.get("idempotencyKey") == key
            ):
                receipt = UpdateReceipt(payload["updateId"], event.seq, event.at, payload["type"], payload["key"])
                return _Previous(payload["type"], payload["key"], payload["data"], receipt)
        return None


def _canonical(value: Any) -> str | None:
    """Canonical JSON for comparing redelivered tool calls (``True`` and ``1`` differ)."""
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError):
        return None


class _Previous:
    def __init__(self, type: str, key: str, data: Mapping[str, Any], receipt: UpdateReceipt) -> None:
        self.type, self.key, self.data, self.receipt = type, key, data, receipt
