"""How a waiting run's channel posts stand, for ``piw inspect`` and the end of ``piw run`` (``docs/channels.md``).

Read only, from the run database: sent (how many times, reminders included), retrying (the last error and when
the next try is due), gave up, or closed before it was sent. A missing or unreadable database shows nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from piw.errors import PiwError


def posts_json(home: Path, run_id: str) -> list[dict[str, Any]]:
    from piw.store.db.channels import open_channel_store
    from piw.store.db.database import database_path
    from piw.store.place import database_place

    if database_place(home) is None and not database_path(home).is_file():
        return []
    try:
        return [post.to_json() for post in open_channel_store(home).posts_of(run_id)]
    except PiwError:
        return []


def describe(post: dict[str, Any], now_ms: int) -> str:
    """One line for a post: ``hook: sent (1 reminder)``, ``tg: retrying after HTTP 500 (attempt 3, next in 40 s)``."""
    name, status, sends = post["channel"], post["status"], int(post.get("sends") or 0)
    if post.get("lastError") and status in ("pending", "sent") and post.get("dueAt") is not None:
        wait_s = max(0, (int(post["dueAt"]) - now_ms) // 1000)
        done = (
            f"sent, then a reminder failed: {post['lastError']}" if sends else f"failing: {post['lastError']}"
        )
        return f"{name}: {done} (attempt {post['attempts']}, next try in {wait_s} s)"
    if status == "failed":
        return f"{name}: gave up after {post['attempts']} failed attempts: {post.get('lastError')}"
    if status == "sent":
        reminders = sends - 1
        return f"{name}: sent" + (
            f" ({reminders} reminder{'s' if reminders != 1 else ''})" if reminders else ""
        )
    if status == "closed":
        return f"{name}: not sent (the wait ended first)"
    return f"{name}: queued"


def channel_lines(home: Path, run_id: str) -> list[str]:
    from piw.store.db.database import now_ms

    posts = posts_json(home, run_id)
    return [f"Channel {describe(post, now_ms())}" for post in posts]
