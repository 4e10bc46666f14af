"""The one redaction of configured secrets: keys and ``$NAME`` header values never leave through a side door.

A provider error often quotes what the server received, and some servers echo the API key back (``Invalid key
sk-…``). That text becomes the step's error, so without this it would land in ``trace.ndjson``, ``state.json``, the
conversation, the terminal and every ``--json`` shape. Every adapter's errors pass through :class:`RedactingProvider`,
and cassettes use :func:`redact` to refuse a record that would hold a secret. Finding a secret in text is
:class:`piw.redaction.Redactor`'s, which also keeps a key the model repeats out of runs (``docs/guarantees.md``).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator

from piw.providers.base import ChatRequest, ErrorEvent, Provider, ProviderEvent, WrappedProvider
from piw.redaction import MIN_SECRET_LENGTH, REDACTED, Redactor

__all__ = ["MIN_SECRET_LENGTH", "REDACTED", "RedactingProvider", "contains_secret", "redact"]


def redact(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every occurrence of every secret replaced by ``[redacted]`` (longest first): the one
    :class:`piw.redaction.Redactor`, which also redacts what runs store and show."""
    return Redactor(secrets).text(text)


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
