"""Providers end to end (acceptance tests 33–37) and the shipped ``triage`` example against the stub."""

from __future__ import annotations

import json
import socket
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest

from piw.config.settings import ProviderConfig, parse_config
from piw.errors import NeedsKey, ProviderError, ScriptExhausted
from piw.providers.base import ChatRequest, StepRef
from piw.providers.messages import UserMessage
from piw.providers.openai_compat import OpenAICompatProvider
from piw.providers.scripted import ScriptedProvider
from piw.providers.selection import ProviderSelection, select_provider
from piw.testing import OpenAIStub, StubReply, openai_stub
from tests.support.agent_harness import (
    active_ids,
    home,
    one_agent,
    only_run,
    piw_cli,
    sequence,
    start,
    start_configured,
    submit_reply,
    write_stub_config,
    write_workflow,
)
from tests.support.paths import REPO

__all__ = ["home", "openai_stub"]

TRIAGE = REPO / "workflows" / "examples" / "triage.workflow.py"
ASSISTANT = "agent(prompt='Answer.', expected_output=assistant_message())"


def _bundles(home: Path) -> list[Path]:
    runs = home / "runs"
    return sorted(p for p in runs.iterdir() if not p.name.startswith(".")) if runs.exists() else []


# ---- 33: configuration -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "needle"),
    [
        ("bogus = 1\n", "Unknown key 'bogus'"),
        (
            '[providers.local]\nbase_url = "http://127.0.0.1:1/v1"\nmodels = ["m"]\ntemperature = 0.2\n',
            "unknown key 'providers.local.temperature'",
        ),
        ("[agent]\nmax_turn = 3\n", "unknown key 'agent.max_turn'"),
        (
            '[providers.local]\nbase_url = "http://127.0.0.1:1/v1"\nmodels = [{ id = "m", prize = 1 }]\n',
            "unknown key",
        ),
    ],
)
def test_33_unknown_config_keys_fail_before_any_run(
    home: Path, tmp_path: Path, config: str, needle: str
) -> None:
    (home / "config.toml").write_text(config)
    result = piw_cli(home, "run", str(one_agent(tmp_path, ASSISTANT)), "--provider", "local")
    assert result.returncode == 2
    assert result.stderr.startswith("Error: ") and needle in result.stderr, result.stderr
    assert "config.toml" in result.stderr
    assert _bundles(home) == []


def test_33_unset_key_raises_needs_key_before_any_run(home: Path, tmp_path: Path) -> None:
    (home / "config.toml").write_text(
        textwrap.dedent("""
        default = "local/m"
        [providers.local]
        base_url = "http://127.0.0.1:9/v1"
        api_key = "$PIW_TEST_UNSET_KEY"
        models = ["m"]
        """)
    )
    result = piw_cli(home, "run", str(one_agent(tmp_path, ASSISTANT)))
    assert result.returncode != 0
    assert "PIW_TEST_UNSET_KEY" in result.stderr and result.stderr.startswith("Error: ")
    assert _bundles(home) == []  # one clear error, no run left behind

    settings = ProviderConfig(base_url="http://127.0.0.1:9/v1", api_key="$PIW_TEST_UNSET_KEY")
    with pytest.raises(NeedsKey, match="PIW_TEST_UNSET_KEY"):
        list(
            OpenAICompatProvider(ProviderSelection("local", "m", settings), env={}).stream(
                ChatRequest(model="m", messages=[UserMessage(content="hi")]), threading.Event()
            )
        )


def test_33_flags_beat_env_which_beat_default(home: Path, tmp_path: Path) -> None:
    replies = {name: [f"answer from {name}"] for name in ("alpha", "beta", "gamma")}
    config = ""
    for name, entries in replies.items():
        (home / f"{name}.json").write_text(json.dumps(entries))
        config += f'[providers.{name}]\napi = "scripted"\nscript = "{name}.json"\n'
    (home / "config.toml").write_text('default = "alpha"\n' + config)
    flow = one_agent(tmp_path, ASSISTANT)

    def answer(*args: str, env: dict[str, str] | None = None) -> str:
        result = piw_cli(home, "run", str(flow), "--json", *args, env=env)
        assert result.returncode == 0, result.stderr
        return str(json.loads(result.stdout)["finalOutput"])

    assert answer() == "answer from alpha"
    assert answer(env={"PIW_PROVIDER": "beta"}) == "answer from beta"
    assert answer("--provider", "gamma", env={"PIW_PROVIDER": "beta"}) == "answer from gamma"
    assert answer("--model", "gamma/scripted", env={"PIW_PROVIDER": "beta"}) == "answer from gamma"

    parsed = parse_config(
        {"default": "alpha/m1", "providers": {"alpha": {"models": ["m1", "m2"]}, "beta": {"models": ["b1"]}}}
    )
    assert select_provider(parsed, env={}).model == "m1"
    assert select_provider(parsed, env={"PIW_MODEL": "m2"}).model == "m2"
    assert select_provider(parsed, model_flag="beta/b1", env={"PIW_MODEL": "m2"}).provider == "beta"
    with pytest.raises(ProviderError, match=r"Unknown provider 'nope'.*alpha, beta"):
        select_provider(parsed, "nope", env={})


# ---- 34: the scripted provider runs out loudly -------------------------------------------------------------


def test_34_script_exhausted_on_an_extra_request(home: Path, tmp_path: Path) -> None:
    provider = ScriptedProvider(["only one"])
    request = ChatRequest(model="scripted", step=StepRef(run_id="r", node_id="step", attempt_id="a" * 32))
    list(provider.stream(request, threading.Event()))
    with pytest.raises(ScriptExhausted, match=r"request 2 \(node step\)"):
        list(provider.stream(request, threading.Event()))

    script = tmp_path / "r.json"
    script.write_text(json.dumps([{"text": "no submit here"}]))
    result = piw_cli(
        home,
        "run",
        str(one_agent(tmp_path, "agent(prompt='X.')")),
        "--provider",
        "scripted",
        "--script",
        str(script),
    )
    # running out mid-run is a recorded step failure (the run ends failed), not a crash halfway
    assert result.returncode == 1, result.stderr
    assert "↻ wf › step · reminder" in result.stdout
    failed = only_run(home).terminal("step")["payload"]
    assert failed["outcome"] == "failed"
    assert failed["error"].startswith("The scripted provider has no reply for request 2 (node step)")
    assert only_run(home).state_json["status"] == "failed"


def test_34_replies_beside_the_workflow_are_the_offline_default(home: Path) -> None:
    result = piw_cli(home, "run", str(TRIAGE), "--provider", "scripted")
    assert result.returncode == 0, result.stderr
    assert "Thanks for the report!" in result.stdout
    run = only_run(home)
    assert run.terminal("classify")["payload"]["output"] == {
        "route": "bug",
        "reason": "Saving crashes the app.",
    }
    missing = piw_cli(home, "run", str(TRIAGE), "--provider", "scripted", "--script", str(home / "nope.json"))
    assert missing.returncode == 2 and "does not exist" in missing.stderr


# ---- 35: cassettes -----------------------------------------------------------------------------------------


def _record_and_replay(
    home: Path, flow: Path, stub: OpenAIStub, monkeypatch: pytest.MonkeyPatch, replies: Any, requests: int
) -> None:
    secret, token = "sk-test-SECRET-0123456789", "tok-SECRET-abcdef"
    monkeypatch.setenv("PIW_TEST_KEY", secret)
    monkeypatch.setenv("PIW_TEST_TOKEN", token)
    write_stub_config(
        home,
        stub,
        model='models = ["m"]\napi_key = "$PIW_TEST_KEY"\nheaders = { "X-Token" = "$PIW_TEST_TOKEN" }',
    )
    stub.respond = replies

    monkeypatch.setenv("PIW_PROVIDER_CASSETTE", "record")
    recorded = start_configured(home, flow)
    assert stub.request_count == requests
    assert stub.request_headers[0]["authorization"] == f"Bearer {secret}"
    assert stub.request_headers[0]["x-token"] == token
    cassette = home / "cassettes" / "stub.jsonl"
    text = cassette.read_text()
    assert len(text.splitlines()) == requests
    assert secret not in text and token not in text
    assert recorded.state is not None and recorded.state.status == "completed"

    monkeypatch.setenv("PIW_PROVIDER_CASSETTE", "replay")
    monkeypatch.delenv("PIW_TEST_KEY")  # replay needs no key
    replayed = start_configured(home, flow)
    assert stub.request_count == requests  # not one more
    assert replayed.state is not None and replayed.state.status == "completed"
    assert replayed.state.outputs == recorded.state.outputs
    assert replayed.run_id != recorded.run_id


def test_35_record_then_replay_without_the_stub(
    home: Path, tmp_path: Path, openai_stub: OpenAIStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One step, with a reminder in between: the replayed submission carries the new attempt id."""
    replies = sequence(StubReply.text("Hmm."), submit_reply({"route": "bug", "reason": "crash"}))
    flow = one_agent(tmp_path, "agent(prompt='Classify.')")
    _record_and_replay(home, flow, openai_stub, monkeypatch, replies, 2)


def test_35_replay_of_a_multi_step_run(
    home: Path, tmp_path: Path, openai_stub: OpenAIStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    replies = sequence(submit_reply({"route": "bug", "reason": "crash"}), StubReply.text("Thanks!"))
    _record_and_replay(home, TRIAGE, openai_stub, monkeypatch, replies, 2)


def test_35_replay_after_the_model_published_an_update(
    home: Path, tmp_path: Path, openai_stub: OpenAIStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The update receipt (fresh update id and time in every run) reaches the model, yet the replay matches."""

    def update(body: dict[str, Any]) -> StubReply:
        step, attempt = active_ids(body)
        data = {"schema": "pi-workflows.progress.v1", "status": "running", "label": "Reading"}
        arguments = {
            "action": "update",
            "step": step,
            "attempt": attempt,
            "update": {"type": "progress", "key": "read", "data": data},
        }
        return StubReply.tool("workflow", arguments, call_id="call_update")

    replies = sequence(update, submit_reply({"route": "bug", "reason": "crash"}))
    flow = one_agent(tmp_path, "agent(prompt='Classify.')")
    _record_and_replay(home, flow, openai_stub, monkeypatch, replies, 2)


# ---- 36: the request guard ---------------------------------------------------------------------------------


def test_36_non_loopback_url_is_refused_before_any_socket(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    attempts: list[Any] = []
    real_connect = socket.socket.connect

    def spy(self: socket.socket, address: Any) -> Any:
        attempts.append(address)
        return real_connect(self, address)

    monkeypatch.setattr(socket.socket, "connect", spy)

    def lookup(*args: Any, **kwargs: Any) -> Any:
        attempts.append(args)
        return []

    monkeypatch.setattr(socket, "getaddrinfo", lookup)
    (home / "config.toml").write_text(
        'default = "far/m"\n[providers.far]\nbase_url = "http://10.255.255.1/v1"\nmodels = ["m"]\n'
    )
    flow = one_agent(tmp_path, ASSISTANT)
    with pytest.raises(ProviderError, match="Model requests are disabled"):
        start_configured(home, flow)
    assert _bundles(home) == []
    # the adapter itself refuses too, when reached directly: the step fails with the guard's message
    far = OpenAICompatProvider(
        ProviderSelection("far", "m", ProviderConfig(base_url="http://10.255.255.1/v1"))
    )
    run = start(home, flow, far)
    assert "refusing non-loopback base URL" in run.terminal("step")["payload"]["error"]
    assert attempts == []


# ---- 37: usage ---------------------------------------------------------------------------------------------


def _usage(prompt: int, completion: int, cached: int = 0) -> dict[str, Any]:
    usage: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    if cached:
        usage["prompt_tokens_details"] = {"cached_tokens": cached}
    return usage


def test_37_usage_per_turn_step_and_run_with_configured_prices(
    home: Path, tmp_path: Path, openai_stub: OpenAIStub
) -> None:
    write_stub_config(
        home,
        openai_stub,
        model='models = [{ id = "m", cost = { input = 2.0, output = 10.0, cache_read = 0.5 } }]',
    )
    openai_stub.respond = sequence(
        StubReply.text("Let me think.", usage=_usage(1000, 100)),  # settles without submitting → reminder
        lambda body: StubReply.tool(
            "workflow",
            {**_submit(body), "output": {"route": "feature", "reason": "r"}},
            usage=_usage(1500, 50, cached=1000),
        ),
    )
    run = start_configured(home, TRIAGE)
    turns = [m["usage"] for m in run.assistants()]
    assert turns == [
        {"input": 1000, "output": 100, "cacheRead": 0, "cacheWrite": 0, "cost": pytest.approx(0.003)},
        {"input": 500, "output": 50, "cacheRead": 1000, "cacheWrite": 0, "cost": pytest.approx(0.0020)},
    ]
    step = run.terminal("classify")["payload"]["usage"]
    assert step == {
        "requests": 2,
        "input": 1500,
        "output": 150,
        "cacheRead": 1000,
        "cacheWrite": 0,
        "cost": pytest.approx(0.005),
    }
    assert run.state is not None and run.state.usage == step  # the compute node adds nothing
    inspected = piw_cli(home, "inspect", run.run_id, "--json")
    assert json.loads(inspected.stdout)["usage"] == step
    assert run.state_json["usage"] == step
    assert run.state_json["steps"][0]["usage"] == step


def _submit(body: dict[str, Any]) -> dict[str, Any]:
    step, attempt = active_ids(body)
    return {"action": "submit", "step": step, "attempt": attempt}


def test_37_one_unknown_cost_makes_the_sum_unknown(home: Path, tmp_path: Path) -> None:
    flow = write_workflow(
        tmp_path,
        "costs",
        """
        from piw import agent, assistant_message, define_workflow, edge
        workflow = define_workflow(
            name="costs", start_at="a",
            nodes={"a": agent(prompt="A.", expected_output=assistant_message()),
                   "b": agent(prompt="B.", expected_output=assistant_message())},
            edges=[edge("a", "b")],
        )
        """,
    )
    known = {"input": 10, "output": 5, "cost": 0.25}
    provider = ScriptedProvider(
        {
            "a": [{"text": "first", "usage": known}],
            "b": [{"text": "second", "usage": {"input": 7, "output": 3, "cost": None}}],
        }
    )
    run = start(home, flow, provider)
    assert run.terminal("a")["payload"]["usage"] == {
        "requests": 1,
        "input": 10,
        "output": 5,
        "cacheRead": 0,
        "cacheWrite": 0,
        "cost": 0.25,
    }
    b = run.terminal("b")["payload"]["usage"]
    assert "cost" not in b and b["input"] == 7
    assert run.state is not None and run.state.usage is not None
    assert run.state.usage["input"] == 17 and run.state.usage["requests"] == 2
    assert "cost" not in run.state.usage  # one unknown part: the sum is unknown, never too low

    all_known = ScriptedProvider({"a": [{"text": "x", "usage": known}], "b": [{"text": "y", "usage": known}]})
    priced = start(home, flow, all_known)
    assert priced.state is not None and priced.state.usage is not None
    assert priced.state.usage["cost"] == pytest.approx(0.5)


def test_37_retried_requests_count_and_usage_survives_failure(home: Path, tmp_path: Path) -> None:
    provider = ScriptedProvider(
        [
            {
                "error": "overloaded",
                "status": 503,
                "retryAfter": 0,
                "usage": {"input": 1, "output": 0, "cost": 0.0},
            },
            {"text": "ok", "usage": {"input": 4, "output": 2, "cost": 0.0}},
        ]
    )
    run = start(home, one_agent(tmp_path, ASSISTANT), provider)
    assert run.terminal("step")["payload"]["usage"] == {
        "requests": 2,
        "input": 5,
        "output": 2,
        "cacheRead": 0,
        "cacheWrite": 0,
        "cost": 0.0,
    }
    failing = ScriptedProvider([{"text": "", "usage": {"input": 9, "output": 0, "cost": 0.0}}])
    failed = start(home, one_agent(tmp_path / "f", ASSISTANT), failing)
    assert (
        failed.terminal("step")["payload"]["usage"]["input"] == 9
    )  # a failed attempt still reports its cost


# ---- the shipped example against the stub: the figures for the release note --------------------------------


def test_triage_against_the_stub(home: Path, openai_stub: OpenAIStub) -> None:
    write_stub_config(home, openai_stub)
    openai_stub.respond = sequence(
        submit_reply({"route": "bug", "reason": "Saving crashes the app."}),
        StubReply.text("Thanks for the report! We can reproduce the crash on save and are working on a fix."),
    )
    result = piw_cli(
        home, "run", "triage", "--json", cwd=REPO / "workflows" / "examples", env={"PIW_HOME": str(home)}
    )
    if result.returncode != 0 and "not found" in result.stderr.lower():
        result = piw_cli(home, "run", str(TRIAGE), "--json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["status"] == "completed"
    assert openai_stub.request_count == 2  # one per step: first-try submit costs exactly one request
    assert openai_stub.tool_names == [["workflow"], []]
    run = only_run(home)
    classify = run.terminal("classify")["payload"]["usage"]
    bug = run.terminal("bug")["payload"]["usage"]
    assert classify["requests"] == 1 and bug["requests"] == 1
    assert classify["input"] == 10 and bug["input"] == 10  # the stub reports 10 prompt tokens per request
    assert "cost" not in classify  # no prices configured: cost unknown, omitted
    total = {k: classify[k] + bug[k] for k in ("requests", "input", "output", "cacheRead", "cacheWrite")}
    inspected = json.loads(piw_cli(home, "inspect", run.run_id, "--json").stdout)
    assert inspected["usage"] == total
    print(f"\nFIGURES classify={classify} bug={bug} run={inspected['usage']}")
