"""A small HTTP/1.1 client over one plain socket, for the lean ``openai-completions`` path (``docs/providers.md``).

It does what one streamed chat-completions request to a plain-HTTP server needs and nothing more: one request on a
fresh connection (the SDK path opened a fresh client per request too), a response head, and a body read as it comes
(``Content-Length``, ``chunked`` or until close; ``gzip``/``deflate`` undone). No TLS, no proxy, no redirect: the
caller only uses it where none of those applies, and hands a redirect to the SDK (:mod:`piw.providers.openai_lean`).

Its failures are the ones the adapter classifies (``piw.providers.failures``): a connection never made
(:class:`ConnectTimeout`, ``ConnectionRefusedError``), a read that timed out (``TimeoutError``), a connection that
dropped (``OSError``) or a body cut short (:class:`IncompleteBody`, worded as httpx words it).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import zlib
from collections.abc import Iterator

MAX_HEAD_BYTES = 256 * 1024
"""A response head larger than this is not an HTTP server answering a chat request."""
READ_SIZE = 65536


class ConnectTimeout(TimeoutError):
    """The TCP connect did not complete in time. The name is what ``failed_to_connect`` looks for."""


class IncompleteBody(Exception):
    """The peer closed the connection before the body it announced was complete."""


class BadResponse(Exception):
    """What came back is not an HTTP/1.x response head."""


class Response:
    """A response head and its body, read from the socket on demand."""

    def __init__(
        self, connection: Connection, status: int, headers: list[tuple[str, str]], rest: bytes
    ) -> None:
        self._connection = connection
        self.status = status
        self.header_list = headers
        self.headers = {name.lower(): value for name, value in headers}
        """Lower-cased names; a repeated header keeps its last value (only single-valued ones are read)."""
        self._rest = rest

    def iter_bytes(self) -> Iterator[bytes]:
        """The body as it arrives, de-chunked and decompressed."""
        decoder = _decoder(self.headers.get("content-encoding", ""))
        for raw in self._raw_body():
            data = decoder.decompress(raw) if decoder else raw
            if data:
                yield data
        if decoder:
            tail = decoder.flush()
            if tail:
                yield tail

    def read(self) -> bytes:
        return b"".join(self.iter_bytes())

    def _raw_body(self) -> Iterator[bytes]:
        if self.status in (204, 304) or 100 <= self.status < 200:
            return
        if "chunked" in self.headers.get("transfer-encoding", "").lower():
            yield from self._chunked()
            return
        length = self.headers.get("content-length")
        if length is not None and length.strip().isdigit():
            yield from self._sized(int(length))
            return
        if self._rest:
            yield self._rest
        while data := self._connection.recv():
            yield data

    def _sized(self, length: int) -> Iterator[bytes]:
        received, buffer = 0, self._rest
        while received < length:
            if not buffer:
                buffer = self._connection.recv()
                if not buffer:
                    raise IncompleteBody(
                        "peer closed connection without sending complete message body "
                        f"(received {received} bytes, expected {length})"
                    )
            piece = buffer[: length - received]
            buffer = buffer[len(piece) :]
            received += len(piece)
            yield piece

    def _chunked(self) -> Iterator[bytes]:
        reader = _Reader(self._connection, self._rest)
        while True:
            line = reader.line()
            size_text = line.split(b";", 1)[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError as exc:
                raise BadResponse(f"invalid chunk size {size_text[:20]!r}") from exc
            if size == 0:
                while reader.line():  # trailers, up to the blank line
                    pass
                return
            yield reader.exactly(size)
            reader.line()


class _Reader:
    """Lines and exact counts from the socket, for the chunked framing."""

    def __init__(self, connection: Connection, rest: bytes) -> None:
        self._connection = connection
        self._buffer = bytearray(rest)

    def _more(self) -> None:
        data = self._connection.recv()
        if not data:
            raise IncompleteBody(
                "peer closed connection without sending complete message body (incomplete chunked read)"
            )
        self._buffer += data

    def line(self) -> bytes:
        while (end := self._buffer.find(b"\n")) < 0:
            if len(self._buffer) > MAX_HEAD_BYTES:
                raise BadResponse("a chunk-size line is too long")
            self._more()
        line = bytes(self._buffer[:end]).rstrip(b"\r")
        del self._buffer[: end + 1]
        return line

    def exactly(self, size: int) -> bytes:
        while len(self._buffer) < size:
            self._more()
        data = bytes(self._buffer[:size])
        del self._buffer[:size]
        return data


def _decoder(encoding: str) -> zlib._Decompress | None:
    encoding = encoding.strip().lower()
    if encoding in ("gzip", "x-gzip"):
        return zlib.decompressobj(zlib.MAX_WBITS | 16)
    if encoding == "deflate":
        return zlib.decompressobj(zlib.MAX_WBITS | 32)  # zlib-wrapped, as servers send it
    return None


class Connection:
    """One TCP connection; :meth:`abort` (from another thread) shuts it down and wakes a blocked read."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._aborted = False

    def open(self, host: str, port: int, connect_timeout: float, read_timeout: float) -> None:
        try:
            sock = socket.create_connection((host, port), timeout=connect_timeout)
        except TimeoutError as exc:
            raise ConnectTimeout("timed out") from exc
        sock.settimeout(read_timeout)
        with self._lock:
            self._sock = sock
            aborted = self._aborted
        if aborted:  # the abort came while the connection was being made
            _shutdown(sock)

    def send(self, data: bytes) -> None:
        self._socket().sendall(data)

    def recv(self) -> bytes:
        return self._socket().recv(READ_SIZE)

    def response(self) -> Response:
        """Read the next final response head (``1xx`` interim answers are skipped)."""
        buffer = b""
        while True:
            end = buffer.find(b"\r\n\r\n")
            if end >= 0:
                head, buffer = buffer[:end], buffer[end + 4 :]
                status, headers = _parse_head(head)
                if 100 <= status < 200 and status != 101:
                    continue
                return Response(self, status, headers, buffer)
            if len(buffer) > MAX_HEAD_BYTES:
                raise BadResponse("the response head is too large")
            data = self.recv()
            if not data:
                raise IncompleteBody("Server disconnected without sending a response.")
            buffer += data

    def abort(self) -> None:
        with self._lock:
            self._aborted = True
            sock = self._sock
        if sock is not None:
            _shutdown(sock)

    def close(self) -> None:
        with self._lock:
            sock, self._sock = self._sock, None
        if sock is not None:
            sock.close()

    def _socket(self) -> socket.socket:
        sock = self._sock
        if sock is None:
            raise ConnectionAbortedError("the connection is closed")
        return sock


def _parse_head(head: bytes) -> tuple[int, list[tuple[str, str]]]:
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise BadResponse(f"not an HTTP response: {lines[0][:60]!r}")
    headers: list[tuple[str, str]] = []
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if colon:
            headers.append((name.strip(), value.strip()))
    return int(parts[1]), headers


def _shutdown(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
