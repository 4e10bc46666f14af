"""Command-line values of piw's four parameter types, converted without importing pydantic.

typer (0.26 and later) converts every parameter through a pydantic ``TypeAdapter`` that it builds on first use.
Importing pydantic and building those adapters costs ~110 ms on every ``piw`` command, ``--help`` included, which
is more than ``piw inspect`` of a small run spends on the run. piw's parameters are all ``str``, ``int``, ``bool``
or ``list[str]``, without bounds, parsers or choices; for exactly those, :func:`install_plain_conversion` gives
typer a converter of its own with typer's results and typer's error messages (``tests/cli/test_coercion.py``
compares the two on the same inputs). Any other parameter, and a typer without this hook, keeps typer's own
conversion, so the worst case of a typer upgrade is the old start-up time, never a different value.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

try:  # a private hook of typer's; when it moves, typer converts as before
    from typer._click.exceptions import BadParameter
    from typer._coercion import RuntimeParam

    HOOKED = True
except ImportError:  # pragma: no cover - another typer
    HOOKED = False

_INT = re.compile(r"[+-]?[0-9](?:_?[0-9])*(?:\.0+)?", re.ASCII)
_TRUE = frozenset({"1", "on", "t", "true", "y", "yes"})
_FALSE = frozenset({"0", "off", "f", "false", "n", "no"})
INT_ERROR = "Input should be a valid integer, unable to parse string as an integer"
BOOL_ERROR = "Input should be a valid boolean, unable to interpret input"
STR_ERROR = "Input should be a valid string"


class ConversionError(ValueError):
    """A value the parameter's type does not accept; the message is typer's for the same value."""


def _text(value: Any) -> str:
    if isinstance(value, bytes):  # typer decodes argv bytes the same way
        return value.decode(sys.getfilesystemencoding(), "replace")
    if not isinstance(value, str):
        raise ConversionError(STR_ERROR)
    return value


def to_str(value: Any) -> str:
    if isinstance(value, str | bytes):
        return _text(value)
    return str(value)


def to_int(value: Any) -> int:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    text = _text(value).strip()
    if not _INT.fullmatch(text):
        raise ConversionError(INT_ERROR)
    return int(text.split(".", 1)[0])


def to_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    text = _text(value).strip()
    if text == "":
        return False
    lowered = text.lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ConversionError(BOOL_ERROR)


def to_str_list(value: Any) -> list[str]:
    items = value if isinstance(value, list | tuple) else [value]
    return [to_str(item) for item in items]


CONVERTERS: dict[Any, Callable[[Any], Any]] = {
    str: to_str,
    int: to_int,
    bool: to_bool,
    list[str]: to_str_list,
}


if HOOKED:

    @dataclass(frozen=True)
    class PlainRuntimeParam(RuntimeParam):
        """typer's conversion contract for one parameter, done by a plain function."""

        convert: Callable[[Any], Any]

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            try:
                return self.convert(value)
            except ConversionError as exc:
                raise BadParameter(str(exc), ctx=ctx, param=param) from None


def _plain(param: Any) -> Callable[[Any], Any] | None:
    descriptor = getattr(param, "type_descriptor", None)
    info = getattr(descriptor, "parameter_info", None)
    if descriptor is None or info is None or getattr(descriptor, "file_annotation", None) is not None:
        return None
    if any(getattr(info, name, None) is not None for name in ("parser", "click_type", "min", "max")):
        return None
    try:
        return CONVERTERS.get(descriptor.annotation)
    except TypeError:  # an unhashable annotation: not one of the four
        return None


def install_plain_conversion(param: Any) -> bool:
    """Give ``param`` the plain converter when it is one of the four types; whether it was given one."""
    if not HOOKED or getattr(param, "_runtime_param", "absent") is not None:
        return False
    convert = _plain(param)
    if convert is None:
        return False
    descriptor = param.type_descriptor
    param._runtime_param = PlainRuntimeParam(
        parameter_info=descriptor.parameter_info, annotation=descriptor.annotation, convert=convert
    )
    return True
