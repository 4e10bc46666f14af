"""``[channels.NAME]`` in ``config.toml``: where a waiting gate is announced and answered (``docs/channels.md``).

Three kinds, one table each: ``webhook`` (a signed JSON POST), ``ntfy`` (a topic message with one action button
per choice) and ``telegram`` (a bot message with an inline keyboard, answers read by long polling). Secrets (the
webhook's signing key, the bot token, an ntfy access token) stay ``$NAME`` references or literals until a request
needs them, like provider keys, so a config object can be shown and logged safely; they are registered with the
redactor (``piw.redaction``) so a run's text never holds them.

A gate reaches a channel when the channel lists the gate's ``audience`` in ``audiences`` (``"*"``: every gate), or
the run's workflow in ``workflows``, or when the audience is the channel's own name.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)\s*(s|m|h|d)?$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def duration_s(value: str | float | int) -> float:
    """Seconds of a duration: a number of minutes, or text ``"90s"``, ``"30m"``, ``"2h"``, ``"1d"``."""
    if isinstance(value, bool):
        raise ValueError("a duration is a number of minutes or text like '30m'")
    if isinstance(value, int | float):
        return float(value) * 60
    match = _DURATION.match(value.strip())
    if match is None:
        raise ValueError(f"duration {value!r} is not like '90s', '30m', '2h' or '1d'")
    return float(match.group(1)) * _UNIT_S[match.group(2) or "m"]


class _Channel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    audiences: list[str] = Field(default_factory=list)
    """Gate audiences this channel announces (``"*"`` for every gate)."""
    workflows: list[str] = Field(default_factory=list)
    """Workflow names whose every gate this channel announces."""
    answer_url: str | None = None
    """The public base URL of ``piw serve`` (e.g. ``https://piw.example.org``): answer links open its page."""
    remind_every: str | float | None = None
    """Post again after this long without an answer (``"30m"``, or minutes)."""
    remind_max: int = Field(default=0, ge=0, le=100)
    """At most this many reminders per wait."""
    token_ttl: str | float = "7d"
    """How long an answer token lives when the gate has no deadline of its own."""

    @field_validator("remind_every", "token_ttl")
    @classmethod
    def _duration(cls, value: str | float | None) -> str | float | None:
        if value is not None and duration_s(value) <= 0:
            raise ValueError("must be a positive duration")
        return value

    @field_validator("answer_url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return None if value is None else value.rstrip("/")

    @property
    def remind_every_s(self) -> float | None:
        return None if self.remind_every is None else duration_s(self.remind_every)

    @property
    def token_ttl_s(self) -> float:
        return duration_s(self.token_ttl)

    def secrets(self) -> list[str]:
        """The configured secret values as written (``$NAME`` or literal)."""
        return []


class WebhookChannel(_Channel):
    kind: Literal["webhook"]
    url: str = Field(min_length=1)
    secret: str = Field(min_length=1)
    """The HMAC-SHA256 key (``$NAME`` from the environment, or a literal)."""

    def secrets(self) -> list[str]:
        return [self.secret]


class NtfyChannel(_Channel):
    kind: Literal["ntfy"]
    server: str = "https://ntfy.sh"
    topic: str = Field(min_length=1, max_length=64)
    token: str | None = None
    """An ntfy access token (``$NAME``), sent as ``Authorization: Bearer``."""

    def secrets(self) -> list[str]:
        return [self.token] if self.token else []


class TelegramChannel(_Channel):
    kind: Literal["telegram"]
    bot_token: str = Field(min_length=1)
    """The bot's token from @BotFather (``$NAME``)."""
    chat_id: str | int
    base_url: str = "https://api.telegram.org"
    """The Bot API's address (tests point it at a loopback stand-in)."""
    allowed_users: list[str | int] = Field(default_factory=list)
    """Telegram user ids or ``@usernames`` whose presses count (empty: anyone in the chat)."""
    poll_timeout_s: int = Field(default=25, ge=0, le=50)
    """``getUpdates`` long-poll timeout."""

    def secrets(self) -> list[str]:
        return [self.bot_token]


AnyChannel = WebhookChannel | NtfyChannel | TelegramChannel
ChannelConfig = Annotated[AnyChannel, Field(discriminator="kind")]
ChannelName = Annotated[str, StringConstraints(pattern=_NAME.pattern)]
ChannelTable = dict[ChannelName, ChannelConfig]
"""``PiwConfig.channels``: names are letters, digits, ``_``, ``.`` and ``-``."""


def chosen(channels: dict[str, AnyChannel], workflow_name: str, audience: str) -> list[str]:
    """The channels a gate of ``workflow_name`` for ``audience`` is announced on, by name."""
    return sorted(
        name
        for name, channel in channels.items()
        if name == audience
        or audience in channel.audiences
        or "*" in channel.audiences
        or workflow_name in channel.workflows
    )
