"""Shell line framing and capped capture (``updates-progress.md`` §3.3, acceptance items 17–19)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from piw.errors import NodeFailure, ShellLineTooLong
from piw.updates.envelope import validate_update
from piw.updates.shell_lines import CappedText, LineFramer, ShellLine, Stream

LIMIT = 65_536


def frame(chunks: list[bytes], stream: Stream = "stdout", limit: int = LIMIT) -> list[ShellLine]:
    framer = LineFramer(stream, limit)
    lines = [line for chunk in chunks for line in framer.feed(chunk)]
    return lines + framer.close()


def texts(lines: list[ShellLine]) -> list[str]:
    return [line.text for line in lines]


SAMPLE = "a1\r\n\n€uro ✓\r\nsplit 🎉 here\n\r\nlast €".encode()


def test_crlf_empty_lines_and_final_unterminated_line() -> None:
    lines = frame([SAMPLE])
    assert texts(lines) == ["a1", "", "€uro ✓", "split 🎉 here", "", "last €"]
    assert all(line.stream == "stdout" and not line.invalid_utf8 for line in lines)


def test_only_one_trailing_cr_is_dropped() -> None:
    assert texts(frame([b"x\r\r\n", b"\ry\r"])) == ["x\r", "\ry"]


def test_stream_end_cases() -> None:
    assert frame([]) == []
    assert frame([b""]) == []
    assert texts(frame([b"done\n"])) == ["done"]
    assert texts(frame([b"\r"])) == [""]  # a non-empty remainder is a line, even once its \r is dropped


def test_every_single_split_offset_gives_the_same_lines() -> None:
    whole = frame([SAMPLE])
    for offset in range(len(SAMPLE) + 1):
        assert frame([SAMPLE[:offset], SAMPLE[offset:]]) == whole, offset


def test_byte_at_a_time() -> None:
    assert frame([bytes([b]) for b in SAMPLE]) == frame([SAMPLE])


@settings(deadline=None)
@given(
    data=st.lists(
        st.one_of(
            st.sampled_from([b"\n", b"\r", b"\r\n", "€".encode(), "🎉".encode(), b"\xff", b"\xe2\x82"]),
            st.binary(max_size=8),
        ),
        max_size=40,
    ).map(b"".join),
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=12),
)
def test_any_chunking_gives_the_same_lines(data: bytes, cuts: list[int]) -> None:
    points = sorted({min(cut, len(data)) for cut in cuts})
    chunks = [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]
    assert frame(chunks) == frame([data])
    assert outcome(chunks, limit=4) == outcome([data], limit=4)


def outcome(chunks: list[bytes], limit: int) -> tuple[list[ShellLine], bool]:
    """Every line a consumer sees and whether the framer failed; neither may depend on chunking."""
    framer, seen = LineFramer("stdout", limit), list[ShellLine]()
    try:
        for chunk in chunks:
            seen += framer.feed(chunk)
        return seen + framer.close(), False
    except ShellLineTooLong as exc:
        return seen + list(exc.lines), True


def test_invalid_utf8_is_replaced_flagged_and_still_delivered() -> None:
    lines = frame([b"ok\nbad \xff\xfe end\ncut \xe2\x82\n"], stream="stderr")
    assert lines == [
        ShellLine("stderr", "ok", False),
        ShellLine("stderr", "bad \ufffd\ufffd end", True),
        ShellLine("stderr", "cut \ufffd", True),
    ]


def test_line_limit_is_65536_bytes_without_terminator() -> None:
    exact = b"x" * LIMIT
    assert texts(frame([exact + b"\n"])) == ["x" * LIMIT]
    assert texts(frame([exact + b"\r\n"])) == ["x" * LIMIT]
    assert texts(frame([exact])) == ["x" * LIMIT]
    assert texts(frame([exact + b"\r", b"\n"])) == ["x" * LIMIT]  # a CRLF split across reads
    with pytest.raises(ShellLineTooLong) as caught:
        frame([b"first\n" + exact + b"x\nnext\n"])
    assert str(caught.value) == "shell stdout update line exceeded 65536 bytes"
    assert caught.value.lines == (ShellLine("stdout", "first", False),)


def test_unterminated_oversized_buffer_fails_before_any_newline() -> None:
    framer = LineFramer("stderr")
    assert framer.feed(b"y" * LIMIT) == []
    with pytest.raises(ShellLineTooLong, match=r"^shell stderr update line exceeded 65536 bytes$"):
        framer.feed(b"y")
    with pytest.raises(ValueError, match="closed"):
        framer.feed(b"\n")


def test_too_long_is_a_node_failure_with_multibyte_counted_in_bytes() -> None:
    assert issubclass(ShellLineTooLong, NodeFailure)
    assert texts(frame(["€".encode() * 3 + b"\n"], limit=9)) == ["€€€"]
    with pytest.raises(ShellLineTooLong, match="exceeded 8 bytes"):
        frame(["€".encode() * 3 + b"\n"], limit=8)


def test_closed_framer_takes_no_more_input() -> None:
    framer = LineFramer("stdout")
    framer.close()
    with pytest.raises(ValueError):
        framer.close()


def test_a_parser_result_goes_through_update_validation() -> None:
    (line,) = frame([b'{"done": 3}\n'])
    assert validate_update({"type": "job", "key": "j1", "data": {"text": line.text}}).data == {
        "text": '{"done": 3}'
    }


# ------------------------------------------------------------------------------------------- captured output


def test_capped_text_keeps_short_output_whole() -> None:
    capture = CappedText()
    for chunk in ("héllo ", "wörld"):
        capture.feed(chunk.encode())
    assert capture.finish() == "héllo wörld"


def test_capped_text_decodes_characters_split_across_reads() -> None:
    capture = CappedText()
    encoded = "🎉€".encode()
    for byte in encoded:
        capture.feed(bytes([byte]))
    assert capture.finish() == "🎉€"


def test_capped_text_replaces_invalid_and_cut_off_bytes() -> None:
    capture = CappedText()
    capture.feed(b"a\xffb\xe2\x82")
    assert capture.finish() == "a\ufffdb\ufffd"


def test_capped_text_truncates_at_max_chars_with_a_marker() -> None:
    capture = CappedText(max_chars=5)
    capture.feed("ab€".encode())
    capture.feed(b"defgh")
    capture.feed(b"ij")
    assert capture.finish() == "ab€de\n…[truncated 5 chars]"
    assert capture.truncated_chars == 5


def test_capped_text_default_cap_is_one_million_characters() -> None:
    capture = CappedText()
    capture.feed(b"z" * 1_000_000)
    assert capture.finish() == "z" * 1_000_000
    capture = CappedText()
    capture.feed(b"z" * 1_000_001)
    assert capture.finish() == "z" * 1_000_000 + "\n…[truncated 1 chars]"
