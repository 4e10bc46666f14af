"""What live telemetry and the stream side file cost an agent step (issue 30; docs/telemetry.md, docs/views.md).

Runs the shipped ``triage`` example (two agent steps, two model requests, each reply streamed in ~200 deltas)
against the loopback ``piw.testing.OpenAIStub`` in three homes: no telemetry (the baseline), ``[telemetry]`` with a
collector up (a loopback OTLP/HTTP receiver decoding the requests), and with the collector down (a closed port).
The four modes are interleaved run by run. Prints, beside the baseline:

- wall time per run (median of ``BENCH_RUNS``) and its difference from the baseline;
- the time the run's thread spends in telemetry per model request: building and queueing spans (the writer
  listener), plus waiting for the last spans when the run closes — the part a run can feel;
- the time it spends writing the stream side file per request (every agent run pays it), and per delta.

The target is ≤ 1 % of a step. The stub answers in milliseconds, so the figures are also given against a
1-second model step, which is closer to what a real model takes. Not a test: figures only.

    python bench/bench_telemetry.py            # BENCH_RUNS=30 by default
"""

from __future__ import annotations

import io
import os
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rich.console import Console  # noqa: E402

import piw.agent_steps.attempt as attempt_module  # noqa: E402
import piw.agent_steps.live_stream as live_stream  # noqa: E402
import piw.run.open_run as open_run  # noqa: E402
import piw.telemetry.live as live  # noqa: E402
from piw.agent_steps.factory import agent_executor_factory  # noqa: E402
from piw.run.runner import ForegroundOptions, start_run  # noqa: E402
from piw.testing import OpenAIStub, StubReply  # noqa: E402
from tests.support.otlp_receiver import OtlpReceiver  # noqa: E402

RUNS = int(os.environ.get("BENCH_RUNS", "30"))
REPLY = ("Thanks for the report! We can reproduce the crash on save and a fix is on its way. " * 9).strip()
SPENT: dict[str, float] = {"spans": 0.0, "flush": 0.0, "stream": 0.0}
CALLS: dict[str, int] = {"stream": 0}


def _timed(key: str, function: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            SPENT[key] += time.perf_counter() - started
            CALLS[key] = CALLS.get(key, 0) + 1

    return wrapper


def _instrument() -> None:
    live.LiveSpans.__call__ = _timed("spans", live.LiveSpans.__call__)  # type: ignore[method-assign]
    open_run.flush_live = _timed("flush", open_run.flush_live)  # type: ignore[assignment]
    live_stream.StreamListener.__call__ = _timed(  # type: ignore[method-assign]
        "stream", live_stream.StreamListener.__call__
    )


def respond(body: dict[str, Any]) -> StubReply:
    import re

    offered = [tool["function"]["name"] for tool in body.get("tools") or []]
    prompt = next(m["content"] for m in reversed(body["messages"]) if m["role"] == "user")
    if "workflow" in offered:
        step, attempt = re.findall(r"step (\S+), attempt ([0-9a-f]{32})", prompt)[-1]
        output = {"route": "bug", "reason": REPLY[:300]}
        return StubReply.tool(
            "workflow", {"action": "submit", "step": step, "attempt": attempt, "output": output}
        )
    return StubReply.text(REPLY)


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


MODES = ("baseline (neither)", "stream side file", "side file + collector up", "side file + collector down")


def _home(root: Path, name: str, stub: OpenAIStub, endpoint: str | None) -> Path:
    home = root / name.replace(" ", "-").replace("(", "").replace(")", "").replace("+", "and")
    home.mkdir()
    config = (
        f'default = "stub/stub-model"\n[providers.stub]\napi = "openai-completions"\n'
        f'base_url = "{stub.base_url}"\nmodels = ["stub-model"]\n'
    )
    if endpoint is not None:
        config += f'[telemetry]\notlp_endpoint = "{endpoint}"\n'
    (home / "config.toml").write_text(config)
    return home


def _one_run(home: Path, side_file: bool) -> tuple[float, float, int, dict[str, float]]:
    """Wall and CPU seconds of one run, its model requests, and what the instruments counted during it."""
    attempt_module.stream_listeners = (  # type: ignore[assignment]
        live_stream.stream_listeners if side_file else (lambda attempt: [])
    )
    os.environ["PIW_HOME"] = str(home)
    SPENT.update(spans=0.0, flush=0.0, stream=0.0)
    CALLS["stream"] = 0
    options = ForegroundOptions(
        agent_executor_factory=agent_executor_factory(home, Console(file=io.StringIO(), width=100))
    )
    started, cpu = time.perf_counter(), time.process_time()
    state = start_run("triage", home, {"text": "The app crashes when I save."}, None, options)
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    assert state.status == "completed", state.error
    requests = sum(int((step.usage or {}).get("requests", 0)) for step in state.steps)
    return wall, cpu, requests, {**SPENT, "deltas": float(CALLS["stream"])}


def _measure_all(stub: OpenAIStub, endpoints: dict[str, str | None]) -> dict[str, dict[str, float]]:
    """The modes interleaved run by run (a shared machine's load drifts), after one warm-up run each."""
    samples: dict[str, list[tuple[float, float, int, dict[str, float]]]] = {name: [] for name in MODES}
    with tempfile.TemporaryDirectory() as tmp:
        homes = {name: _home(Path(tmp), name, stub, endpoints[name]) for name in MODES}
        for number in range(RUNS + 1):
            for name in MODES:
                sample = _one_run(homes[name], side_file=name != MODES[0])
                if number:
                    samples[name].append(sample)
        live.close_exporters()
    figures = {}
    for name, runs in samples.items():
        requests = sum(r[2] for r in runs)
        figures[name] = {
            "wall": statistics.median(r[0] for r in runs),
            "cpu": statistics.median(r[1] for r in runs),
            "steps": 2,
            "requests": requests / len(runs),
            "spans": sum(r[3]["spans"] for r in runs) / requests,
            "flush": sum(r[3]["flush"] for r in runs) / requests,
            "deltas": sum(r[3]["deltas"] for r in runs) / requests,
        }
    return figures


def _pct(part: float, whole: float) -> str:
    return f"{100 * part / whole:6.2f} %"


def _write_cost() -> float:
    """Seconds per stream record, the side file's write alone (no agent loop, no other thread)."""
    from piw.store.live_stream import StreamFile

    with tempfile.TemporaryDirectory() as tmp:
        stream = StreamFile(Path(tmp))
        stream.write({"attemptId": "a" * 32, "nodeId": "say", "kind": "start"})
        record = {"attemptId": "a" * 32, "nodeId": "say", "kind": "text", "text": "abcd"}
        started = time.perf_counter()
        for _ in range(20_000):
            stream.write(record)
        stream.close()
        return (time.perf_counter() - started) / 20_000


def main() -> None:
    _instrument()
    with OpenAIStub() as stub, OtlpReceiver() as receiver:
        stub.respond = respond
        down = f"http://127.0.0.1:{_closed_port()}"
        endpoints = dict(zip(MODES, (None, None, receiver.endpoint, down), strict=True))
        figures = _measure_all(stub, endpoints)
        received = len(receiver.unique())
    base = figures["baseline (neither)"]
    step = base["wall"] / base["steps"]
    deltas = figures["stream side file"]["deltas"]
    print(
        f"triage x{RUNS} per mode against the loopback stub: {base['requests']:.0f} model requests per run,"
    )
    print(f"{deltas:.0f} stream records per request; a baseline stub step takes {step * 1000:.1f} ms wall")
    print(f"(the collector received {received} distinct spans)\n")
    print(f"{'mode':28} {'wall/run':>9} {'Δ wall':>9} {'cpu/run':>9} {'Δ cpu/step':>11} {'spans/request':>14}"
          f" {'of a stub step':>15} {'of a 1 s step':>14} {'close wait/run':>15}")  # fmt: skip
    for name, f in figures.items():
        cpu_delta = f["cpu"] - base["cpu"]
        spans, wait = f["spans"], f["flush"] * f["requests"]
        print(
            f"{name:28} {f['wall'] * 1000:7.1f}ms {(f['wall'] - base['wall']) * 1000:+7.1f}ms "
            f"{f['cpu'] * 1000:7.1f}ms {_pct(cpu_delta / f['steps'], step):>11} {spans * 1e6:11.0f} µs "
            f"{_pct(spans, step):>15} {_pct(spans, 1.0):>14} {wait * 1000:12.1f} ms"
        )
    print(
        "\n  spans/request: building and queueing spans on the run's thread, per model request (the per-request cost);"
    )
    print(
        "  close wait/run: once per run, the bounded wait for its last spans when it closes (none while the"
    )
    print("  collector is down); Δ cpu/step includes the exporter thread and, here, the receiver's decoding.")
    write = _write_cost()
    per_request = write * deltas
    print(
        f"\nstream side file, write alone: {write * 1e6:.1f} µs per record, {per_request * 1e6:.0f} µs per request "
        f"= {_pct(per_request, step).strip()} of a stub step, {_pct(per_request, 1.0).strip()} of a 1 s model step"
    )
    print("baselines: no telemetry and no side file (the first row); target ≤ 1 % of a step.")
    print("Δ columns compare medians on a shared machine: differences of a few ms are noise.")


if __name__ == "__main__":
    sys.exit(main())
