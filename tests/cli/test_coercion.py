"""piw's own conversion of option values gives typer's results and typer's messages (``piw.cli.coercion``).

typer converts through pydantic; piw skips that import on every command for its four parameter types. Each case
here goes through both: typer's converter (built as typer builds it) and the one piw installs.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer._coercion import build_runtime_param, resolve_type_descriptor
from typer.models import OptionInfo

from piw.cli.coercion import CONVERTERS, ConversionError

INT_INPUTS = ["1", " 2 ", "+3", "-4", "1_000", "1.0", "7.00", "1.5", "abc", "", " ", "0x10", "1e3", "١٢", "1__0",
              "_1", "1_", "--1", "+-1", "12345678901234567890", "0", "-0", "1.", ".5", "1,000", "\t9\n"]  # fmt: skip
BOOL_INPUTS = [
    "true",
    "Yes",
    "1",
    "off",
    "F",
    "n",
    "maybe",
    "",
    " ",
    " true ",
    "TRUE",
    "0",
    "2",
    "on",
    "ON",
    "y",
]
STR_INPUTS = ["plain", "", " spaced ", "ünïcode", "\x1b[31m", "-1"]


def _typer(annotation: Any, value: Any) -> tuple[str, Any]:
    runtime = build_runtime_param(resolve_type_descriptor(annotation, OptionInfo()))
    from pydantic import ValidationError

    try:
        return "ok", runtime.adapter.validate_python(value)  # type: ignore[attr-defined]
    except ValidationError as exc:
        return "error", exc.errors()[0]["msg"]


def _piw(annotation: Any, value: Any) -> tuple[str, Any]:
    try:
        return "ok", CONVERTERS[annotation](value)
    except ConversionError as exc:
        return "error", str(exc)


@pytest.mark.parametrize(
    ("annotation", "value"),
    [(int, v) for v in INT_INPUTS] + [(bool, v) for v in BOOL_INPUTS] + [(str, v) for v in STR_INPUTS]
    + [(list[str], ("a", "b")), (list[str], ()), (int, 5), (bool, True)],
)  # fmt: skip
def test_the_same_value_or_the_same_message_as_typer(annotation: Any, value: Any) -> None:
    assert _piw(annotation, value) == _typer(annotation, value)


@given(st.text(alphabet="0123456789_+-. \t.eE", max_size=8))
def test_integers_agree_with_typer_on_generated_text(value: str) -> None:
    assert _piw(int, value) == _typer(int, value)
