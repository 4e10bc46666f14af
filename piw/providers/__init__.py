"""Model providers: the adapters that turn a ``ChatRequest`` into streamed events and a final message.

This package's ``__init__`` stays tiny on purpose: it holds only the request guard, so importing it (as the
test suite's ``conftest.py`` does to flip ``ALLOW_MODEL_REQUESTS``) never pulls in an HTTP SDK.

    base                the request, the event stream, the ``Provider`` protocol and ``complete()``
    builder             assembles streamed deltas into events and the final ``AssistantReply``
    config              ``$PIW_HOME/config.toml`` models, ``$NAME`` secrets, prices
    selection           flag > env > default provider selection; display-safe summaries
    factory             ``build_provider``: selection + config → a ready provider (cassettes applied)
    openai_compat       the ``openai-completions`` adapter (``openai`` SDK); openai_request builds the body
    anthropic_messages  the ``anthropic-messages`` adapter (optional ``anthropic`` SDK)
    scripted            the deterministic offline provider and its script files
    cassette            record/replay of provider streams as JSONL
    failures, pump      retry hints for HTTP failures; the worker thread that makes streams cancellable
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from piw.errors import ProviderError

ALLOW_MODEL_REQUESTS = True
"""When ``False`` (the test suite sets it), adapters refuse every base URL that is not loopback."""


def is_loopback_url(url: str) -> bool:
    """True when the URL's host is ``localhost``, ``::1`` or inside ``127.0.0.0/8``."""
    host = (urlsplit(url).hostname or "").rstrip(".").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def guard_base_url(url: str) -> None:
    """Refuse, before any I/O, a non-loopback URL while model requests are disallowed.

    Adapters call this before building a client, so a test can never reach a real model even by mistake:
    the check needs no DNS lookup and no socket.
    """
    if not ALLOW_MODEL_REQUESTS and not is_loopback_url(url):
        raise ProviderError(
            "Model requests are disabled here (piw.providers.ALLOW_MODEL_REQUESTS is False); "
            f"refusing non-loopback base URL {url!r}. "
            "Point the provider at 127.0.0.1 or use the scripted provider."
        )
