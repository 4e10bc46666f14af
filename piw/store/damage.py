"""Damage reports: what is wrong with a bundle, said the same way in every view and every JSON shape.

A reader never hides damage and never crashes on it: it shows what it can (the readable prefix of a trace) and
carries one :class:`Damage` beside it, so ``piw inspect --json`` and ``piw runs --json`` tell the truth instead of
reporting a stale cache (``docs/bundle-format.md`` §10).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from piw.store.artifacts import ArtifactStore, artifact_refs

if TYPE_CHECKING:
    from pathlib import Path

    from piw.store.state import RunState


@dataclass(frozen=True)
class Damage:
    """One problem found in a bundle: the file, the damaged line (traces), how much is readable, a notice."""

    notice: str
    file: str
    line: int | None = None
    readable_lines: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "line": self.line,
            "readableLines": self.readable_lines,
            "notice": self.notice,
        }


def line_damage(file: str, line: int) -> Damage:
    """A damaged line ``line`` of an NDJSON file (trace or session): the lines before it are readable."""
    return Damage(
        notice=f"{file} line {line} is damaged; showing the {line - 1} lines before it.",
        file=file,
        line=line,
        readable_lines=line - 1,
    )


def _may_refer_to_artifacts(trace: Path) -> bool:
    """Whether the trace's bytes hold ``"$artifact"`` at all (a ref is always written as that key).

    A byte search costs a fraction of building the whole state as JSON to walk it, which on a long run is most
    of what ``inspect`` would otherwise cost; when the key is there, the refs are walked and checked.
    """
    marker = b'"$artifact"'
    try:
        with trace.open("rb") as handle:
            tail = b""
            while chunk := handle.read(1 << 20):  # pieces, not a mapping: touched pages would count as memory
                data = tail + chunk
                # "$" is rare in traces: memchr finds each candidate, and most pieces have none at all
                hit = data.find(b"$")
                while hit >= 0:
                    if data[hit - 1 : hit + len(marker) - 1] == marker:
                        return True
                    hit = data.find(b"$", hit + 1)
                tail = data[-len(marker) :]
    except OSError:
        return True
    return False


def artifact_damage(bundle_dir: Path, state: RunState, *, may_refer: bool | None = None) -> Damage | None:
    """The first damaged artifact (missing, or bytes that no longer match its sha256) the state refers to.

    ``may_refer`` is what the replay that built ``state`` found (:attr:`piw.store.foldcache.Replay.artifact_refs`,
    kept in fold checkpoints): false skips the search of the trace for the key, which on a run of a million
    events is most of what a warm ``piw inspect`` costs. ``None`` searches.
    """
    from piw.store.state_json import state_to_json

    if may_refer is None:
        may_refer = _may_refer_to_artifacts(bundle_dir / "trace.ndjson")
    if not may_refer:
        return None  # every value of a state comes from the trace: no ref there, none in the state

    store = ArtifactStore(bundle_dir)
    seen: set[str] = set()
    for ref in artifact_refs(state_to_json(state)):
        path = str(ref.get("path", ""))
        if path in seen:
            continue
        seen.add(path)
        problem = store.problem(ref)
        if problem is not None:
            return Damage(notice=f"artifact {path} {problem}; the run is damaged.", file=path)
    return None
