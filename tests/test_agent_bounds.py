"""What keeps weak models' steps bounded (``agent-steps.md`` §3–§4, acceptance tests 41–46).

Every test here talks to the real ``openai-completions`` adapter through the loopback stub and asserts on the
requests the stub received and on what the run left on disk.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "agent"))

from agent_harness import home, one_agent, start

from piw.agent import loop as agent_loop
from piw.testing import OpenAIStub, StubReply, openai_stub

__all__ = ["home", "openai_stub"]

ASSISTANT = "agent(prompt='Answer the user.', expected_output=assistant_message())"


@pytest.fixture
def no_back_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """Retries go ahead at once: the tests count requests, not seconds."""
    monkeypatch.setattr(agent_loop, "RETRY_DELAYS_S", (0.0, 0.0, 0.0))


# ---- 45: end of stream -----------------------------------------------------------------------------------


def test_45_a_stream_without_finish_reason_is_retried_and_never_output(
    home: Path, tmp_path: Path, openai_stub: OpenAIStub, no_back_off: None
) -> None:
    openai_stub.respond = [
        StubReply.text("", finish_reason=None, end_marker=False),
        StubReply.text("The whole answer."),
    ]
    run = start(home, one_agent(tmp_path, ASSISTANT), openai_stub.provider())
    assert openai_stub.request_count == 2
    assert run.terminal("step")["payload"]["output"] == "The whole answer."
    first, second = run.assistants()
    assert first["retried"] is True and first["stopReason"] == "error"
    assert "without a finish reason" in first["errorMessage"]
    assert second["stopReason"] == "stop"


def test_45_a_stream_cut_after_text_fails_the_step_and_keeps_no_output(
    home: Path, tmp_path: Path, openai_stub: OpenAIStub, no_back_off: None
) -> None:
    openai_stub.respond = [StubReply.text("Half of the ans", finish_reason=None, end_marker=False)]
    run = start(home, one_agent(tmp_path, ASSISTANT), openai_stub.provider())
    assert openai_stub.request_count == 1  # the text was shown: a retry would show a second answer
    failed = run.terminal("step")
    assert failed["type"] == "node_failed"
    assert "output" not in failed["payload"]
    assert "without a finish reason" in failed["payload"]["error"]
    assert not run.of_type("assistant_completion_recorded")
    assert run.state is not None and run.state.status == "failed"


def test_45_an_unknown_finish_reason_is_no_reply(
    home: Path, tmp_path: Path, openai_stub: OpenAIStub, no_back_off: None
) -> None:
    openai_stub.respond = [StubReply.text("", finish_reason="eaten_by_proxy"), StubReply.text("Answer.")]
    run = start(home, one_agent(tmp_path, ASSISTANT), openai_stub.provider())
    assert openai_stub.request_count == 2
    assert "unknown finish reason 'eaten_by_proxy'" in run.assistants()[0]["errorMessage"]
    assert run.terminal("step")["payload"]["output"] == "Answer."
