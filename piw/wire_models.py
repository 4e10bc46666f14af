"""The pydantic base of persisted models and ``manifest.json``'s model (``docs/bundle-format.md`` §4).

Kept apart from :mod:`piw.wire` (which it builds on) so that reading runs (``inspect``, ``watch``, ``runs``) never
imports pydantic.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer
from pydantic.alias_generators import to_camel

from piw.wire import RUN_BUNDLE_SCHEMA, SESSION_ENTRY_SCHEMA, TRACE_EVENT_SCHEMA


class WireModel(BaseModel):
    """Base of persisted models: camelCase aliases, unknown keys ignored, ``None`` omitted unless nullable."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore", frozen=True)
    nullable_fields: ClassVar[frozenset[str]] = frozenset()

    @model_serializer(mode="wrap")
    def _drop_none(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        keep = {to_camel(name) for name in self.nullable_fields} | set(self.nullable_fields)
        return {key: value for key, value in data.items() if value is not None or key in keep}

    def to_wire(self) -> dict[str, Any]:
        """The camelCase JSON object written to disk."""
        return self.model_dump(by_alias=True, mode="json")


class Manifest(WireModel):
    """``manifest.json``: a derived summary of one bundle, replaced atomically."""

    schema_id: str = Field(default=RUN_BUNDLE_SCHEMA, alias="schema")
    run_id: str
    workflow_name: str
    run_title: str | None = None
    workflow_source: dict[str, Any]
    workflow_sources: list[dict[str, Any]] | None = None
    definition_digest: str
    started_at: str
    finished_at: str | None = None
    status: str = "running"
    forked_from: dict[str, Any] | None = None
    """``{runId, seq}`` for a run made by ``piw fork``, so listings find a run's forks without reading traces."""
    trace_schema: str = TRACE_EVENT_SCHEMA
    session_schema: str | None = SESSION_ENTRY_SCHEMA
    paths: dict[str, str] = Field(
        default_factory=lambda: {
            "workflow": "workflow.json",
            "state": "state.json",
            "trace": "trace.ndjson",
            "session": "session/entries.ndjson",
            "artifacts": "artifacts",
        }
    )
