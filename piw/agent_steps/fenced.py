"""The provider an agent step talks to: each model request is an effect, so the run's claim is fenced first.

A holder past its own deadline (``docs/detached.md``, "Self-fencing") sends no new request: the fence raises
``ClaimLost`` before the stream opens, and the node is aborted as for any lost claim.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

from piw.providers.base import ChatRequest, Provider, ProviderEvent, WrappedProvider

if TYPE_CHECKING:
    from piw.store.writer import RunWriter


class FencedProvider(WrappedProvider):
    """Fences the run's claim before every request the inner provider sends."""

    def __init__(self, inner: Provider, writer: RunWriter) -> None:
        super().__init__(inner)
        self.writer = writer

    def stream(self, request: ChatRequest, cancel: threading.Event) -> Iterator[ProviderEvent]:
        self.writer.fence()
        yield from self.inner.stream(request, cancel)
