"""A run open for writing: its writer, conversation log, update publisher, budget gate and store.

The engine opens one once the run's store is taken (a new bundle, a resume, a fork or a continuation) and closes
it when the loop stops; in between every step writes through it. It exists only while all five do, so nothing
that holds one checks for a missing part.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from piw.run.budget import BudgetGate
from piw.run.options import RunOptions
from piw.store.bundle import Bundle
from piw.store.db.index import RunIndex
from piw.store.fold import RunState
from piw.store.run_store import RunStore
from piw.store.session import SessionLog
from piw.store.writer import RunWriter
from piw.telemetry.hook import flush_live, live_listeners
from piw.updates.publishing import UpdatePublisher
from piw.wire_models import Manifest


@dataclass(frozen=True)
class OpenRun:
    """The parts of one run that its steps write through, all open together."""

    writer: RunWriter
    session: SessionLog
    publisher: UpdatePublisher
    budget: BudgetGate
    store: RunStore
    """Where the run's record lives; taken for writing until :meth:`close`."""

    @property
    def bundle(self) -> Bundle:
        return self.writer.bundle

    @property
    def run_id(self) -> str:
        return self.writer.bundle.run_id

    @property
    def state(self) -> RunState:
        """The run as folded from every event committed so far (``RunWriter.append`` keeps it current)."""
        return self.writer.state

    def resolve(self, value: Any) -> Any:
        """A persisted value with its artifact refs loaded (``docs/design/persistence.md`` §6)."""
        return self.writer.bundle.resolve(value)

    def close(self) -> None:
        """Flush the caches, close the trace and the conversation, and release the store."""
        self.writer.close()
        self.session.close()
        self.store.release()
        flush_live(self.run_id)  # telemetry: the last spans, bounded (docs/telemetry.md)


def open_run(
    home: Path, store: RunStore, state: RunState, manifest: Manifest, options: RunOptions, *, indexed: bool
) -> OpenRun:
    """Open the run of ``store`` (taken for writing) from ``state``; ``indexed`` upserts its ``runs`` index row
    (a run under a claim: one in the run queue)."""
    index = RunIndex(home) if indexed else None
    writer = RunWriter(store, state, manifest, index=index)
    writer.listeners.extend(options.listeners)
    session = store.open_session()
    writer.listeners.extend(live_listeners(home, writer, session))  # [telemetry], docs/telemetry.md
    return OpenRun(writer, session, UpdatePublisher(writer), BudgetGate(writer), store)
