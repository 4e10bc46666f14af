"""The interim answer book: one receipt file per waiting run, created atomically (``link`` fails if it exists).

It gives the same guarantees as the database book that replaces it (one continuation per checkpoint; an
identical repeat adopts; a different answer is refused) on a single host, until ``piw.sqlite`` holds decisions.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path

from piw.errors import ContinuationExists, DecisionResolved
from piw.run.answers import AnswerClaim, AnswerReceipt
from piw.run.continuation import ContinuationSpec
from piw.store.bundle import ensure_private_dir


class FileAnswerBook:
    def __init__(self, home: Path) -> None:
        self.folder = home / "answers"

    def path(self, run_id: str) -> Path:
        return self.folder / f"{run_id}.json"

    def read(self, run_id: str) -> dict[str, object] | None:
        try:
            data: dict[str, object] = json.loads(self.path(run_id).read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        return data

    def record_answer(self, claim: AnswerClaim) -> AnswerReceipt:
        ensure_private_dir(self.folder)
        record = {
            "fingerprint": claim.fingerprint,
            "scope": claim.scope,
            "provenance": claim.provenance,
            "spec": claim.spec.to_json(),
        }
        fd, temp = tempfile.mkstemp(dir=self.folder, prefix=".answer.")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump(record, handle)
                handle.flush()
                os.fsync(handle.fileno())
            try:
                os.link(temp, self.path(claim.spec.parent_run_id))
            except FileExistsError:
                return self._repeat(claim)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp)
        return AnswerReceipt(claim.spec, adopted=False, provenance=claim.provenance)

    def _repeat(self, claim: AnswerClaim) -> AnswerReceipt:
        stored = self.read(claim.spec.parent_run_id) or {}
        spec = ContinuationSpec.from_json(stored["spec"])  # type: ignore[arg-type]
        if stored.get("fingerprint") == claim.fingerprint:
            return AnswerReceipt(spec, adopted=True, provenance=str(stored.get("provenance", "human")))
        run_id = claim.spec.parent_run_id
        if claim.scope == "decision.answer":
            how = stored.get("provenance", "human")
            choice = (spec.human_decision or {}).get("choice")
            raise DecisionResolved(
                f"Decision {claim.spec.node_id} of run {run_id} was already resolved ({choice}, {how}); its "
                f"continuation is run {spec.run_id}."
            )
        raise ContinuationExists(
            f"Run {run_id} was already answered differently; its continuation is run {spec.run_id}.",
            spec.run_id,
        )
