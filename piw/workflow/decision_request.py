"""The structured request of a human decision: what the person deciding is shown (pydantic models).

Its own module so that loading a workflow, which imports the gate DSL (``piw.workflow.gates``), builds no pydantic
model: these are built the first time a gate is defined or opened (``as_request``), or when a workflow file
imports them from ``piw``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FieldItem(_Strict):
    label: Annotated[str, Field(min_length=1, max_length=100)]
    value: Annotated[str, Field(max_length=2_000)]


class FieldsBlock(_Strict):
    """Short label/value pairs (digest, revision, mode)."""

    kind: Literal["fields"] = "fields"
    items: Annotated[list[FieldItem], Field(min_length=1, max_length=32)]


class PreformattedBlock(_Strict):
    """Text shown as is, in a monospace block (a plan as JSON)."""

    kind: Literal["preformatted"] = "preformatted"
    text: Annotated[str, Field(max_length=100_000)]


class SectionBlock(_Strict):
    """A titled section: plain text, and/or preformatted blocks."""

    kind: Literal["section"] = "section"
    title: Annotated[str, Field(min_length=1, max_length=200)]
    text: Annotated[str | None, Field(max_length=20_000)] = None
    blocks: Annotated[list[PreformattedBlock], Field(max_length=8)] = []


Block = Annotated[FieldsBlock | SectionBlock | PreformattedBlock, Field(discriminator="kind")]


class DecisionRequest(_Strict):
    """What the person deciding is shown: a title, a subject, a summary and a few blocks."""

    title: Annotated[str, Field(min_length=1, max_length=2_000)]
    subject: Annotated[str | None, Field(max_length=2_000)] = None
    summary: Annotated[str | None, Field(max_length=20_000)] = None
    blocks: Annotated[list[Block], Field(max_length=32)] = []

    @field_validator("title")
    @classmethod
    def _non_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("title must not be blank")
        return value

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_none=True, exclude_defaults=False)


def as_request(value: Any, where: str) -> DecisionRequest:
    """A request string (its title), a ``DecisionRequest`` or an equivalent mapping; errors name the field."""
    if isinstance(value, DecisionRequest):
        return value
    if isinstance(value, str):
        value = {"title": value}
    if not isinstance(value, Mapping):
        raise ValueError(
            f"{where}: request must be a string, a DecisionRequest or a mapping, got {type(value).__name__}"
        )
    try:
        return DecisionRequest.model_validate(dict(value))
    except ValidationError as exc:
        first = exc.errors()[0]
        path = ".".join(str(part) for part in first.get("loc", ())) or "request"
        raise ValueError(f"{where}: request.{path}: {first.get('msg', 'invalid')}") from None
