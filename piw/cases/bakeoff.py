"""``piw test --live``: the same cases against real providers, graded by the same expectations, side by side.

Each provider (``NAME`` or ``NAME/MODEL`` from ``config.toml``) runs every case ``--repeat`` times, one run at a
time, as ordinary runs in ``PIW_HOME`` (``piw inspect`` shows any of them). Per provider the table gives cases
passed, first-try valid structured steps (a submit step whose first submission was accepted), model requests,
tokens, cost and the p50/p95 latency of its requests, with a confidence note when the sample is small.
``--budget`` is the product's budget (``docs/fork-replay-budgets.md``), spread over the whole bake-off: each run gets
what is left, and the bake-off stops when it is spent (``docs/testing.md``, "A bake-off").
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from piw.cases.execute import Observed, run_once
from piw.cases.files import read_case
from piw.cases.grade import grade
from piw.cases.suite import CaseResult, Verdict
from piw.errors import BrokenCase, DefinitionError
from piw.providers.base import ChatRequest, DoneEvent, ErrorEvent, Provider, ProviderEvent
from piw.providers.recorded import STEP_MESSAGE, attempt_owners
from piw.store.session import read_session
from piw.workflow.budget import Budget

SMALL_SAMPLE = 10
"""Fewer runs per provider than this get a confidence note: a pass rate from few runs is a wide interval."""


class TimedProvider:
    """Wraps a provider and keeps the wall time of each request (first byte asked → final event)."""

    def __init__(self, inner: Provider, latencies: list[float] | None = None) -> None:
        self.name = inner.name
        self.model = inner.model
        self.latencies: list[float] = [] if latencies is None else latencies
        self._inner = inner
        self._lock = threading.Lock()

    def stream(self, request: ChatRequest, cancel: threading.Event) -> Iterator[ProviderEvent]:
        started = time.perf_counter()
        for event in self._inner.stream(request, cancel):
            if isinstance(event, DoneEvent | ErrorEvent):
                with self._lock:
                    self.latencies.append(time.perf_counter() - started)
            yield event


@dataclass
class Row:
    """One provider's figures over every run of every case."""

    label: str
    runs: int = 0
    passed: int = 0
    structured: int = 0
    first_try: int = 0
    requests: int = 0
    tokens: int = 0
    cost: float | None = 0.0
    latencies: list[float] = field(default_factory=list)
    results: list[CaseResult] = field(default_factory=list)

    def add_usage(self, usage: dict[str, Any] | None) -> None:
        usage = usage or {}
        self.requests += int(usage.get("requests") or 0)
        self.tokens += sum(int(usage.get(key) or 0) for key in ("input", "output", "cacheRead", "cacheWrite"))
        cost = usage.get("cost")
        if cost is None and usage.get("requests"):
            self.cost = None  # an unpriced model: a total would be too low
        elif self.cost is not None:
            self.cost += float(cost or 0.0)

    def to_json(self) -> dict[str, Any]:
        return {
            "provider": self.label,
            "runs": self.runs,
            "passed": self.passed,
            "structuredSteps": self.structured,
            "firstTryValid": self.first_try,
            "requests": self.requests,
            "tokens": self.tokens,
            "costUsd": self.cost,
            "latencyP50Ms": _ms(percentile(self.latencies, 0.50)),
            "latencyP95Ms": _ms(percentile(self.latencies, 0.95)),
            "passRateInterval": list(wilson(self.passed, self.runs)) if self.runs else None,
        }


@dataclass
class BakeOff:
    rows: list[Row]
    repeat: int
    stopped: str | None = None
    """Why the bake-off stopped early (its budget was spent), or ``None``."""
    broken: list[CaseResult] = field(default_factory=list)

    def results(self) -> list[CaseResult]:
        return [*self.broken, *(result for row in self.rows for result in row.results)]

    def exit_code(self) -> int:
        if self.broken:
            return 2
        return 1 if any(row.passed < row.runs for row in self.rows) else 0

    def to_json(self) -> dict[str, Any]:
        return {
            "providers": [row.to_json() for row in self.rows],
            "repeat": self.repeat,
            "stopped": self.stopped,
            "broken": [result.broken for result in self.broken],
        }


def _selection(home: Path, spec: str) -> tuple[Any, Any]:
    from piw.agent_steps.setup import check_requestable
    from piw.config.settings import load_config
    from piw.providers.selection import select_provider

    config = load_config(home)
    name, slash, model = spec.partition("/")
    if slash and name in config.providers:
        selection = select_provider(config, name, model or None)
    else:
        selection = select_provider(config, spec, None)
    check_requestable(selection)
    return config, selection


def bake_off(
    home: Path,
    folders: Sequence[Path],
    providers: Sequence[str],
    repeat: int = 1,
    budget: Budget | None = None,
    progress: Callable[[str], None] | None = None,
) -> BakeOff:
    """Run every case ``repeat`` times against each provider; stop when ``budget`` is spent."""
    from piw.providers.factory import build_provider

    cases, broken = [], []
    for folder in folders:
        try:
            cases.append(read_case(folder))
        except BrokenCase as exc:
            broken.append(CaseResult(folder, folder.name, "broken", broken=exc.message))
    wired = []
    for spec in providers:  # every provider is checked before anything runs
        config, selection = _selection(home, spec)
        build_provider(selection, config, home)  # a provider that cannot be built fails before anything runs
        wired.append((Row(f"{selection.provider}/{selection.model}"), config, selection))
    report = BakeOff([row for row, *_ in wired], repeat, broken=broken)
    spent = Budget(max_cost_usd=0.0, max_tokens=0, max_model_requests=0)
    for row, config, selection in wired:
        for case in cases:
            for _ in range(repeat):
                left = _left(budget, spent)
                if left is False:
                    report.stopped = "the bake-off's budget is spent"
                    return report
                started = time.perf_counter()
                # A provider per run, as each piw run builds one: a scripted one starts its replies again.
                timed = TimedProvider(build_provider(selection, config, home), row.latencies)
                try:
                    observed = run_once(
                        case,
                        home,
                        timed,
                        budget=left if isinstance(left, Budget) else None,
                        settings=_settings_for(config, selection),
                    )
                except (BrokenCase, DefinitionError) as exc:
                    report.broken.append(CaseResult(case.folder, case.name, "broken", broken=str(exc)))
                    break
                spent = _spend(spent, observed.usage)
                result = _graded(case, observed, row.label, time.perf_counter() - started)
                _count(row, observed, result)
                if progress:
                    why = (
                        f" {result.differences[0].headline()}: {result.differences[0].text.splitlines()[0]}"
                        if result.differences
                        else ""
                    )
                    progress(
                        f"{result.verdict.upper():<6} {case.name} on {row.label}  ({observed.run_id}){why}"
                    )
                if observed.status == "waiting" and observed.state and observed.state.waiting_on == "budget":
                    report.stopped = "the bake-off's budget is spent"
                    return report
    return report


def _settings_for(config: Any, selection: Any) -> Callable[[Provider], Any]:
    from piw.agent_steps.setup import agent_settings

    def settings(provider: Provider) -> Any:
        return agent_settings(config, provider, [], selection)

    return settings


def _graded(case: Any, observed: Observed, label: str, seconds: float) -> CaseResult:
    differences = grade(case, observed)
    verdict: Verdict = "fail" if differences else "pass"
    return CaseResult(case.folder, f"{case.name} [{label}]", verdict, differences, seconds=seconds)


def _count(row: Row, observed: Observed, result: CaseResult) -> None:
    row.runs += 1
    row.passed += result.verdict == "pass"
    row.results.append(result)
    row.add_usage(observed.usage)
    structured, first_try = first_try_valid(observed)
    row.structured += structured
    row.first_try += first_try


def first_try_valid(observed: Observed) -> tuple[int, int]:
    """``(submit steps, those whose first submission was accepted)``, read from the run's conversation."""
    entries = read_session(observed.bundle.session_path)
    owner = attempt_owners(entries)
    submit_attempts: list[str] = []
    first_call: dict[str, str] = {}
    verdict: dict[str, bool] = {}
    for entry in entries:
        message, attempt = entry.message, owner.get(entry.id)
        if attempt is None:
            continue
        if message.get("role") == "custom" and message.get("customType") == STEP_MESSAGE:
            contract = (message.get("details") or {}).get("contract") or {}
            if contract.get("completion") == "submit" and attempt not in submit_attempts:
                submit_attempts.append(attempt)
        elif message.get("role") == "assistant" and attempt not in first_call:
            for block in message.get("content") or []:
                arguments = block.get("arguments") or {} if isinstance(block, dict) else {}
                if block.get("name") == "workflow" and arguments.get("action") == "submit":
                    first_call[attempt] = str(block.get("id"))
                    break
        elif (
            message.get("role") == "toolResult"
            and attempt not in verdict
            and message.get("toolCallId") == first_call.get(attempt)
        ):
            verdict[attempt] = not message.get("isError")
    return len(submit_attempts), sum(1 for attempt in submit_attempts if verdict.get(attempt))


def _left(budget: Budget | None, spent: Budget) -> Budget | bool:
    """What a run may still spend (``True``: no limit), or ``False`` when the bake-off's budget is spent."""
    if budget is None:
        return True
    left = replace(budget)
    for name in ("max_cost_usd", "max_tokens", "max_model_requests"):
        limit = getattr(budget, name)
        if limit is not None:
            remaining = limit - (getattr(spent, name) or 0)
            if remaining <= 0:
                return False
            left = replace(left, **{name: type(limit)(remaining)})
    return left


def _spend(spent: Budget, usage: dict[str, Any] | None) -> Budget:
    usage = usage or {}
    tokens = sum(int(usage.get(key) or 0) for key in ("input", "output", "cacheRead", "cacheWrite"))
    return Budget(
        max_cost_usd=(spent.max_cost_usd or 0.0) + float(usage.get("cost") or 0.0),
        max_tokens=(spent.max_tokens or 0) + tokens,
        max_model_requests=(spent.max_model_requests or 0) + int(usage.get("requests") or 0),
    )


def percentile(values: Sequence[float], fraction: float) -> float | None:
    """Nearest-rank percentile (``None`` without values)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def wilson(successes: int, total: int, z: float = 1.96) -> tuple[float, float]:
    """The 95% Wilson interval of a pass rate (sound for small samples, unlike ``p ± 2σ``)."""
    if total == 0:
        return 0.0, 1.0
    p = successes / total
    centre = (p + z * z / (2 * total)) / (1 + z * z / total)
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / (1 + z * z / total)
    return max(0.0, centre - half), min(1.0, centre + half)


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 1)


def table_lines(report: BakeOff) -> list[str]:
    """The table people read: one row per provider/model, then the notes."""
    header = ["provider/model", "passed", "first-try valid", "requests", "tokens", "cost", "p50", "p95"]
    rows = [header]
    for row in report.rows:
        p50, p95 = _ms(percentile(row.latencies, 0.5)), _ms(percentile(row.latencies, 0.95))
        rows.append(
            [
                row.label,
                f"{row.passed}/{row.runs}",
                f"{row.first_try}/{row.structured}",
                str(row.requests),
                str(row.tokens),
                "unknown" if row.cost is None else f"${row.cost:.4f}",
                "-" if p50 is None else f"{p50:.0f} ms",
                "-" if p95 is None else f"{p95:.0f} ms",
            ]
        )
    widths = [max(len(line[column]) for line in rows) for column in range(len(header))]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in rows
    ]
    lines.extend(_notes(report))
    return lines


def _notes(report: BakeOff) -> list[str]:
    notes = []
    small = [row for row in report.rows if 0 < row.runs < SMALL_SAMPLE]
    if small:
        spans = ", ".join(
            f"{row.label} {wilson(row.passed, row.runs)[0]:.0%}–{wilson(row.passed, row.runs)[1]:.0%}"
            for row in small
        )
        notes.append(
            f"Confidence: few runs per provider (fewer than {SMALL_SAMPLE}); the 95% range of each pass rate is "
            f"{spans}. Overlapping ranges are not a difference: raise --repeat for a firmer answer."
        )
    if report.stopped:
        notes.append(f"Stopped early: {report.stopped}; the figures cover the runs made.")
    notes.extend(f"Broken: {result.broken}" for result in report.broken)
    return notes
