"""Redaction of configured secrets from everything piw stores or shows (``docs/guarantees.md``, "Redaction of secrets").

A model can repeat a key it was shown (or guessed from a tool's output), a tool can print one, a shell step can
``echo`` one. Whatever holds it would be stored verbatim in ``trace.ndjson``, ``state.json``, the conversation and
the artifacts, and printed by every command that shows a run. One :class:`Redactor` per home replaces every
configured secret with ``[redacted]`` where text enters the record: the run writer (every trace event, hence the
folded state, the artifacts and the runs index), the conversation log, and the agent loop's live events (the
terminal's streamed deltas, the pi-rpc backend's too).

What a secret is comes from :data:`SECRET_SOURCES`, functions of the raw ``config.toml`` mapping and the
environment; a new kind of secret (a database password, a notification token) is one more function
(:func:`secret_source`). Values shorter than :data:`MIN_SECRET_LENGTH` characters are not redacted: replacing every
``abc`` in a run's text would mangle it and such a value protects nothing.
"""

from __future__ import annotations

import os
import re
import threading
import tomllib
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import orjson

from piw.env_refs import ENV_REFERENCE

REDACTED = "[redacted]"
MIN_SECRET_LENGTH = 8
"""Shorter values are never redacted (see the module docstring; ``docs/guarantees.md``)."""

SecretSource = Callable[[Mapping[str, Any], Mapping[str, str]], Iterable[str]]
SECRET_SOURCES: list[SecretSource] = []
"""Every function that names secrets of a home: ``(raw config.toml mapping, environment) -> values``."""


def secret_source(source: SecretSource) -> SecretSource:
    """Register ``source`` in :data:`SECRET_SOURCES` (a decorator)."""
    SECRET_SOURCES.append(source)
    return source


def resolve_reference(value: object, env: Mapping[str, str]) -> str | None:
    """A ``$NAME`` reference's value in ``env``, a literal as it is; ``None`` for an unset variable or a non-string."""
    if not isinstance(value, str):
        return None
    match = ENV_REFERENCE.match(value)
    return env.get(match.group(1)) if match else value


def _tables(raw: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    tables = raw.get(key)
    return (
        [table for table in tables.values() if isinstance(table, Mapping)]
        if isinstance(tables, Mapping)
        else []
    )


@secret_source
def provider_keys(raw: Mapping[str, Any], env: Mapping[str, str]) -> Iterable[str]:
    """``[providers.NAME]``: ``api_key`` (literal or ``$NAME``) and ``$NAME`` header values (literal headers such
    as ``X-Client = "piw"`` are settings, not secrets)."""
    for table in _tables(raw, "providers"):
        yield from filter(None, [resolve_reference(table.get("api_key"), env)])
        headers = table.get("headers")
        for value in headers.values() if isinstance(headers, Mapping) else ():
            if isinstance(value, str) and ENV_REFERENCE.match(value):
                yield from filter(None, [resolve_reference(value, env)])


@secret_source
def database_password(raw: Mapping[str, Any], env: Mapping[str, str]) -> Iterable[str]:
    """``[database] password`` (literal or ``$NAME``), when a database is configured."""
    table = raw.get("database")
    if isinstance(table, Mapping):
        yield from filter(None, [resolve_reference(table.get("password"), env)])
        yield from _url_password(table.get("url"))
    yield from _url_password(env.get("PIW_DATABASE"))


_SECRET_NAME = re.compile(r"(?i)key|token|secret|passw|auth|credential|cookie")


@secret_source
def mcp_secrets(raw: Mapping[str, Any], env: Mapping[str, str]) -> Iterable[str]:
    """``[mcp.NAME]`` ``env`` and ``headers``: every ``$NAME`` value, and literal values under a name that looks
    secret (``API_KEY``, ``Authorization``), with the credential of a ``Bearer …`` value on its own; other literals
    (``LOG_LEVEL = "debug"``) are settings (``docs/tools-mcp.md``)."""
    for table in _tables(raw, "mcp"):
        for key in ("env", "headers"):
            values = table.get(key)
            for name, value in values.items() if isinstance(values, Mapping) else ():
                if not isinstance(value, str):
                    continue
                if ENV_REFERENCE.match(value) or _SECRET_NAME.search(str(name)):
                    resolved = resolve_reference(value, env)
                    yield from filter(None, [resolved])
                    scheme, _, credential = (resolved or "").partition(" ")
                    if credential and scheme.lower() in ("bearer", "basic", "token"):
                        yield credential  # the token alone, as a model or a server may repeat it
        yield from _url_password(table.get("url"))


@secret_source
def channel_secrets(raw: Mapping[str, Any], env: Mapping[str, str]) -> Iterable[str]:
    """``[channels.NAME]``: a webhook's ``secret``, a bot's ``bot_token``, an ntfy ``token`` (``docs/channels.md``)."""
    for table in _tables(raw, "channels"):
        for key in ("secret", "bot_token", "token"):
            yield from filter(None, [resolve_reference(table.get(key), env)])


def _url_password(url: object) -> Iterable[str]:
    """The password inside a ``postgresql://user:PASSWORD@host/db`` URL (``PIW_DATABASE`` or ``[database] url``),
    as written and percent-decoded."""
    if not isinstance(url, str) or "@" not in url:
        return
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return
    if password:
        yield password
        yield unquote(password)


class Redactor:
    """Replaces each of ``secrets`` (longest first, shorter than :data:`MIN_SECRET_LENGTH` ignored) in text and in
    JSON-like values; an empty redactor returns everything unchanged at no cost."""

    def __init__(self, secrets: Iterable[str]) -> None:
        kept = sorted({s for s in secrets if len(s) >= MIN_SECRET_LENGTH}, key=lambda s: (-len(s), s))
        self.secrets: tuple[str, ...] = tuple(kept)
        self._pattern = re.compile("|".join(map(re.escape, kept))) if kept else None
        self._encoded = tuple({orjson.dumps(s)[1:-1] for s in kept} | {s.encode() for s in kept})
        """The secrets as they appear inside a JSON string: one search over a payload's encoding tells whether it
        holds any, so a payload without secrets is not walked at all."""

    def __bool__(self) -> bool:
        return self._pattern is not None

    def text(self, text: str) -> str:
        """``text`` itself when it holds no secret (callers compare by identity), else a redacted copy."""
        if self._pattern is None or self._pattern.search(text) is None:
            return text
        return self._pattern.sub(REDACTED, text)

    def value(self, value: Any) -> Any:
        """``value`` with every string in it (dict keys too) redacted; the same object when nothing changed."""
        if self._pattern is None:
            return value
        try:
            encoded = orjson.dumps(value)
        except TypeError:  # not plain JSON data (a tuple key, an object): walk it
            return self._walk(value)
        return self._walk(value) if any(secret in encoded for secret in self._encoded) else value

    def _walk(self, item: Any) -> Any:
        kind = type(item)
        if kind is str:
            return self.text(item)
        if kind is dict:
            changed = False
            converted = {}
            for key, inner in item.items():
                new_key, new_inner = self._walk(key), self._walk(inner)
                changed = changed or new_key is not key or new_inner is not inner
                converted[new_key] = new_inner
            return converted if changed else item
        if kind is list or kind is tuple:
            walked = [self._walk(inner) for inner in item]
            if all(a is b for a, b in zip(walked, item, strict=True)):
                return item
            return walked if kind is list else tuple(walked)
        return item

    def held_back(self, text: str) -> int:
        """How many of ``text``'s last characters could begin a secret (a stream holds them until it knows)."""
        longest = 0
        for secret in self.secrets:
            for size in range(min(len(secret) - 1, len(text)), longest, -1):
                if text.endswith(secret[:size]):
                    longest = size
                    break
        return longest

    def stream(self) -> StreamRedactor:
        return StreamRedactor(self)


class StreamRedactor:
    """Redacts text that arrives in pieces (streamed deltas): a secret split across two pieces is still found,
    because a tail that could begin one is held until the next piece (or :meth:`flush`) decides."""

    def __init__(self, redactor: Redactor) -> None:
        self.redactor = redactor
        self._held = ""

    def feed(self, piece: str) -> str:
        """What can be shown of the text so far: redacted, without a tail that may still become a secret."""
        if not self.redactor:
            return piece
        text = self.redactor.text(self._held + piece)
        keep = self.redactor.held_back(text)
        self._held = text[len(text) - keep :] if keep else ""
        return text[: len(text) - keep]

    def flush(self) -> str:
        held, self._held = self._held, ""
        return held


# ---- the redactor of a home -------------------------------------------------------------------------------

_lock = threading.Lock()
_raw_cache: dict[str, tuple[tuple[int, int] | None, Mapping[str, Any]]] = {}
_redactors: dict[tuple[str, ...], Redactor] = {}


def home_secrets(home: Path, env: Mapping[str, str] | None = None) -> list[str]:
    """Every secret :data:`SECRET_SOURCES` name for ``home`` (its ``config.toml``) and ``env`` (``os.environ``)."""
    raw = _raw_config(home)
    environment = os.environ if env is None else env
    return sorted({secret for source in SECRET_SOURCES for secret in source(raw, environment) if secret})


def redactor_for(home: Path, env: Mapping[str, str] | None = None) -> Redactor:
    """The :class:`Redactor` of ``home``'s configured secrets (the file is re-read when it changes)."""
    secrets = tuple(home_secrets(home, env))
    with _lock:
        found = _redactors.get(secrets)
        if found is None:
            found = _redactors[secrets] = Redactor(secrets)
        return found


def _raw_config(home: Path) -> Mapping[str, Any]:
    """``home/config.toml`` as a mapping, cached by modification time and size; ``{}`` when absent or broken
    (a broken file is reported by whatever reads it strictly; its values still cannot be known here)."""
    path = home / "config.toml"
    try:
        stat = path.stat()
        mark: tuple[int, int] | None = (stat.st_mtime_ns, stat.st_size)
    except OSError:
        mark = None
    key = str(home)
    with _lock:
        cached = _raw_cache.get(key)
        if cached is not None and cached[0] == mark:
            return cached[1]
    raw: Mapping[str, Any] = {}
    if mark is not None:
        try:
            raw = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
            raw = {}
    with _lock:
        _raw_cache[key] = (mark, raw)
    return raw


# ---- live events ----------------------------------------------------------------------------------------------


def redact_event(event: Any, redactor: Redactor) -> Any:
    """A pydantic event (or any value) with every string field redacted; the same object when nothing changed."""
    if not redactor:
        return event
    fields = getattr(type(event), "model_fields", None)
    if fields is None:
        return _redact_container(event, redactor)
    update = {}
    for name in fields:
        current = getattr(event, name)
        cleaned = redact_event(current, redactor)
        if cleaned is not current:
            update[name] = cleaned
    return event.model_copy(update=update) if update else event


def _redact_container(value: Any, redactor: Redactor) -> Any:
    """Lists, tuples and dicts whose items may be pydantic models (an assistant reply's content blocks)."""
    if type(value) in (list, tuple):
        items = [redact_event(item, redactor) for item in value]
        if all(a is b for a, b in zip(items, value, strict=True)):
            return value
        return items if type(value) is list else tuple(items)
    if type(value) is dict:
        pairs = {key: redact_event(inner, redactor) for key, inner in value.items()}
        return value if all(pairs[key] is value[key] for key in value) else redactor.value(pairs)
    return redactor.value(value)


class RedactingListener:
    """Wraps an agent-loop listener (the live display, origin delivery): streamed deltas go through a
    :class:`StreamRedactor` per content block, every other event is redacted whole
    (``docs/design/agent-steps.md`` §4)."""

    def __init__(self, inner: Callable[[Any], None], redactor: Redactor) -> None:
        self.inner = inner
        self.redactor = redactor
        self._streams: dict[tuple[str, int], tuple[StreamRedactor, Any]] = {}

    def __call__(self, event: Any) -> None:
        if not self.redactor:
            self.inner(event)
            return
        if getattr(event, "type", None) == "message_update":
            key = (str(event.delta), int(event.content_index))
            stream = self._streams.get(key, (self.redactor.stream(), event))[0]
            self._streams[key] = (stream, event)
            shown = stream.feed(event.text)
            if shown:
                self.inner(event.model_copy(update={"text": shown}))
            return
        self._flush()
        self.inner(redact_event(event, self.redactor))

    def _flush(self) -> None:
        streams, self._streams = self._streams, {}
        for stream, last in streams.values():
            rest = stream.flush()
            if rest:
                self.inner(last.model_copy(update={"text": rest}))


def redacting_listeners(
    listeners: Iterable[Callable[[Any], None]], redactor: Redactor
) -> list[Callable[[Any], None]]:
    """``listeners`` each wrapped in a :class:`RedactingListener` (unchanged when there is nothing to redact)."""
    return [RedactingListener(listener, redactor) if redactor else listener for listener in listeners]
