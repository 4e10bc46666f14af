"""A provider's shared rate limit (``docs/rate-limits.md``): it holds across parallel runs, which are separate
``piw`` processes, and a ``429`` with ``Retry-After`` pauses every caller, not only the one that got it.

The runs talk real HTTP to the loopback stub, which records how many requests it served at once and when each
arrived.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from piw.testing import OpenAIStub, StubReply
from tests.support.agent_harness import one_agent, submit_args, write_stub_config
from tests.support.cli import Cli

AGENT = "agent(prompt='Answer.', expected_output='a short answer')"


def _limit(cli: Cli, stub: OpenAIStub, limit: str) -> None:
    write_stub_config(cli.home, stub)
    with (cli.home / "config.toml").open("a", encoding="utf-8") as handle:
        handle.write(f"rate_limit = {{ {limit} }}\n")


def _run_parallel(cli: Cli, flow: Path, count: int, start_gap: float = 0.0) -> list[dict[str, Any]]:
    processes = []
    for _ in range(count):
        processes.append(cli.popen("run", str(flow), "--json"))
        time.sleep(start_gap)
    results = []
    for process in processes:
        out, err = process.communicate(timeout=120)
        assert process.returncode == 0, err
        results.append(json.loads(out))
    return results


@pytest.mark.long
def test_a_concurrency_limit_of_2_holds_across_3_parallel_runs(cli: Cli, tmp_path: Path) -> None:
    with OpenAIStub() as stub:
        three_at_once = threading.Event()

        def respond(body: dict[str, Any]) -> StubReply:
            # Hold each request until a third one is in flight (or a while has passed): without the shared
            # limit the three runs would all be here at once.
            if stub.in_flight >= 3:
                three_at_once.set()
            three_at_once.wait(timeout=1.5)
            return StubReply.tool("workflow", submit_args(body, "done"))

        stub.respond = respond
        _limit(cli, stub, "concurrency = 2")
        results = _run_parallel(cli, one_agent(tmp_path, AGENT), 3)
        assert [result["status"] for result in results] == ["completed"] * 3
        assert stub.request_count == 3
        assert stub.max_in_flight == 2  # never 3
        assert not three_at_once.is_set()
    shown = cli.json("providers")
    limit = next(row for row in shown if row["name"] == "stub")["rateLimit"]
    assert limit["concurrency"] == 2 and limit["state"]["inFlight"] == 0
    assert "rate limit stub: 2 at once · now 0 in flight" in cli("providers").stdout


@pytest.mark.long
def test_a_429_with_retry_after_pauses_every_caller(cli: Cli, tmp_path: Path) -> None:
    pause_s = 3
    arrivals: list[float] = []
    rejected_at: list[float] = []
    with OpenAIStub() as stub:

        def respond(body: dict[str, Any]) -> StubReply:
            arrivals.append(time.monotonic())
            if not rejected_at:
                rejected_at.append(time.monotonic())
                return StubReply.http_error(429, retry_after=str(pause_s), message="slow down")
            return StubReply.tool("workflow", submit_args(body, "done"))

        stub.respond = respond
        _limit(cli, stub, "requests_per_minute = 600")
        flow = one_agent(tmp_path, AGENT)
        first = cli.popen("run", str(flow), "--json")
        deadline = time.monotonic() + 60
        while not rejected_at:
            assert time.monotonic() < deadline and first.poll() is None, "the first request never arrived"
            time.sleep(0.02)
        paused = cli.json("providers")
        state = next(row for row in paused if row["name"] == "stub")["rateLimit"]["state"]
        assert state["pausedForMs"] and "slow down" in state["pauseReason"]
        others = _run_parallel(cli, flow, 2)  # started during the pause: they wait for it too
        out, err = first.communicate(timeout=120)
        assert first.returncode == 0, err
        assert [r["status"] for r in [json.loads(out), *others]] == ["completed"] * 3
    assert len(arrivals) == 4  # the rejected request, its retry, and one for each other run
    # every request after the 429 (the retry and both other runs) came once the pause was over
    assert all(at - rejected_at[0] >= pause_s - 0.25 for at in arrivals[1:])


def test_rate_limit_keys_are_checked_at_config_load(cli: Cli, tmp_path: Path) -> None:
    with OpenAIStub() as stub:
        _limit(cli, stub, "requests_per_minut = 5")
        done = cli("providers")
    assert done.returncode == 2 and "requests_per_minut" in done.stderr and done.stderr.count("\n") == 1
