"""The provider an agent step talks to when its run has a budget: each request asks the run's gate first.

It lives on the agent side, beside its only user, so that ``piw.run.budget`` (which the engine imports for every
run) needs no part of the provider layer.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

from piw.providers.base import ChatRequest, DoneEvent, ErrorEvent, Provider, ProviderEvent, WrappedProvider
from piw.providers.builder import MessageBuilder
from piw.providers.messages import AssistantReply
from piw.run.budget import Reservation

if TYPE_CHECKING:
    from piw.run.budget import BudgetGate
    from piw.run.executors import Attempt


class BudgetedProvider(WrappedProvider):
    """Wraps a provider for one agent step: the gate admits each request and records what it spent."""

    def __init__(
        self, inner: Provider, gate: BudgetGate, owner: Attempt, step_key: str, child_key: str | None = None
    ) -> None:
        super().__init__(inner)
        self.gate = gate
        self.owner = owner
        self.step_key = step_key
        self.child_key = child_key

    def stream(self, request: ChatRequest, cancel: threading.Event) -> Iterator[ProviderEvent]:
        verdict = self.gate.reserve(request, self.owner, self.step_key)
        if isinstance(verdict, str):
            # Not sent: the attempt (and any sibling child step, once the requests in flight are recorded)
            # stops, and the run waits on its budget.
            self.gate.cancel_when_idle(self.owner.cancel)
            builder = MessageBuilder(self.inner.name, request.model)
            yield from builder.start()
            yield from builder.fail(f"Not sent: {verdict}.", aborted=True)
            return
        held = verdict if isinstance(verdict, Reservation) else None
        try:
            self.owner.writer.sync()  # the usage of earlier requests is durable before another one is sent
            final: AssistantReply | None = None
            for event in self.inner.stream(request, cancel):
                if isinstance(event, DoneEvent | ErrorEvent):
                    final = event.message
                yield event
            if final is not None:
                self.gate.record(final, self.owner, self.step_key, self.child_key, held)
        finally:
            if held is not None:
                self.gate.release(held)
