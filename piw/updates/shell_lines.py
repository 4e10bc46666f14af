"""Byte-level line framing and capped text capture for shell output (``docs/design/updates-progress.md`` §3.3).

Pure: the shell executor owns the process, the reader threads and the parser; this module only turns the
bytes ``os.read`` returns into lines and bounded text. Framing works on bytes, so a multi-byte character split
across two reads stays whole and the lines never depend on where the pipe happened to cut the stream.
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass
from typing import Literal

from piw.errors import ShellLineTooLong
from piw.updates.envelope import MAX_SHELL_UPDATE_LINE_BYTES

__all__ = ["MAX_CAPTURED_CHARS", "CappedText", "LineFramer", "ShellLine", "Stream"]

Stream = Literal["stdout", "stderr"]
MAX_CAPTURED_CHARS = 1_000_000


@dataclass(frozen=True)
class ShellLine:
    """One framed line for the update parser; ``invalid_utf8`` says the text holds replacement characters."""

    stream: Stream
    text: str
    invalid_utf8: bool


def _decode(stream: Stream, raw: bytes) -> ShellLine:
    try:
        return ShellLine(stream, raw.decode("utf-8"), False)
    except UnicodeDecodeError:
        return ShellLine(stream, raw.decode("utf-8", errors="replace"), True)


def _strip_cr(raw: bytes) -> bytes:
    return raw[:-1] if raw.endswith(b"\r") else raw


class LineFramer:
    """Frames one stream: ``\\n`` ends a line, one trailing ``\\r`` is dropped, empty lines are kept.

    The limit counts the line without its terminator; a pending buffer may therefore hold ``limit + 1`` bytes
    when the last one is ``\\r`` (the start of a ``\\r\\n`` split across reads). A framer that raised or was
    closed takes no more input.
    """

    def __init__(self, stream: Stream, max_line_bytes: int = MAX_SHELL_UPDATE_LINE_BYTES) -> None:
        self.stream: Stream = stream
        self.max_line_bytes = max_line_bytes
        self._buffer = bytearray()
        self._done = False

    def feed(self, chunk: bytes) -> list[ShellLine]:
        """The complete lines this chunk finishes, in order."""
        self._require_open()
        scan_from = len(self._buffer)  # the buffer held no newline before this chunk
        self._buffer += chunk
        lines: list[ShellLine] = []
        start = 0
        while (end := self._buffer.find(b"\n", max(start, scan_from))) >= 0:
            raw = _strip_cr(bytes(self._buffer[start:end]))
            if len(raw) > self.max_line_bytes:
                self._fail(lines)
            lines.append(_decode(self.stream, raw))
            start = end + 1
        del self._buffer[:start]
        if len(self._buffer) - self._buffer.endswith(b"\r") > self.max_line_bytes:
            self._fail(lines)
        return lines

    def close(self) -> list[ShellLine]:
        """At EOF: the non-empty remainder as the final line (``[]`` when the stream ended with ``\\n``)."""
        self._require_open()
        self._done = True
        if not self._buffer:
            return []
        return [_decode(self.stream, _strip_cr(bytes(self._buffer)))]

    def _require_open(self) -> None:
        if self._done:
            raise ValueError(f"the {self.stream} line framer is closed")

    def _fail(self, lines: list[ShellLine]) -> None:
        self._done = True
        self._buffer.clear()
        raise ShellLineTooLong(self.stream, self.max_line_bytes, tuple(lines))


class CappedText:
    """Captured ``stdout``/``stderr`` for the action result: incremental UTF-8 with replacement, capped.

    The first ``max_chars`` characters are kept and the rest only counted, so memory stays bounded however
    much a command prints; ``finish`` appends ``\\n…[truncated N chars]`` naming how much was dropped.
    """

    def __init__(self, max_chars: int = MAX_CAPTURED_CHARS) -> None:
        self.max_chars = max_chars
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._parts: list[str] = []
        self._kept = 0
        self.truncated_chars = 0

    def feed(self, chunk: bytes) -> None:
        self._add(self._decoder.decode(chunk))

    def finish(self) -> str:
        """Flush the decoder (a cut-off character becomes U+FFFD) and return the text with any marker."""
        self._add(self._decoder.decode(b"", final=True))
        text = "".join(self._parts)
        if self.truncated_chars:
            return f"{text}\n…[truncated {self.truncated_chars} chars]"
        return text

    def _add(self, text: str) -> None:
        room = self.max_chars - self._kept
        if len(text) > room:
            self.truncated_chars += len(text) - room
            text = text[:room]
        if text:
            self._parts.append(text)
            self._kept += len(text)
