"""What a channel post says, neutralised for each channel's markup (``docs/channels.md``, "What is sent").

A gate's request is workflow text (a model may have written it). Each channel gets it in a form its client shows
as text: Telegram's HTML parse mode with ``& < >`` escaped (and nothing else interpreted), ntfy plain text (its
markdown mode stays off) with no control characters, webhook JSON as data. Every channel truncates long text, and
control and bidi-override characters become visible escapes, as on a terminal (``piw.terminal``).
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any

from piw.terminal import sanitize_terminal_text

MAX_TITLE = 200
MAX_SUMMARY = 1_500


def plain(text: object, limit: int) -> str:
    """``text`` without control characters, clipped to ``limit`` characters."""
    value = sanitize_terminal_text(str(text)).strip()
    return value if len(value) <= limit else value[: limit - 1] + "…"


def telegram_html(text: object, limit: int) -> str:
    """Plain text escaped for Telegram's ``parse_mode=HTML`` (only ``&``, ``<`` and ``>`` are special there)."""
    return html.escape(plain(text, limit), quote=False)


@dataclass(frozen=True)
class Button:
    choice: str
    label: str
    token: str | None
    """The single-use token of this choice's button; ``None`` when the choice needs text (the page asks it)."""


@dataclass(frozen=True)
class Waiting:
    """One waiting gate as a post shows it."""

    run_id: str
    workflow_name: str
    node_id: str
    decision_id: str
    request_sha256: str
    audience: str
    request: dict[str, Any]
    choices: list[dict[str, Any]]
    expires_at: str | None
    reminder: int
    """0 for the first post, then 1, 2, … for reminders."""
    buttons: list[Button] = field(default_factory=list)
    page_url: str | None = None
    """The answer page (``piw serve``), when the channel has an ``answer_url``."""
    answer_base: str | None = None

    @property
    def title(self) -> str:
        return str(self.request.get("title") or f"Decision {self.node_id}")

    def headline(self) -> str:
        prefix = f"Reminder {self.reminder}: " if self.reminder else ""
        return f"{prefix}{self.workflow_name} waits for {self.audience}"

    def answer_url(self, button: Button) -> str | None:
        if self.answer_base is None or button.token is None:
            return None
        return f"{self.answer_base}/answer/{button.token}"

    def to_json(self) -> dict[str, Any]:
        """The webhook body: the request as data, with each choice's answer URL and token."""
        return {
            "type": "piw.decision.waiting",
            "runId": self.run_id,
            "workflowName": self.workflow_name,
            "nodeId": self.node_id,
            "decisionId": self.decision_id,
            "requestSha256": self.request_sha256,
            "audience": self.audience,
            "request": self.request,
            "choices": self.choices,
            "expiresAt": self.expires_at,
            "reminder": self.reminder,
            "answerPage": self.page_url,
            "answers": [
                {"choice": b.choice, "label": b.label, "token": b.token, "url": self.answer_url(b)}
                for b in self.buttons
            ],
        }

    def text_plain(self) -> str:
        lines = [plain(self.headline(), MAX_TITLE), plain(self.title, MAX_TITLE)]
        summary = self.request.get("summary") or self.request.get("subject")
        if summary:
            lines.append(plain(summary, MAX_SUMMARY))
        lines.append(f"run {self.run_id} · request {self.request_sha256[:19]}")
        if self.expires_at:
            lines.append(f"expires {self.expires_at}")
        return "\n".join(lines)

    def text_telegram(self) -> str:
        lines = [f"<b>{telegram_html(self.headline(), MAX_TITLE)}</b>", telegram_html(self.title, MAX_TITLE)]
        summary = self.request.get("summary") or self.request.get("subject")
        if summary:
            lines.append(telegram_html(summary, MAX_SUMMARY))
        lines.append(
            f"<code>{html.escape(self.run_id)}</code> · request {html.escape(self.request_sha256[:19])}"
        )
        if self.expires_at:
            lines.append(f"expires {html.escape(self.expires_at)}")
        if self.page_url is None and any(b.token is None for b in self.buttons):
            lines.append("Choices that need text: answer with piw decide.")
        return "\n".join(lines)
