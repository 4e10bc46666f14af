"""Loopback stand-ins for the channels' far ends (``docs/channels.md``): each records what it receives.

- :class:`Receiver`: any HTTP endpoint (a webhook receiver, an ntfy server): every request's method, path,
  headers and body; ``status`` sets what it answers (a failing receiver for the retry tests).
- :class:`TelegramStandIn`: the Bot API methods piw calls, under ``/bot<TOKEN>/<method>``: ``sendMessage``
  records the message and its inline keyboard, ``getUpdates`` long-polls (bounded) the updates the test made with
  :meth:`TelegramStandIn.press`, any other method (``answerCallbackQuery``, ``editMessageReplyMarkup``) is recorded
  and answered ``ok``. A request with another bot token gets 401, as the real API does.

All bind 127.0.0.1 on a free port; nothing leaves the machine.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Receiver:
    """Records every request; answers ``status``."""

    status: int = 200
    received: list[Received] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    url: str = ""

    def handle(self, request: Received) -> tuple[int, bytes]:
        with self.lock:
            self.received.append(request)
        return self.status, b'{"ok": true}'


@dataclass
class TelegramStandIn(Receiver):
    token: str = "123456:stand-in-bot-token-xyz"
    messages: list[dict[str, Any]] = field(default_factory=list)
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    updates: list[dict[str, Any]] = field(default_factory=list)
    changed: threading.Condition = field(default_factory=threading.Condition)
    next_update: int = 100
    max_hold_s: float = 1.0

    def handle(self, request: Received) -> tuple[int, bytes]:
        prefix = f"/bot{self.token}/"
        if not request.path.startswith(prefix):
            return 401, json.dumps({"ok": False, "error_code": 401, "description": "Unauthorized"}).encode()
        method = request.path[len(prefix) :]
        payload = request.json() if request.body else {}
        with self.changed:
            self.calls.append((method, payload))
        if method == "sendMessage":
            with self.changed:
                message_id = len(self.messages) + 1
                self.messages.append({**payload, "message_id": message_id})
                self.changed.notify_all()
            return 200, json.dumps({"ok": True, "result": {"message_id": message_id}}).encode()
        if method == "getUpdates":
            offset = int(payload.get("offset") or 0)
            hold = min(float(payload.get("timeout") or 0), self.max_hold_s)
            with self.changed:
                self.changed.wait_for(lambda: self._after(offset), timeout=hold)
                found = self._after(offset)
            return 200, json.dumps({"ok": True, "result": found}).encode()
        return 200, b'{"ok": true, "result": true}'

    def _after(self, offset: int) -> list[dict[str, Any]]:
        return [update for update in self.updates if update["update_id"] >= offset]

    def press(self, message: int, choice: str, user: dict[str, Any]) -> None:
        """A person presses the button of ``choice`` under message number ``message`` (1-based)."""
        with self.changed:
            sent = self.messages[message - 1]
            rows = sent["reply_markup"]["inline_keyboard"]
            (data,) = [
                b["callback_data"] for row in rows for b in row if b.get("text", "").startswith(choice)
            ]
            self.next_update += 1
            self.updates.append(
                {
                    "update_id": self.next_update,
                    "callback_query": {
                        "id": f"cq{self.next_update}",
                        "from": user,
                        "data": data,
                        "message": {"message_id": sent["message_id"], "chat": {"id": sent["chat_id"]}},
                    },
                }
            )
            self.changed.notify_all()

    def answered(self) -> list[str]:
        """The texts piw answered button presses with (``answerCallbackQuery``)."""
        with self.changed:
            return [str(p.get("text")) for m, p in self.calls if m == "answerCallbackQuery"]


@contextmanager
def serving(stub: Receiver) -> Iterator[Receiver]:
    """Serve ``stub`` on 127.0.0.1 (a free port) for the block; ``stub.url`` is its base URL."""

    class Handler(BaseHTTPRequestHandler):
        def _any(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            request = Received(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body)
            status, reply = stub.handle(request)
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        do_POST = do_GET = do_PUT = _any

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    stub.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield stub
    finally:
        server.shutdown()
        server.server_close()
