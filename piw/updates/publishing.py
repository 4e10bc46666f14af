"""Accepting updates from running attempts (``docs/design/updates-progress.md`` §4), in the spec's order.

Active attempt → (agent) idempotency → envelope and type validation → current-pair limit → rate limit → fence,
append ``update_published`` durably, fold. A failed check writes nothing.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from typing import Any

from piw.errors import AttemptInactive, UpdateRejected
from piw.store.writer import RunWriter
from piw.updates.envelope import (
    TokenBucket,
    UpdateInput,
    UpdateReceipt,
    check_pair_limit,
    new_update_id,
    validate_update,
)


class UpdatePublisher:
    """Accepts updates for one run: the engine makes one per writer and hands it to every attempt, so the run's
    publishers (actions, shell readers, the agent tool, ``run_agent`` children) share one token bucket. A resumed
    run gets a new writer and so a full bucket, as the bucket is never persisted."""

    def __init__(self, writer: RunWriter, bucket: TokenBucket | None = None) -> None:
        self.writer = writer
        self.bucket = bucket or TokenBucket()
        self._keyed: dict[str, dict[str, _Previous]] = {}
        """attempt id → tool call id → its accepted update (loaded from the trace once per attempt)."""

    def publish(
        self,
        node_id: str,
        attempt_id: str,
        raw: Any,
        *,
        is_active: Callable[[], bool] | None = None,
        idempotency_key: str | None = None,
        wait_for_token: threading.Event | None = None,
    ) -> UpdateReceipt:
        """Validate and durably record one update for the active attempt; returns its receipt.

        Without ``wait_for_token`` every check and the append happen under the writer's lock, so no other
        publisher can slip in between (the pair limit holds under concurrency). A shell reader waits for a
        token outside the lock, then repeats the checks another publisher may have invalidated meanwhile.
        """
        with self.writer.mutex:
            self._check_active(node_id, attempt_id, is_active)
            if idempotency_key is not None:
                previous = self._find_idempotent(attempt_id, idempotency_key)
                if previous is not None:
                    if _canonical(raw) != _canonical(
                        {"type": previous.type, "key": previous.key, "data": previous.data}
                    ):
                        raise UpdateRejected(
                            f"update reuses tool call id {idempotency_key} with different content"
                        )
                    return previous.receipt
            update = validate_update(raw)
            check_pair_limit(self.writer.state.updates.keys(), update.type, update.key)
            if wait_for_token is None:
                self.bucket.take_or_reject()
                return self._append(node_id, attempt_id, update, idempotency_key)
        if not self.bucket.wait_take(wait_for_token):
            raise AttemptInactive(node_id, attempt_id)  # cancelled, parked or past its deadline while waiting
        with self.writer.mutex:
            self._check_active(node_id, attempt_id, is_active)
            check_pair_limit(self.writer.state.updates.keys(), update.type, update.key)
            return self._append(node_id, attempt_id, update, idempotency_key)

    def _check_active(self, node_id: str, attempt_id: str, is_active: Callable[[], bool] | None) -> None:
        current = self.writer.state.current
        active = current is not None and current.node_id == node_id and current.attempt_id == attempt_id
        if not active or (is_active is not None and not is_active()):
            raise AttemptInactive(node_id, attempt_id)

    def _append(
        self, node_id: str, attempt_id: str, update: UpdateInput, idempotency_key: str | None
    ) -> UpdateReceipt:
        """Fence, append and make durable (``sync``: the receipt is an effect boundary), then fold."""
        payload: dict[str, Any] = {
            "updateId": new_update_id(),
            "type": update.type,
            "key": update.key,
            "data": update.data,
        }
        if idempotency_key is not None:
            payload["idempotencyKey"] = idempotency_key
        event = self.writer.append(
            "node", "update_published", payload, node_id=node_id, attempt_id=attempt_id, sync=True
        )
        receipt = UpdateReceipt(payload["updateId"], event.seq, event.at, update.type, update.key)
        if idempotency_key is not None and attempt_id in self._keyed:
            self._keyed[attempt_id][idempotency_key] = _Previous(
                update.type, update.key, update.data, receipt
            )
        return receipt

    def _find_idempotent(self, attempt_id: str, key: str) -> _Previous | None:
        """Agent tool-call ids: the trace is the commit point, so an attempt's keyed updates are read from it once
        (a reattached attempt may have published before the crash) and then kept current by ``_append``."""
        if attempt_id not in self._keyed:
            from piw.store.trace import read_trace

            seen: dict[str, _Previous] = {}
            for event in read_trace(self.writer.bundle.trace_path).events:
                payload = event.payload
                if (
                    event.type == "update_published"
                    and event.attempt_id == attempt_id
                    and "idempotencyKey" in payload
                ):
                    receipt = UpdateReceipt(
                        payload["updateId"], event.seq, event.at, payload["type"], payload["key"]
                    )
                    seen[payload["idempotencyKey"]] = _Previous(
                        payload["type"], payload["key"], payload["data"], receipt
                    )
            self._keyed[attempt_id] = seen
        return self._keyed[attempt_id].get(key)


def _canonical(value: Any) -> str | None:
    """Canonical JSON for comparing redelivered tool calls (``True`` and ``1`` differ)."""
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError):
        return None


class _Previous:
    def __init__(self, type: str, key: str, data: Mapping[str, Any], receipt: UpdateReceipt) -> None:
        self.type, self.key, self.data, self.receipt = type, key, data, receipt
