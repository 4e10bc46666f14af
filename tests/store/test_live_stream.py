"""The stream side file (``docs/bundle-format.md`` §8.1): bounded by rotation, read across a rotation, released."""

from __future__ import annotations

import os
from pathlib import Path

from piw.store.live_stream import (
    ROTATED_FILE,
    STREAM_FILE,
    StreamFile,
    StreamReader,
    release_stream_file,
    stream_file,
)

ATTEMPT = "a" * 32


def _record(kind: str, **extra: str) -> dict[str, str]:
    return {"attemptId": ATTEMPT, "nodeId": "say", "kind": kind, **extra}


def test_a_long_reply_rotates_and_a_reader_keeps_the_text(tmp_path: Path) -> None:
    stream = StreamFile(tmp_path, max_bytes=4096)
    reader = StreamReader(tmp_path)
    stream.write(_record("start"))
    sent = ""
    for number in range(400):
        piece = f"w{number:03d} "
        sent += piece
        stream.write(_record("text", text=piece))
        if number % 50 == 0:
            reader.poll()  # a watcher polling now and then, across rotations
    reader.poll()
    assert (tmp_path / ROTATED_FILE).exists()
    assert (tmp_path / STREAM_FILE).stat().st_size <= 4096 + 200
    reply = reader.reply_of(ATTEMPT)
    assert reply is not None and not reply.ended
    assert sent.endswith(reply.text) and reply.text.endswith("w399 ")
    assert oct((tmp_path / STREAM_FILE).stat().st_mode & 0o777) == "0o600"

    late = StreamReader(tmp_path)  # one that starts after the rotations reads the snapshot, then the rest
    late.poll()
    late_reply = late.reply_of(ATTEMPT)
    assert late_reply is not None and late_reply.text.endswith("w399 ") and sent.endswith(late_reply.text)
    stream.write(_record("tool", tool="search"))
    late.poll()
    calling = late.reply_of(ATTEMPT)  # (a new object when a write rotated the file again)
    assert calling is not None and calling.tools == ["search"] and not calling.ended
    stream.write(_record("end"))
    late.poll()
    ended = late.reply_of(ATTEMPT)
    assert ended is not None and ended.ended and ended.text.endswith("w399 ")
    stream.close()


def test_the_last_attempt_closes_the_file(tmp_path: Path) -> None:
    first, second = stream_file(tmp_path), stream_file(tmp_path)
    assert first is second
    first.write(_record("start"))
    descriptors = len(os.listdir("/proc/self/fd"))
    release_stream_file(tmp_path)
    assert len(os.listdir("/proc/self/fd")) == descriptors  # still in use by the second attempt
    release_stream_file(tmp_path)
    assert len(os.listdir("/proc/self/fd")) == descriptors - 1
    assert stream_file(tmp_path) is not first  # a new attempt opens it again
    release_stream_file(tmp_path)


def test_a_torn_or_foreign_line_is_skipped(tmp_path: Path) -> None:
    (tmp_path / STREAM_FILE).write_bytes(
        b'not json\n{"kind": "text"}\n{"attemptId": "x", "kind": "start"}\n{"att'
    )
    reader = StreamReader(tmp_path)
    assert reader.poll()
    assert set(reader.replies) == {"x"}
