"""How adapters describe HTTP and network failures, so the agent loop can decide whether to retry.

The rule (``docs/design/agent-steps.md`` §4): HTTP 429 and 5xx, refused or reset connections, and connect or read
timeouts are transient; everything else (400, 401, 404, a context overflow…) fails at once. Retrying is the
loop's decision; adapters only classify, with the server's ``Retry-After`` when it sent one.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from email.utils import parsedate_to_datetime
from urllib.parse import urlsplit, urlunsplit

from piw.providers import is_loopback_url


def is_transient_status(status: int) -> bool:
    """429 (rate limited) and every 5xx are worth retrying; other statuses will fail the same way again."""
    return status == 429 or 500 <= status <= 599


def parse_retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds to wait from ``retry-after-ms`` or ``Retry-After`` (seconds or an HTTP date), else ``None``."""
    lowered = {key.lower(): value for key, value in headers.items()}
    raw_ms = lowered.get("retry-after-ms")
    if raw_ms is not None:
        try:
            return max(0.0, float(raw_ms) / 1000.0)
        except ValueError:
            pass
    raw = lowered.get("retry-after")
    if raw is None:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def unfinished_stream(reason: str | None) -> str:
    """Why a stream that ended without a known finish reason is no reply (``docs/design/agent-steps.md`` §4,
    end of stream).

    A dropped connection or a proxy cutting the body looks like a clean end of iteration to the SDK; only the
    missing finish reason tells it apart from a finished reply, so it is a transient failure, never output.
    """
    if reason is None:
        return "The stream ended without a finish reason (the response was cut off)."
    shown = " ".join(reason.split())[:80]
    return f"The stream ended with an unknown finish reason {shown!r}."


def status_message(status: int, detail: str | None) -> str:
    """``HTTP 503: detail`` — short, and never the request body (which may quote the conversation)."""
    detail = " ".join((detail or "").split())
    if len(detail) > 500:
        detail = detail[:500] + "…"
    return f"HTTP {status}: {detail}" if detail else f"HTTP {status}"


def shown_url(url: str) -> str:
    """A base URL fit for an error line: credentials in it become ``***`` (the host and path stay)."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    netloc = f"{parts.hostname or ''}:{parts.port}" if parts.port else parts.hostname or ""
    return urlunsplit((parts.scheme, f"***@{netloc}", parts.path, parts.query, parts.fragment))


def failed_to_connect(error: BaseException) -> bool:
    """Whether ``error`` (or what it wraps) is a connection that was never made: refused, or timed out connecting.

    Walks the ``__cause__``/``__context__`` chain, so it reads the same through the ``openai`` and ``anthropic`` SDKs
    and their HTTP layers (``ConnectTimeout`` is the httpx and httpcore name of a connect timeout).
    """
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ConnectionRefusedError) or type(current).__name__ == "ConnectTimeout":
            return True
        current = current.__cause__ or current.__context__
    return False


def final_on_loopback(base_url: str, error: BaseException) -> bool:
    """A loopback provider that could not be connected to is not retried (issue 26; ``docs/providers.md``).

    On this machine the kernel answers a connect at once: a refused port or a listener accepting nothing will not
    be different 2, 4 or 8 seconds later, and the retries only made a stopped local server take 14 s to report.
    """
    return is_loopback_url(base_url) and failed_to_connect(error)


def connection_message(
    provider: str, base_url: str, cause: str, *, mid_reply: bool = False, final: bool = False
) -> str:
    """A refused or dropped connection, with the provider, its URL and what to check (not just ``Errno 111``).

    ``mid_reply``: the server was reached and had started replying when the connection dropped, so "cannot reach"
    would send the user to check a server that is plainly running. ``final``: a loopback connection that was
    never made, which is not retried (:func:`final_on_loopback`); the message says so.
    """
    if mid_reply:
        return (
            f"Connection error: provider {provider!r} at {shown_url(base_url)} dropped the connection in the middle "
            f"of its reply ({cause}). The partial reply was not used. The server was reachable: check its log (it "
            "may have crashed or hit a limit) and any proxy's timeout."
        )
    message = (
        f"Connection error: cannot reach provider {provider!r} at {shown_url(base_url)} ({cause}). "
        "Check that the server is running and reachable there, and the provider's base_url in config.toml "
        "(see 'piw providers --check')."
    )
    if final:
        message += " Not retried: nothing on this machine accepted the connection."
    return message
