"""The step's output schema, in the two forms a model sees: the contract text and the typed ``workflow`` tool.

pydantic's JSON Schema carries a ``title`` on every model and field. Titles cost tokens on every request and tell a
model nothing the property names do not, so both forms drop them (``docs/design/agent-steps.md`` §2, §3.1). Only the
``title`` *keyword* goes: a field that happens to be called ``title`` is a property name and stays.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from piw.workflow.schemas import json_schema

_NAMED_SCHEMAS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
"""Keywords whose value maps names (property names, definition names) to schemas: the names are kept."""
_DATA = ("default", "const", "enum", "examples")
"""Keywords whose value is instance data, not a schema: copied as they are."""


def strip_titles(schema: Any) -> Any:
    """A copy of ``schema`` without any ``title`` keyword, at any depth."""
    if isinstance(schema, list):
        return [strip_titles(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "title" and isinstance(value, str):
            continue
        if key in _DATA:
            out[key] = value
        elif key in _NAMED_SCHEMAS and isinstance(value, dict):
            out[key] = {name: strip_titles(sub) for name, sub in value.items()}
        else:
            out[key] = strip_titles(value)
    return out


def model_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The model's JSON Schema without titles (``$defs`` left where pydantic put them)."""
    schema: dict[str, Any] = strip_titles(json_schema(model))
    return schema


def hoist_defs(schema: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split ``schema`` into itself without ``$defs`` and those definitions.

    Nested under the tool's ``output`` property, the definitions would sit at ``#/properties/output/$defs`` while
    every reference says ``#/$defs/X``, which resolves from the document root. Moving them to the tool's root
    keeps each reference pointing where it says, so no reference needs rewriting.
    """
    defs: dict[str, Any] = dict(schema.get("$defs") or {})
    body = {key: value for key, value in schema.items() if key != "$defs"}
    return body, defs
