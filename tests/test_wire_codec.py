"""The trace codec: fast lines are byte for byte the spec's compact ``json`` encoding, and NaN is refused.

``persistence.md`` §2 fixes the encoding as ``json.dumps(separators=(",", ":"), ensure_ascii=False,
allow_nan=False)``. The writer takes orjson's fast path only for values one walk has proved plain; these
properties pin that the bytes are then identical, that anything else falls back to ``json`` (so non-finite
numbers are refused with the same error and non-string keys become strings exactly as before), and that the
walk externalizes exactly as :func:`piw.store.artifacts.externalize` does.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from piw.store.artifacts import externalize, externalize_plain
from piw.store.trace import TraceEvent, decode_event
from piw.wire import dumps_line, encode_line, is_plain

TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=30)  # no lone surrogates: not UTF-8
LEAVES = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | TEXT
KEYS = TEXT | st.integers(-5, 5) | st.booleans() | st.none() | st.floats(allow_nan=False)
ANY_VALUES = st.recursive(
    LEAVES,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(KEYS, inner, max_size=4)
        | st.dictionaries(st.sampled_from(["$artifact", "$escaped", "x"]), inner, max_size=2)
    ),
    max_leaves=25,
)
PLAIN_FLOATS = st.floats(allow_nan=False, allow_infinity=False).filter(
    lambda f: f == 0 or 1e-4 <= abs(f) < 1e16
)
PLAIN_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | PLAIN_FLOATS | TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=25,
)


def _store(text: str) -> dict[str, Any]:
    return {"path": f"artifacts/{len(text)}.txt", "bytes": len(text)}


def _json_line(value: Any) -> bytes:
    return (dumps_line(value) + "\n").encode("utf-8")


@settings(deadline=None)
@given(PLAIN_VALUES)
def test_plain_values_encode_to_the_same_bytes_as_json(value: Any) -> None:
    assert is_plain(value)
    assert encode_line(value, plain=True) == _json_line(value)


@settings(deadline=None)
@given(ANY_VALUES)
def test_the_walk_externalizes_like_externalize_and_only_claims_plain_when_it_is(value: Any) -> None:
    wire, plain = externalize_plain(value, _store)
    try:
        expected = _json_line(externalize(value, _store))
    except ValueError:  # NaN or an infinity: json refuses it, and so must the fast path
        assert not plain
        with pytest.raises(ValueError, match="Out of range float"):
            encode_line(wire, plain=plain)
        return
    assert encode_line(wire, plain=plain) == expected
    if plain:
        assert wire == json.loads(expected), (
            "a plain value is folded as it is, so it must be what readers parse"
        )


def test_non_finite_numbers_are_refused_never_written() -> None:
    for bad in (math.nan, math.inf, -math.inf):
        wire, plain = externalize_plain({"x": [1, bad]}, _store)
        assert not plain
        with pytest.raises(ValueError, match="Out of range float"):
            TraceEvent(1, "t", "run", "x", "r", wire).encode(plain=plain)


def test_non_string_keys_and_tuples_become_what_json_makes_of_them() -> None:
    wire, plain = externalize_plain({1: (1, 2), None: True, 2.5: "x", "s": {"$artifact": 1}}, _store)
    assert not plain
    line = TraceEvent(1, "t", "run", "x", "r", wire).encode(plain=plain)
    assert line.endswith(b'"payload":{"1":[1,2],"null":true,"2.5":"x","s":{"$escaped":{"$artifact":1}}}}\n')
    assert decode_event(line, 1).payload == {
        "1": [1, 2],
        "null": True,
        "2.5": "x",
        "s": {"$escaped": {"$artifact": 1}},
    }


def test_long_strings_become_artifact_refs_on_the_fast_path() -> None:
    wire, plain = externalize_plain({"big": "é" * 3000, "small": "é" * 1000}, _store)
    assert plain and wire == {
        "big": {"$artifact": {"path": "artifacts/3000.txt", "bytes": 3000}},
        "small": "é" * 1000,
    }


@settings(deadline=None)
@given(PLAIN_VALUES)
@example({"k": "a\x7fb"})  # ASCII, but DEL: sanitized
@example({"k": "\x1b[31m", "\x07": 1})  # C0 controls: JSON escapes them, the text is printable ASCII
@example(["\u202e", "\x85", "é"])  # bidi, C1, Latin-1: not ASCII
@example({"$": "$artifact", "k": "$5"})  # a dollar that is no artifact ref
def test_the_views_fast_compact_text_is_what_json_gives(value: Any) -> None:
    """``compact`` (every table cell of a value) writes plain data with orjson: the same text as ``json``."""
    from piw.terminal import single_line
    from piw.views.base import compact

    expected = (
        value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    )
    assert compact(value) == single_line(expected)
