"""The one redaction of configured secrets: keys and ``$NAME`` header values never leave through a side door.

A provider error often quotes what the server received, and some servers echo the API key back (``Invalid key
sk-…``). That text becomes the step's error, so without this it would land in ``trace.ndjson``, ``state.json``, the
conversation, the terminal and every ``--json`` shape. Every adapter's errors pass through :class:`RedactingProvider`,
and cassettes use :func:`redact` to refuse a record that would hold a secret, so there is one definition of what a
secret is (``configured_secrets``) and one way of finding it in text.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator

from piw.providers.base import ChatRequest, ErrorEvent, Provider, ProviderEvent, WrappedProvider

REDACTED = "[redacted]"
MIN_SECRET_LENGTH = 4
"""Shorter values are not treated as secrets: replacing every ``ab`` in an error would garble it for nothing."""


def redact(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every occurrence of every secret replaced by ``[redacted]`` (longest first)."""
    for secret in sorted({s for s in secrets if len(s) >= MIN_SECRET_LENGTH}, key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    return text


def contains_secret(text: str, secrets: Iterable[str]) -> bool:
    return redact(text, secrets) != text


class RedactingProvider(WrappedProvider):
    """Wraps a provider so the error message of its final ``error`` event never holds a configured secret."""

    def __init__(self, inner: Provider, secrets: Iterable[str]) -> None:
        super().__init__(inner)
        self.secrets = [secret for secret in secrets if len(secret) >= MIN_SECRET_LENGTH]

    def stream(self, request: ChatRequest, cancel: threading.Event) -> Iterator[ProviderEvent]:
        for event in self.inner.stream(request, cancel):
            if isinstance(event, ErrorEvent) and event.message.error_message:
                cleaned = redact(event.message.error_message, self.secrets)
                if cleaned != event.message.error_message:
                    message = event.message.model_copy(update={"error_message": cleaned})
                    event = event.model_copy(update={"message": message})
            yield event

    def close(self) -> None:
        close = getattr(self.inner, "close", None)
        if callable(close):
            close()
