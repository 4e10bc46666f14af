"""An example answer for a checkpoint: JSON that fits its answer model, for the commands that say how to answer.

``piw run`` ends a waiting run with ``Answer with: piw answer RUN '<example>'`` and ``piw answer`` repeats the
example when an answer is not JSON or does not fit (``docs/checkpoints.md``). The example is built from the answer
model's JSON schema (as the definition snapshot records it): its required fields, each with a value of its type
that keeps the schema's own limits (an enum's first value, a minimum, a minimum length or item count), nested
models and ``$ref`` definitions included. A checkpoint without a model takes any JSON: ``{"ok": true}``.
"""

from __future__ import annotations

import json
from typing import Any

ANY_ANSWER: Any = {"ok": True}
"""The example for a checkpoint that declares no answer model (any JSON fits)."""

_DEPTH = 8


def example_answer(schema: dict[str, Any] | None) -> Any:
    """A JSON value that fits ``schema`` (a pydantic model's JSON schema), or :data:`ANY_ANSWER` without one."""
    if not isinstance(schema, dict) or not schema:
        return ANY_ANSWER
    return _value(schema, schema.get("$defs") or {}, _DEPTH)


def example_text(schema: dict[str, Any] | None) -> str:
    """:func:`example_answer` as compact JSON text, ready to quote in a command."""
    return json.dumps(example_answer(schema), ensure_ascii=False)


def _value(schema: dict[str, Any], defs: dict[str, Any], depth: int) -> Any:
    if depth <= 0:
        return None
    ref = schema.get("$ref")
    if isinstance(ref, str):
        target = defs.get(ref.rsplit("/", 1)[-1])
        return _value(target, defs, depth - 1) if isinstance(target, dict) else None
    if "const" in schema:
        return schema["const"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    if "default" in schema and schema["default"] is not None:
        return schema["default"]
    for key in ("anyOf", "oneOf", "allOf"):
        options = [option for option in schema.get(key) or [] if isinstance(option, dict)]
        picked = next((option for option in options if option.get("type") != "null"), None)
        if picked is not None:
            return _value(picked, defs, depth - 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((item for item in kind if item != "null"), None)
    if kind == "object" or isinstance(schema.get("properties"), dict):
        return _object(schema, defs, depth)
    if kind == "array":
        raw = schema.get("items")
        items: dict[str, Any] = raw if isinstance(raw, dict) else {}
        count = int(schema.get("minItems", 0) or 0)
        return [_value(items, defs, depth - 1) for _ in range(count)]
    if kind == "string":
        return "…" * max(int(schema.get("minLength", 1) or 1), 1)
    if kind in ("integer", "number"):
        return _number(schema, kind)
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    return "…"


def _object(schema: dict[str, Any], defs: dict[str, Any], depth: int) -> dict[str, Any]:
    raw = schema.get("properties")
    properties: dict[str, Any] = raw if isinstance(raw, dict) else {}
    required = schema.get("required")
    names = (
        [name for name in required if name in properties] if isinstance(required, list) else list(properties)
    )
    return {name: _value(properties[name] or {}, defs, depth - 1) for name in names}


def _number(schema: dict[str, Any], kind: str) -> int | float:
    """0, or the nearest value the schema's bounds allow."""
    value: float = 0
    low, high = schema.get("minimum"), schema.get("maximum")
    above, below = schema.get("exclusiveMinimum"), schema.get("exclusiveMaximum")
    step = 1 if kind == "integer" else 0.5
    if isinstance(low, int | float) and value < low:
        value = low
    if isinstance(above, int | float) and value <= above:
        value = above + step
    if isinstance(high, int | float) and value > high:
        value = high
    if isinstance(below, int | float) and value >= below:
        value = below - step
    return int(value) if kind == "integer" else value
