"""The provider ``piw test`` replays a case with: each agent step is answered with its recorded replies.

Steps are matched by node id and visit order, like ``piw fork --provider replay`` (:mod:`piw.providers.recorded`,
whose request readers this shares). A prompt that differs from the recorded one is *drift*: it is noted with a
unified diff and the recorded reply is still served, so the rest of the run is graded too. A step with no
recorded reply left fails the step and is noted as exhausted (the case is then broken, ``docs/testing.md``).
No request leaves the machine.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from piw.providers.base import ChatRequest, StepRef
from piw.providers.messages import AssistantReply
from piw.providers.recorded import AnswersFromRecord, replies_so_far, retarget, step_prompt

ATTEMPT_PLACEHOLDER = "<attemptId>"


@dataclass(frozen=True)
class ReplayStep:
    """One recorded agent step visit: its node, its prompt (placeholders in), its replies."""

    node: str
    prompt: str
    replies: Sequence[AssistantReply]


@dataclass(frozen=True)
class PromptDrift:
    """A step was sent a prompt other than the recorded one."""

    node: str
    visit: int
    diff: str


@dataclass
class ReplayLog:
    """What a replay noticed: drifted prompts and steps the recording had no reply for."""

    drift: list[PromptDrift] = field(default_factory=list)
    exhausted: list[str] = field(default_factory=list)


class CaseReplyProvider(AnswersFromRecord):
    """Answers a case's agent steps from its ``replies.ndjson``.

    ``specialize(prompt, step)`` puts this run's paths and ids back into a recorded prompt before comparing.
    """

    def __init__(
        self, steps: Sequence[ReplayStep], specialize: Callable[[str, StepRef], str] | None = None
    ) -> None:
        super().__init__()
        self.log = ReplayLog()
        self._steps = list(steps)
        self._specialize = specialize or (lambda text, step: text)
        self._assigned: dict[str, int] = {}
        self._used: set[int] = set()
        self._visits: dict[str, int] = {}

    def _reply(self, request: ChatRequest) -> tuple[AssistantReply | None, str | None]:
        step = request.step
        if step is None:
            return None, "A test case answers workflow steps only; this request names no step."
        index = self._assigned.get(step.attempt_id)
        if index is None:
            index = self._assign(request, step)
            if index is None:
                visit = self._visits.get(step.node_id, 0) + 1
                problem = f"node {step.node_id}: no recorded reply left for visit {visit} of this step"
                self.log.exhausted.append(problem)
                return None, f"The test case has {problem}."
        recorded = self._steps[index]
        number = replies_so_far(request, step)
        if number >= len(recorded.replies):
            problem = (
                f"node {step.node_id}: the recording has {len(recorded.replies)} replies for this step and it "
                f"asked for reply {number + 1}"
            )
            self.log.exhausted.append(problem)
            return None, f"The test case's {problem}."
        return retarget(recorded.replies[number], step), None

    def _assign(self, request: ChatRequest, step: StepRef) -> int | None:
        candidates = [
            index
            for index, recorded in enumerate(self._steps)
            if recorded.node == step.node_id and index not in self._used
        ]
        if not candidates:
            return None
        index = candidates[0]
        self._used.add(index)
        self._assigned[step.attempt_id] = index
        visit = self._visits[step.node_id] = self._visits.get(step.node_id, 0) + 1
        recorded = self._specialize(self._steps[index].prompt, step).replace(
            ATTEMPT_PLACEHOLDER, step.attempt_id
        )
        now = step_prompt(request, step)
        if recorded != now:
            diff = difflib.unified_diff(
                _lines(recorded, step.attempt_id),
                _lines(now, step.attempt_id),
                f"recorded prompt of {step.node_id}",
                f"prompt of {step.node_id} now",
                lineterm="",
            )
            self.log.drift.append(PromptDrift(step.node_id, visit, "\n".join(diff)))
        return index


def _lines(prompt: str, attempt_id: str) -> list[str]:
    """A prompt as diffed: the attempt id shown as its placeholder, so only real changes appear."""
    return prompt.replace(attempt_id, ATTEMPT_PLACEHOLDER).splitlines()
