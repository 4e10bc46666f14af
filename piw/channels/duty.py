"""The channel duty: send due posts, remind, and read Telegram answers (``docs/channels.md``, "Who posts").

``piw host`` calls :meth:`ChannelDuty.tick` on every pass of its loop; the foreground ``piw run`` (``resume``,
``answer``, ``decide``) calls :func:`post_waiting` once when its run stops waiting, so a run answered from a
terminal-less place is announced even where no host runs. Posts go through the lease of their row
(``piw.store.db.channels``), so several hosts and a foreground process never send one post twice at once.

A post is sent only while its run waits on that decision: a run still writing its gate is left for the next
pass, a wait that ended (answered, timed out, cancelled) closes the post. A failed send is retried with backoff
and shown by ``piw inspect``; nothing here ever fails a run or stops the host.

Telegram answers are read by long polling ``getUpdates`` in one thread per bot, started by the host's first
tick; a lease on the bot's cursor row lets one host poll it at a time (Telegram allows one poller per bot).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2

from piw.channels.message import Button, Waiting, plain
from piw.channels.senders import SEND_TIMEOUT_S, SendFailed, send, telegram_call
from piw.config.channels import AnyChannel, TelegramChannel
from piw.errors import AnswerInvalid, AnswerTokenRefused, DecisionResolved, NeedsKey, PiwError
from piw.redaction import resolve_reference
from piw.store.db.channels import ChannelStore, PostRow, open_channel_store

log = logging.getLogger(__name__)

Report = Callable[[str], None]
YOUNG_POST_MS = 10_000
"""A post whose run has not stopped at its gate yet is looked at again on the next pass while it is this young
(the run is about to wait); an older one (its run was interrupted at the gate) less and less often."""


def _secret(channel: AnyChannel) -> str | None:
    import os

    written = channel.secrets()
    if not written:
        return None
    value = resolve_reference(written[0], os.environ)
    if value is None:
        raise NeedsKey(written[0].lstrip("$"))
    return value


class ChannelDuty:
    """Channel posting and polling for one home (a host's, or a foreground command's)."""

    def __init__(self, home: Path, report: Report | None = None, holder: str | None = None) -> None:
        from piw.store.db.holders import runner_id

        self.home = home
        self.report = report or (lambda line: None)
        self.holder = holder or runner_id()
        self._client: httpx2.Client | None = None
        self._pollers: dict[str, TelegramPoller] = {}
        self._stop = threading.Event()
        self._config: tuple[int | None, dict[str, AnyChannel]] | None = None

    def channels(self) -> dict[str, AnyChannel]:
        """The configured channels, read again when ``config.toml`` changes; a broken file is reported once and
        counts as no channels until it is fixed (the host keeps serving)."""
        from piw.config.path import config_path
        from piw.config.settings import load_config
        from piw.errors import ProviderError

        try:
            stamp = config_path(self.home).stat().st_mtime_ns
        except OSError:
            stamp = None
        if self._config is not None and self._config[0] == stamp:
            return self._config[1]
        try:
            found: dict[str, AnyChannel] = dict(load_config(self.home).channels)
        except ProviderError as exc:
            self.report(f"channels: {exc}")
            found = {}
        self._config = (stamp, found)
        return found

    @property
    def client(self) -> httpx2.Client:
        if self._client is None:
            self._client = httpx2.Client(timeout=SEND_TIMEOUT_S, follow_redirects=False)
        return self._client

    def tick(self, run_id: str | None = None, *, poll: bool = True) -> int:
        """One pass: send what is due (of ``run_id`` only, when given); start pollers when ``poll``; posts sent."""
        channels = self.channels()
        if not channels:
            return 0
        store = open_channel_store(self.home)
        sent = sum(self.deliver(store, post, channels) for post in store.lease_due(run_id=run_id))
        if poll:
            for name, channel in channels.items():
                if isinstance(channel, TelegramChannel) and name not in self._pollers:
                    poller = TelegramPoller(self, name, channel)
                    self._pollers[name] = poller
                    poller.start()
        return sent

    def close(self) -> None:
        self._stop.set()
        for poller in self._pollers.values():
            poller.join(timeout=1.0)
        if self._client is not None:
            self._client.close()

    # ---- one post -----------------------------------------------------------------------------------------

    def deliver(self, store: ChannelStore, post: PostRow, channels: dict[str, AnyChannel]) -> bool:
        """Send ``post`` if its run still waits on it; whether it was sent."""
        from piw.run.answers import read_wait
        from piw.store.db.run_database import open_run_database

        decision = open_run_database(self.home).decisions.get_decision(post.decision_id)
        if decision is None or decision.status != "open":
            store.mark_closed(post)
            return False
        try:
            wait, _state = read_wait(self.home, post.run_id)
        except AnswerInvalid as exc:
            if "still running" in str(exc):
                age = store.clock() - (post.created_at or 0)
                store.postpone(post, store.clock() + (0 if age < YOUNG_POST_MS else min(60_000, age // 4)))
            else:
                store.mark_closed(post)
            return False
        except PiwError as exc:
            store.mark_failed(post, f"run not readable: {type(exc).__name__}")
            return False
        if wait.decision_id != post.decision_id:
            store.mark_closed(post)
            return False
        channel = channels.get(post.channel)
        if channel is None:
            store.mark_failed(post, f"channel {post.channel} is not configured")
            return False
        try:
            secret = _secret(channel)
            waiting = self._waiting(
                store, post, channel, wait.output, wait.workflow_name, decision.expires_at
            )
            send(self.client, channel, secret, waiting, f"{post.post_id}.{post.sends}")
        except NeedsKey as exc:
            return self._failed(store, post, f"environment variable {exc.variable} is not set")
        except SendFailed as exc:
            return self._failed(store, post, str(exc))
        every = channel.remind_every_s
        more = every is not None and post.sends < channel.remind_max
        store.mark_sent(post, store.clock() + int(every * 1000) if more and every else None)
        what = f"reminder {post.sends}" if post.sends else "posted"
        self.report(f"{post.run_id}  {post.node_id} {what} to channel {post.channel} ({channel.kind})")
        return True

    def _failed(self, store: ChannelStore, post: PostRow, error: str) -> bool:
        store.mark_failed(post, error)
        self.report(f"{post.run_id}  post to channel {post.channel} failed: {error}; it is retried")
        return False

    def _waiting(
        self,
        store: ChannelStore,
        post: PostRow,
        channel: AnyChannel,
        opened: Any,
        workflow_name: str,
        expires_at: int | None,
    ) -> Waiting:
        """The post's message, with fresh single-use tokens: one per choice that needs no text, one for the page."""
        expires = expires_at or store.clock() + int(channel.token_ttl_s * 1000)
        buttons = []
        for item in opened.get("choices", []):
            if not isinstance(item, dict):
                continue
            needs_text = bool(item.get("inputs"))
            token = None if needs_text else store.mint_token(post, str(item["id"]), expires)
            buttons.append(Button(str(item["id"]), str(item.get("label") or item["id"]), token))
        page = None
        if channel.answer_url is not None:
            page = f"{channel.answer_url}/answer/{store.mint_token(post, None, expires)}"
        timeout = opened.get("onTimeout") if isinstance(opened.get("onTimeout"), dict) else {}
        return Waiting(
            run_id=post.run_id,
            workflow_name=workflow_name,
            node_id=post.node_id,
            decision_id=post.decision_id,
            request_sha256=str(opened.get("requestSha256", "")),
            audience=str(opened.get("audience", "")),
            request=dict(opened.get("request") or {}),
            choices=[item for item in opened.get("choices", []) if isinstance(item, dict)],
            expires_at=timeout.get("expiresAt"),
            reminder=post.sends,
            buttons=buttons,
            page_url=page,
            answer_base=channel.answer_url,
        )


class TelegramPoller(threading.Thread):
    """Long-polls one bot's ``getUpdates`` and answers gates with the button tokens it reads."""

    def __init__(self, duty: ChannelDuty, name: str, channel: TelegramChannel) -> None:
        super().__init__(name=f"telegram-{name}", daemon=True)
        self.duty = duty
        self.channel_name = name
        self.channel = channel

    def run(self) -> None:
        stop = self.duty._stop
        store = open_channel_store(self.duty.home)
        client = httpx2.Client(timeout=self.channel.poll_timeout_s + SEND_TIMEOUT_S)
        failures = 0
        try:
            while not stop.is_set():
                try:
                    failures = self._poll(store, client, failures)
                except Exception as exc:  # polling never stops the host; say why once per failure
                    failures += 1
                    log.warning("telegram %s: %s", self.channel_name, type(exc).__name__)
                    stop.wait(min(60.0, 2.0**failures))
        finally:
            client.close()
            store.release_cursor(self.channel_name, self.duty.holder)

    def _poll(self, store: ChannelStore, client: httpx2.Client, failures: int) -> int:
        stop = self.duty._stop
        offset = store.hold_cursor(self.channel_name, self.duty.holder)
        if offset is None:  # another host polls this bot
            stop.wait(5.0)
            return 0
        token = _secret(self.channel)
        assert token is not None
        try:
            updates = telegram_call(
                client,
                self.channel,
                token,
                "getUpdates",
                {
                    "offset": offset,
                    "timeout": self.channel.poll_timeout_s,
                    "allowed_updates": ["callback_query"],
                },
            )
        except SendFailed as exc:
            self.duty.report(f"telegram channel {self.channel_name}: getUpdates failed: {exc}")
            stop.wait(min(60.0, 2.0 ** (failures + 1)))
            return failures + 1
        for update in updates if isinstance(updates, list) else []:
            if not isinstance(update, dict) or not isinstance(update.get("update_id"), int):
                continue
            query = update.get("callback_query")
            if isinstance(query, dict):
                self._press(client, token, query)
            store.advance_cursor(self.channel_name, self.duty.holder, update["update_id"] + 1)
        return 0

    def _allowed(self, user: dict[str, Any]) -> bool:
        allowed = {str(item).lstrip("@").lower() for item in self.channel.allowed_users}
        if not allowed:
            return True
        return str(user.get("id")) in allowed or str(user.get("username", "")).lower() in allowed

    def _press(self, client: httpx2.Client, token: str, query: dict[str, Any]) -> None:
        from piw.channels.answer import answer_with_token

        user = query.get("from") if isinstance(query.get("from"), dict) else {}
        assert isinstance(user, dict)
        name = f"@{user['username']}" if user.get("username") else str(user.get("first_name") or "?")
        name = plain(name, 64)  # a Telegram name is anyone's text: shown on terminals and in piw inspect
        who = f"telegram {self.channel_name}: {name} (id {user.get('id')})"
        data = str(query.get("data") or "")
        shown: str
        if not self._allowed(user):
            shown = "You may not answer this."
        else:
            try:
                receipt = answer_with_token(self.duty.home, data, None, {}, who)
                choice = receipt.spec.answer.get("choice") if isinstance(receipt.spec.answer, dict) else None
                shown = f"Recorded: {choice}"
                self.duty.report(
                    f"{receipt.spec.parent_run_id}  {receipt.spec.node_id} answered {choice} by {who}: "
                    f"continuing as run {receipt.continuation_run_id}"
                )
                self._clear_keyboard(client, token, query)
            except AnswerTokenRefused:
                shown = "This button was already used or has expired."
            except DecisionResolved:
                shown = "This was already decided."
            except PiwError as exc:
                shown = str(exc)[:190]
        try:
            telegram_call(
                client,
                self.channel,
                token,
                "answerCallbackQuery",
                {"callback_query_id": query.get("id"), "text": shown},
            )
        except SendFailed as exc:
            log.warning("telegram %s: answerCallbackQuery failed: %s", self.channel_name, exc)

    def _clear_keyboard(self, client: httpx2.Client, token: str, query: dict[str, Any]) -> None:
        message = query.get("message") if isinstance(query.get("message"), dict) else None
        if not message:
            return
        chat = message.get("chat") if isinstance(message.get("chat"), dict) else {}
        with contextlib.suppress(SendFailed):  # the buttons stay; a second press is refused
            telegram_call(
                client,
                self.channel,
                token,
                "editMessageReplyMarkup",
                {
                    "chat_id": chat.get("id"),
                    "message_id": message.get("message_id"),
                    "reply_markup": {"inline_keyboard": []},
                },
            )


def post_waiting(home: Path, run_id: str, report: Report | None = None) -> int:
    """The foreground's one pass after its run stopped waiting: send that run's due posts (no polling)."""
    duty = ChannelDuty(home, report)
    try:
        return duty.tick(run_id, poll=False)
    except Exception as exc:  # announcing never fails the command
        log.warning("channels: %s", exc)
        return 0
    finally:
        duty.close()
