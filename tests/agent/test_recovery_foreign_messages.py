"""An assistant step adopts, after a crash, only the reply to its own prompt (issue 26 item 12).

The reply settled in the conversation, then the process died before its receipt. Normally ``piw resume`` adopts that
reply without a new request (``test_14_crash_after_message_end_adopts_the_recorded_reply``). But when anything a user
or another step said follows the reply in the session — a notification, another step's prompt, a user message — the
reply is no longer the last word of this step's exchange, so it is not adopted: the step is asked again (one new
request) and its output is the new reply.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from piw.agent_steps.events import MessageEnd
from piw.providers.messages import AssistantReply
from piw.providers.scripted import ScriptedProvider
from piw.store.session import SessionLog
from tests.support.agent_harness import home, make_executor, one_agent, resume, start_crashing

__all__ = ["home"]  # a fixture used by name

ASSISTANT = "agent(prompt='Answer the user.', expected_output=assistant_message())"


class Crash(BaseException):
    """Stands in for ``kill -9``: nothing in piw catches it."""


def _crash_after_the_reply(event: Any) -> None:
    if isinstance(event, MessageEnd) and isinstance(event.message, AssistantReply):
        raise Crash


def _notification(run_id: str) -> dict[str, Any]:
    return {
        "role": "custom",
        "customType": "pi-workflows-notification",
        "content": "Deploy finished.",
        "details": {"notificationId": "ntf_" + "0" * 32, "notificationIndex": 1, "kind": "progress"},
    }


def _other_step_prompt(run_id: str) -> dict[str, Any]:
    contract = {"runId": run_id, "nodeId": "elsewhere", "attemptId": "f" * 32, "workflowName": "one",
                "completion": "submit"}  # fmt: skip
    return {
        "role": "custom",
        "customType": "pi-workflows-agent-step",
        "content": "Another step's prompt.",
        "details": {"schema": "pi-workflows.agent-step-message.v1", "kind": "step", "contract": contract},
    }


def _user_message(run_id: str) -> dict[str, Any]:
    return {"role": "user", "content": "Actually, never mind.", "timestamp": 0}


@pytest.mark.parametrize("foreign", [_notification, _other_step_prompt, _user_message],
                         ids=["notification", "another-steps-prompt", "user-message"])  # fmt: skip
def test_a_reply_followed_by_an_unrelated_message_is_not_adopted(
    home: Path, tmp_path: Path, foreign: Any
) -> None:
    flow = one_agent(tmp_path, ASSISTANT)
    crashed = start_crashing(
        home,
        flow,
        make_executor(ScriptedProvider(["Recorded reply."]), listeners=[_crash_after_the_reply]),
        Crash,
    )
    assert crashed.assistants()[-1]["content"][0]["text"] == "Recorded reply."
    assert not crashed.of_type("node_finished")
    attempt = crashed.of_type("agent_prompt_sent")[0]["attemptId"]
    log = SessionLog(crashed.bundle / "session" / "entries.ndjson", "effects")
    log.append(foreign(crashed.run_id))
    log.close()

    later = ScriptedProvider(["Asked again."])
    run = resume(home, crashed.run_id, later)
    assert len(later.requests) == 1  # the step was retried: the recorded reply was not adopted
    finished = run.terminal("step")
    assert finished["attemptId"] == attempt and finished["payload"]["output"] == "Asked again."
    (receipt,) = run.of_type("assistant_completion_recorded")
    assert receipt["payload"]["adopted"] is False
    assert [sent["payload"]["deliveryKind"] for sent in run.of_type("agent_prompt_sent")] == [
        "step",
        "resume",
    ]


def test_a_reply_with_nothing_after_it_is_still_adopted(home: Path, tmp_path: Path) -> None:
    """The control case: the same crash with no message after the reply adopts it, with no request."""
    flow = one_agent(tmp_path, ASSISTANT)
    crashed = start_crashing(
        home,
        flow,
        make_executor(ScriptedProvider(["Recorded reply."]), listeners=[_crash_after_the_reply]),
        Crash,
    )
    later = ScriptedProvider([])
    run = resume(home, crashed.run_id, later)
    assert later.requests == []
    assert run.terminal("step")["payload"]["output"] == "Recorded reply."
    (receipt,) = run.of_type("assistant_completion_recorded")
    assert receipt["payload"]["adopted"] is True
