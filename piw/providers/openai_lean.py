"""The lean transport of the ``openai-completions`` adapter: the SDK's request, sent without importing the SDK.

``import openai`` costs about a second of CPU on a cold start (its pydantic models), which was most of the time
from ``piw run`` to the first model request. For a plain-HTTP server (Ollama, vLLM, llama.cpp, LM Studio on this
machine or the LAN) this module sends the very request the SDK sends, with the SDK's headers, over
:mod:`piw.providers.http_lite`, and reads the stream with the SDK's server-sent-events rules; the figures and the
rule of when it applies are in ``docs/providers.md`` (first model request). Everything the lean path does not
reproduce stays with the SDK: HTTPS (TLS settings), proxies from the environment, ``OPENAI_CUSTOM_HEADERS``, URLs
with credentials or a query, an injected ``httpx2.Client``, and redirects (a ``3xx`` answer is handed to the SDK,
which follows it).

Failures are raised as the exceptions below, which ``openai_compat._failure`` words exactly as it words the SDK's.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit

from piw.providers.http_lite import BadResponse, Connection, IncompleteBody, Response

SDK_VERSION_FALLBACK = "unknown"
PROXY_VARIABLES = ("http_proxy", "all_proxy")
"""What httpx reads for a plain-HTTP URL (any case); when one is set, the SDK sends the request (through it)."""


@dataclass(frozen=True)
class Timeouts:
    """Seconds for the TCP connect and for each read (and write) after it, as ``httpx2.Timeout`` has them."""

    read: float
    connect: float


class Call(Protocol):
    def produce(self, emit: Callable[[Any], None]) -> None: ...

    def abort(self) -> None: ...


# --- errors, worded by openai_compat._failure like the SDK's ----------------------------------------------


class LeanStatusError(Exception):
    """A non-2xx answer; ``detail`` is what the SDK's ``APIStatusError`` would give ``_detail``."""

    def __init__(self, status: int, headers: Mapping[str, str], text: str) -> None:
        super().__init__(f"Error code: {status}")
        self.status_code = status
        self.headers = dict(headers)
        self.detail = status_detail(status, text)


class LeanConnectionError(Exception):
    """A connection refused, reset or cut; its ``__cause__`` says how (as the SDK's ``APIConnectionError``)."""

    def __init__(self) -> None:
        super().__init__("Connection error.")


class LeanTimeout(LeanConnectionError):
    """A connect or read timed out (as the SDK's ``APITimeoutError``, a kind of connection error)."""

    def __init__(self) -> None:
        Exception.__init__(self, "Request timed out.")


class LeanAPIError(Exception):
    """An ``error`` object inside the event stream (the SDK's ``APIError``)."""


def status_detail(status: int, text: str) -> str:
    """The SDK's error wording for a status answer, as ``openai_compat._detail`` reads it from ``APIStatusError``."""
    text = text.strip()
    message = f"Error code: {status}"
    try:
        body: Any = json.loads(text)
    except ValueError:
        return message
    error = body.get("error", body) if isinstance(body, dict) else None
    first = error.get("message") if isinstance(error, dict) else None
    if isinstance(first, str) and first:
        message += f" - {first}"
    data = body.get("error", body) if isinstance(body, dict) else body
    if isinstance(data, dict):  # openai_compat._detail unwraps once more
        inner = data.get("error", data)
        found = inner.get("message") if isinstance(inner, dict) else inner
        if isinstance(found, str) and found:
            return found
    return message


# --- when the lean path applies, and the request it sends --------------------------------------------------


def applies(base_url: str, environ: Mapping[str, str] | None = None) -> bool:
    """Whether the lean path sends this request exactly as the SDK would (else the SDK sends it)."""
    environ = os.environ if environ is None else environ
    parts = urlsplit(base_url)
    if parts.scheme != "http" or parts.query or parts.fragment or parts.username or parts.password:
        return False
    if not parts.hostname or not parts.path.isascii() or any(ch in parts.path for ch in " %\t"):
        return False
    try:
        parts.port  # noqa: B018 - raises on a malformed port
    except ValueError:
        return False
    if "OPENAI_CUSTOM_HEADERS" in environ:
        return False
    return not any(name.lower() in PROXY_VARIABLES and value for name, value in environ.items())


def sdk_version() -> str:
    """The installed ``openai`` version, read from its ``_version.py`` without importing the package."""
    from importlib.util import find_spec

    try:
        spec = find_spec("openai")
    except (ImportError, ValueError):
        return SDK_VERSION_FALLBACK
    if spec is None or not spec.submodule_search_locations:
        return SDK_VERSION_FALLBACK
    for folder in spec.submodule_search_locations:
        try:
            with open(os.path.join(folder, "_version.py"), encoding="utf-8") as source:
                for line in source:
                    if line.startswith("__version__"):
                        return line.split("=", 1)[1].split("#", 1)[0].strip().strip("\"'")
        except OSError:
            continue
    return SDK_VERSION_FALLBACK


_PLATFORM: dict[str, str] = {}


def platform_headers() -> dict[str, str]:
    """The SDK's ``X-Stainless-*`` platform headers (its ``platform_headers``), without ``platform.platform()``."""
    if not _PLATFORM:
        import platform

        uname = os.uname() if hasattr(os, "uname") else None
        system = (uname.sysname if uname else platform.system()).lower()
        described = " ".join(uname).lower() if uname else ""
        machine = (uname.machine if uname else platform.machine()).lower()
        version = sdk_version()
        _PLATFORM.update(
            {
                "X-Stainless-Lang": "python",
                "X-Stainless-Package-Version": version,
                "X-Stainless-OS": _os_name(system, described),
                "X-Stainless-Arch": _arch(machine),
                "X-Stainless-Runtime": platform.python_implementation(),
                "X-Stainless-Runtime-Version": platform.python_version(),
            }
        )
        _PLATFORM["User-Agent"] = f"OpenAI/Python {version}"
    return dict(_PLATFORM)


def _os_name(system: str, described: str) -> str:
    if "iphone" in described or "ipad" in described:
        return "iOS"
    names = {"darwin": "MacOS", "windows": "Windows", "freebsd": "FreeBSD", "openbsd": "OpenBSD"}
    if system in names:
        return names[system]
    if "android" in described:
        return "Android"
    if system == "linux":
        import platform

        try:
            distro = platform.freedesktop_os_release().get("ID", "").lower()
        except OSError:
            distro = ""
        return {"freebsd": "FreeBSD", "openbsd": "OpenBSD"}.get(distro, "Linux")
    return f"Other:{system}" if system else "Unknown"


def _arch(machine: str) -> str:
    if machine in ("arm64", "aarch64"):
        return "arm64"
    if machine == "arm":
        return "arm"
    if machine == "x86_64":
        return "x64"
    if sys.maxsize <= 2**32:
        return "x32"
    return f"other:{machine}" if machine else "unknown"


def request_headers(
    key: str, configured: Mapping[str, str], read_timeout: float, environ: Mapping[str, str] | None = None
) -> list[tuple[str, str]]:
    """The headers the SDK's ``OpenAI`` client sends, merged as it merges them (case-insensitive, later wins)."""
    environ = os.environ if environ is None else environ
    platform = platform_headers()
    merged: dict[str, tuple[str, str]] = {}

    def put(name: str, value: str | None) -> None:
        if value is None:
            merged.pop(name.lower(), None)
        else:
            merged[name.lower()] = (name, value)

    if key:
        put("Authorization", f"Bearer {key}")
    put("Accept", "application/json")
    put("Content-Type", "application/json")
    put("User-Agent", platform.pop("User-Agent"))
    for name, value in platform.items():
        put(name, value)
    put("X-Stainless-Async", "false")
    put("OpenAI-Organization", environ.get("OPENAI_ORG_ID"))
    put("OpenAI-Project", environ.get("OPENAI_PROJECT_ID"))
    for name, value in configured.items():
        put(name, value)
    if not key and not any(name.lower() == "authorization" for name in configured):
        put("Authorization", None)  # no key: no Authorization header at all (openai_compat._auth_override)
    lowered = {name.lower() for name in configured}
    headers = list(merged.values())
    if "x-stainless-retry-count" not in lowered:
        headers = [h for h in headers if h[0].lower() != "x-stainless-retry-count"] + [
            ("x-stainless-retry-count", "0")
        ]
    if "x-stainless-read-timeout" not in lowered:
        headers = [h for h in headers if h[0].lower() != "x-stainless-read-timeout"]
        headers.append(("x-stainless-read-timeout", str(float(read_timeout))))
    return headers


# --- the call ----------------------------------------------------------------------------------------------


class LeanCall:
    """One streamed ``POST {base_url}/chat/completions``; emits each event's JSON object, as the SDK's stream does."""

    def __init__(
        self,
        base_url: str,
        headers: list[tuple[str, str]],
        body: dict[str, Any],
        timeouts: Timeouts,
        on_redirect: Callable[[], Call],
    ) -> None:
        parts = urlsplit(base_url)
        self._host = parts.hostname or ""
        self._port = parts.port or 80
        self._path = (parts.path.rstrip("/") or "") + "/chat/completions"
        host = f"[{self._host}]" if ":" in self._host else self._host
        self._authority = host if parts.port in (None, 80) else f"{host}:{parts.port}"
        self._headers = headers
        self._body = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        self._timeouts = timeouts
        self._on_redirect = on_redirect
        self._connection = Connection()
        self._delegate: Call | None = None
        self._aborted = False

    def produce(self, emit: Callable[[Any], None]) -> None:
        try:
            response = self._send()
            if 300 <= response.status < 400 and "location" in response.headers:
                self._connection.close()
                self._redirect(emit)
                return
            if response.status >= 400:
                text = _read(response).decode("utf-8", errors="replace")
                raise LeanStatusError(response.status, response.headers, text)
            kind = response.headers.get("content-type", "")
            if "text/event-stream" not in kind.lower():
                from piw.providers.openai_compat import NotAStream

                raise NotAStream(kind)
            for data in _events(response):
                emit(data)
        finally:
            self._connection.close()

    def abort(self) -> None:
        self._aborted = True
        self._connection.abort()
        if self._delegate is not None:
            self._delegate.abort()

    def _send(self) -> Response:
        connection, timeouts = self._connection, self._timeouts
        try:
            connection.open(self._host, self._port, timeouts.connect, timeouts.read)
        except TimeoutError as exc:
            raise LeanTimeout from exc
        except OSError as exc:
            raise LeanConnectionError from exc
        head = [
            f"POST {self._path} HTTP/1.1",
            f"Host: {self._authority}",
            "Accept-Encoding: gzip, deflate",
            "Connection: keep-alive",
            *(f"{name}: {value}" for name, value in self._headers),
            f"Content-Length: {len(self._body)}",
        ]
        try:
            connection.send(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + self._body)
            return connection.response()
        except (TimeoutError, OSError, IncompleteBody, BadResponse) as exc:
            raise _transport_error(exc) from exc

    def _redirect(self, emit: Callable[[Any], None]) -> None:
        """The SDK follows redirects (``follow_redirects=True``); so it sends this request again and follows it."""
        self._delegate = self._on_redirect()
        if self._aborted:
            return
        self._delegate.produce(emit)


def _transport_error(exc: BaseException) -> Exception:
    return LeanTimeout() if isinstance(exc, TimeoutError) else LeanConnectionError()


def _read(response: Response) -> bytes:
    try:
        return response.read()
    except (TimeoutError, OSError, IncompleteBody, BadResponse, ValueError) as exc:
        raise _transport_error(exc) from exc


def _events(response: Response) -> Iterator[Any]:
    """Each event's JSON, until ``[DONE]`` or the end of the body (the SDK's ``Stream.__stream__``)."""
    for data in _sse_data(_body(response)):
        if data.startswith("[DONE]"):
            return
        value = json.loads(data)
        if isinstance(value, dict) and value.get("error"):
            error = value["error"]
            message = error.get("message") if isinstance(error, dict) else None
            if not message or not isinstance(message, str):
                message = "An error occurred during streaming"
            raise LeanAPIError(message)
        yield value


def _body(response: Response) -> Iterator[bytes]:
    chunks = response.iter_bytes()
    while True:
        try:
            chunk = next(chunks)
        except StopIteration:
            return
        except (TimeoutError, OSError, IncompleteBody, BadResponse) as exc:
            raise _transport_error(exc) from exc
        yield chunk


_LINE_END = re.compile(b"[\\r\\n]")


def _lines(chunks: Iterator[bytes]) -> Iterator[bytes]:
    """Lines split at CR, LF or CRLF, as the SDK's ``_SSELineDecoder`` splits them (a CRLF may straddle chunks)."""
    buffer = bytearray()
    skip_lf = False
    for chunk in chunks:
        start = 0
        for match in _LINE_END.finditer(chunk):
            end = match.start()
            if skip_lf and end == start and chunk[end] == 10:
                skip_lf = False
                start = end + 1
                continue
            skip_lf = False
            buffer += chunk[start:end]
            yield bytes(buffer)
            buffer.clear()
            skip_lf = chunk[end] == 13
            start = end + 1
        if start < len(chunk):
            skip_lf = False
            buffer += chunk[start:]
    if buffer:
        yield bytes(buffer)


def _sse_data(chunks: Iterator[bytes]) -> Iterator[str]:
    """The ``data`` of each dispatched server-sent event (the SDK's ``SSEDecoder.decode``, fields it ignores aside)."""
    data: list[str] = []
    event: str | None = None
    last_id: str | None = None
    retry: int | None = None
    for raw in _lines(chunks):
        line = raw.decode("utf-8")
        if not line:
            if event or data or last_id or retry is not None:
                yield "\n".join(data)
            data, event, retry = [], None, None
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "event":
            event = value
        elif name == "data":
            data.append(value)
        elif name == "id":
            if "\0" not in value:
                last_id = value
        elif name == "retry":
            with contextlib.suppress(TypeError, ValueError):
                retry = int(value)
