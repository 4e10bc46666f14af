"""Sending one post to a webhook, an ntfy topic or a Telegram chat (``docs/channels.md``).

Each sender takes the post's :class:`~piw.channels.message.Waiting` and its resolved secret, makes one HTTP request
and returns what the channel answered (Telegram: the message id) or raises :class:`SendFailed` with a line that
never holds the secret or the URL (a Telegram URL holds the bot token): only the channel's name, the HTTP status
or the kind of network error.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

import httpx2

from piw.channels.message import Waiting, plain
from piw.config.channels import AnyChannel, NtfyChannel, TelegramChannel, WebhookChannel

SEND_TIMEOUT_S = 10.0
SIGNATURE_HEADER = "X-Piw-Signature"
DELIVERY_HEADER = "X-Piw-Delivery"


class SendFailed(Exception):
    """A post did not get through; the message is safe to store and show."""


def signature(secret: str, body: bytes) -> str:
    """``sha256=<hex>``: HMAC-SHA256 of the exact body bytes with the webhook's secret."""
    return "sha256=" + hmac.new(secret.encode("utf-8"), body, hashlib.sha256).hexdigest()


def _request(client: httpx2.Client, method: str, url: str, **kwargs: Any) -> httpx2.Response:
    try:
        response = client.request(method, url, **kwargs)
    except httpx2.TimeoutException:
        raise SendFailed("timed out") from None
    except httpx2.HTTPError as exc:
        raise SendFailed(f"network error ({type(exc).__name__})") from None
    if response.status_code >= 300:
        raise SendFailed(f"HTTP {response.status_code}")
    return response


def send_webhook(
    client: httpx2.Client, channel: WebhookChannel, secret: str, waiting: Waiting, delivery: str
) -> str | None:
    body = json.dumps(waiting.to_json(), ensure_ascii=False, sort_keys=True).encode("utf-8")
    headers = {
        "Content-Type": "application/json",
        SIGNATURE_HEADER: signature(secret, body),
        DELIVERY_HEADER: delivery,
    }
    _request(client, "POST", channel.url, content=body, headers=headers)
    return None


def send_ntfy(client: httpx2.Client, channel: NtfyChannel, token: str | None, waiting: Waiting) -> str | None:
    """ntfy's JSON publishing form: a title, a plain message, and one ``http`` action per choice (at most 3, ntfy's
    limit; the rest are on the answer page, linked as the message's click target)."""
    actions: list[dict[str, Any]] = []
    for button in waiting.buttons:
        url = waiting.answer_url(button)
        if url is not None and len(actions) < 3:
            actions.append(
                {
                    "action": "http",
                    "label": plain(button.label, 40),
                    "url": url,
                    "method": "POST",
                    "clear": True,
                }
            )
    payload: dict[str, Any] = {
        "topic": channel.topic,
        "title": plain(waiting.headline(), 200),
        "message": waiting.text_plain(),
        "actions": actions,
    }
    if waiting.page_url:
        payload["click"] = waiting.page_url
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    _request(client, "POST", channel.server.rstrip("/") + "/", json=payload, headers=headers)
    return None


def telegram_url(channel: TelegramChannel, token: str, method: str) -> str:
    return f"{channel.base_url.rstrip('/')}/bot{token}/{method}"


def telegram_call(
    client: httpx2.Client,
    channel: TelegramChannel,
    token: str,
    method: str,
    payload: dict[str, Any],
    **kw: Any,
) -> Any:
    """One Bot API call; its ``result`` (``SendFailed`` when the API says ``ok: false``)."""
    response = _request(client, "POST", telegram_url(channel, token, method), json=payload, **kw)
    try:
        data = response.json()
    except ValueError:
        raise SendFailed(f"Telegram {method}: not JSON") from None
    if not isinstance(data, dict) or not data.get("ok"):
        code = data.get("error_code") if isinstance(data, dict) else None
        raise SendFailed(f"Telegram {method}: refused ({code})")
    return data.get("result")


def send_telegram(
    client: httpx2.Client, channel: TelegramChannel, token: str, waiting: Waiting
) -> str | None:
    """``sendMessage`` with an inline keyboard: one callback button per choice (its token is the callback data,
    under Telegram's 64 bytes), or a link button to the answer page for a choice that needs text."""
    rows: list[list[dict[str, str]]] = []
    for button in waiting.buttons:
        label = plain(button.label, 60)
        if button.token is not None:
            rows.append([{"text": label, "callback_data": button.token}])
        elif waiting.page_url is not None:
            rows.append([{"text": label + " …", "url": waiting.page_url}])
    payload = {
        "chat_id": channel.chat_id,
        "text": waiting.text_telegram(),
        "parse_mode": "HTML",
        "disable_web_page_preview": True,
        "reply_markup": {"inline_keyboard": rows},
    }
    result = telegram_call(client, channel, token, "sendMessage", payload)
    return str(result.get("message_id")) if isinstance(result, dict) else None


def send(
    client: httpx2.Client, channel: AnyChannel, secret: str | None, waiting: Waiting, delivery: str
) -> None:
    if isinstance(channel, WebhookChannel):
        assert secret is not None
        send_webhook(client, channel, secret, waiting, delivery)
    elif isinstance(channel, NtfyChannel):
        send_ntfy(client, channel, secret, waiting)
    else:
        assert secret is not None
        send_telegram(client, channel, secret, waiting)
