"""``piw test [DIR…]``: every case run offline against its recorded replies, in parallel, each one graded.

Each case runs in its own throwaway ``PIW_HOME`` (in memory where the system has ``/dev/shm``, no fsync: the home
is deleted after), so cases never share a run database and leave nothing behind. A broken case (a malformed file,
a missing workflow, replies that ran out) is one line naming the file and the field; the other cases still run
(``docs/testing.md``).
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from piw.cases.execute import Observed, run_once
from piw.cases.files import (
    CASE_FILE,
    REPLIES_FILE,
    Case,
    CaseFile,
    DefinitionPin,
    Expected,
    RecordedStep,
    read_case,
    shown,
)
from piw.cases.grade import Difference, grade
from piw.cases.places import Places
from piw.cases.record import expected_of, node_digests, recorded_steps
from piw.cases.scratch import scratch_root, seed
from piw.errors import BrokenCase, DefinitionError, PiwError
from piw.providers.base import StepRef
from piw.providers.case_replies import CaseReplyProvider, ReplayStep
from piw.store.db.database import close_database

Verdict = Literal["pass", "fail", "broken"]


@dataclass(frozen=True)
class Rerecord:
    """What ``--accept`` writes for a failing case: its expectations, replies and pins as this run made them."""

    case: CaseFile
    expected: Expected
    steps: list[RecordedStep]


@dataclass
class CaseResult:
    """One case's verdict, what differed (or why it is broken), its time and the requests its replay answered."""

    folder: Path
    name: str
    verdict: Verdict
    differences: list[Difference] = field(default_factory=list)
    broken: str | None = None
    seconds: float = 0.0
    requests: int = 0
    rerecord: Rerecord | None = None


def run_case(folder: Path) -> CaseResult:
    """Read, replay and grade one case folder; never raises for a broken case."""
    started = time.perf_counter()
    try:
        case = read_case(folder)
    except BrokenCase as exc:
        return CaseResult(
            folder, folder.name, "broken", broken=exc.message, seconds=time.perf_counter() - started
        )
    try:
        with tempfile.TemporaryDirectory(prefix="piw-test-", dir=scratch_root()) as scratch:
            try:
                seed(Path(scratch))
                result = _replay(case, Path(scratch))
            finally:
                close_database(Path(scratch))
    except BrokenCase as exc:
        result = CaseResult(folder, case.name, "broken", broken=exc.message)
    except (DefinitionError, PiwError) as exc:  # the workflow cannot load, or its run could not start
        result = CaseResult(
            folder, case.name, "broken", broken=f"{shown(folder / CASE_FILE)}: workflow: {exc}"
        )
    result.seconds = time.perf_counter() - started
    return result


def _replay(case: Case, home: Path) -> CaseResult:
    def specialize(text: str, step: StepRef) -> str:
        return Places(case.project, home, step.run_id).specialize(text)

    provider = CaseReplyProvider([ReplayStep(s.node, s.prompt, s.replies) for s in case.steps], specialize)
    observed = run_once(case, home, provider, durability="flush")
    if provider.log.exhausted:
        problem = provider.log.exhausted[0]
        node, _, reason = problem.partition(": ")
        raise BrokenCase(shown(case.folder / REPLIES_FILE), node, reason)
    differences = grade(case, observed)
    differences += [
        Difference(
            "prompt", drift.node if drift.visit == 1 else f"{drift.node} (visit {drift.visit})", drift.diff
        )
        for drift in provider.log.drift
    ]
    verdict: Verdict = "fail" if differences else "pass"
    rerecord = _rerecord(case, observed) if differences else None
    return CaseResult(
        case.folder, case.name, verdict, differences, requests=len(provider.requests), rerecord=rerecord
    )


def _rerecord(case: Case, observed: Observed) -> Rerecord:
    """The case as this run would record it, keeping each node's expectation mode, check and ignored keys."""
    places = Places(case.project, observed.bundle.path.parent.parent, observed.run_id)
    assert observed.state is not None
    fresh = expected_of(observed.state, observed.bundle, places)
    for node_id, rule in case.expected.nodes.items():
        if node_id in fresh.nodes:
            fresh.nodes[node_id] = fresh.nodes[node_id].model_copy(
                update={"expect": rule.expect, "check": rule.check, "ignore_keys": rule.ignore_keys}
            )
    pin = DefinitionPin(digest=observed.state.definition_digest, nodes=node_digests(observed.snapshot))
    return Rerecord(
        case.case.model_copy(update={"definition": pin}), fresh, recorded_steps(observed.bundle, places)
    )


def run_cases(
    folders: Sequence[Path], jobs: int = 1, on_result: Callable[[CaseResult], None] | None = None
) -> list[CaseResult]:
    """Run every case folder, ``jobs`` at a time; results in the order of ``folders``."""
    if jobs <= 1 or len(folders) <= 1:
        results = []
        for folder in folders:
            results.append(run_case(folder))
            if on_result:
                on_result(results[-1])
        return results
    with ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="piw-test") as pool:
        futures = [pool.submit(run_case, folder) for folder in folders]
        results = []
        for future in futures:
            results.append(future.result())
            if on_result:
                on_result(results[-1])
        return results
