"""The fence: what a claim holder offers the store of the run it writes (``docs/detached.md``).

Every write to a run is preceded by ``fence()``, which raises ``ClaimLost`` once this process no longer holds the
run's claim. The holder's lease (``piw.store.db.lease``) is one; a run store checks it after its own lock.
"""

from __future__ import annotations

from typing import Protocol


class Fence(Protocol):
    """``fence()`` raises ``ClaimLost`` once the claim is gone."""

    def fence(self) -> None: ...
