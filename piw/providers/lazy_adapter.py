"""A pydantic ``TypeAdapter`` built on first use, so importing a module that defines one costs nothing.

A module-level ``TypeAdapter`` over a union of models compiles a validator and a serializer for every member at
import; ``piw run`` paid for two of them (messages, provider events) before its first model request, and uses
neither before it (``docs/providers.md``, first model request). The adapter behaves as the ``TypeAdapter`` it wraps.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from pydantic import TypeAdapter

from piw.lazy import Lazy

T = TypeVar("T")


class LazyAdapter(Generic[T]):
    """``TypeAdapter(kind)``, made the first time it validates or dumps."""

    def __init__(self, kind: Any) -> None:
        self._adapter: Lazy[TypeAdapter[T]] = Lazy(lambda: TypeAdapter(kind))

    def validate_python(self, value: Any, **options: Any) -> T:
        return self._adapter.get().validate_python(value, **options)

    def validate_json(self, value: str | bytes, **options: Any) -> T:
        return self._adapter.get().validate_json(value, **options)

    def dump_python(self, value: T, **options: Any) -> Any:
        return self._adapter.get().dump_python(value, **options)

    def dump_json(self, value: T, **options: Any) -> bytes:
        return self._adapter.get().dump_json(value, **options)
