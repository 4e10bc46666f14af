"""The human-decision DSL: choices, text inputs, the structured request and the timeout policy.

A ``human_decision`` gate is answered only by a person (the terminal prompt, ``piw decide``, ``piw answer``) or by
its declared timeout policy, never by a model: nothing here is reachable from the ``workflow`` tool. The values
are checked when the file loads (static parts) or when the gate opens (parts computed from the context), and an
answer is checked against them before anything is recorded (:func:`check_answer`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeAlias

from piw.errors import DefinitionError

if TYPE_CHECKING:
    from piw.workflow.context import NodeContext
    from piw.workflow.decision_request import DecisionRequest

CHOICE_ID_PATTERN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")
INPUT_NAME_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
RESERVED_INPUT_NAMES = frozenset({"choice", "provenance"})
MAX_TEXT_INPUT = 100_000
MAX_TIMEOUT_MINUTES = 366 * 24 * 60


@dataclass(frozen=True)
class TextInput:
    """A free-text field a person fills in with a choice (``replan`` → ``instructions``)."""

    name: str
    prompt: str
    min_length: int = 1
    max_length: int = 4_000
    required: bool = True

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "prompt": self.prompt,
            "minLength": self.min_length,
            "maxLength": self.max_length,
            "required": self.required,
        }


@dataclass(frozen=True)
class Choice:
    """One answer a person can give: an id (what edges route on), a label, optional text inputs."""

    id: str
    label: str
    inputs: tuple[TextInput, ...] = ()

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"id": self.id, "label": self.label}
        if self.inputs:
            data["inputs"] = [item.to_json() for item in self.inputs]
        return data


@dataclass(frozen=True)
class TimeoutPolicy:
    """After ``after_minutes`` without an answer, the gate is answered ``choice`` with provenance ``timeout``."""

    after_minutes: float
    choice: str

    def to_json(self) -> dict[str, Any]:
        minutes: float | int = (
            int(self.after_minutes) if self.after_minutes.is_integer() else self.after_minutes
        )
        return {"afterMinutes": minutes, "choice": self.choice}


def text_input(
    name: str, *, prompt: str, min_length: int = 1, max_length: int = 4_000, required: bool = True
) -> TextInput:
    """A text field of a choice; ``required`` text must be non-blank and within the length limits."""
    if not isinstance(name, str) or not INPUT_NAME_PATTERN.fullmatch(name):
        raise DefinitionError(f"text_input name {name!r} must match [A-Za-z_][A-Za-z0-9_]*")
    if name in RESERVED_INPUT_NAMES:
        raise DefinitionError(
            f"text_input name {name!r} is reserved (the answer has 'choice' and 'provenance')"
        )
    if not isinstance(prompt, str) or not prompt.strip() or len(prompt) > 500:
        raise DefinitionError(
            f"text_input {name!r}: prompt must be a non-blank string of at most 500 characters"
        )
    for label, value in (("min_length", min_length), ("max_length", max_length)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise DefinitionError(f"text_input {name!r}: {label} must be an int >= 0")
    if not 1 <= max_length <= MAX_TEXT_INPUT or min_length > max_length:
        raise DefinitionError(
            f"text_input {name!r}: need min_length <= max_length <= {MAX_TEXT_INPUT:,} and max_length >= 1"
        )
    if required and min_length < 1:
        raise DefinitionError(f"text_input {name!r}: a required input needs min_length >= 1")
    if not isinstance(required, bool):
        raise DefinitionError(f"text_input {name!r}: required must be True or False")
    return TextInput(name, prompt, min_length, max_length, required)


def choice(id: str, label: str | None = None, *, inputs: Sequence[TextInput] = ()) -> Choice:
    """A choice of a ``human_decision``: ``choice("replan", "Replan", inputs=[text_input(...)])``."""
    if not isinstance(id, str) or not CHOICE_ID_PATTERN.fullmatch(id):
        raise DefinitionError(
            f"choice id {id!r} must match [A-Za-z0-9_][A-Za-z0-9_.-]* (at most 64 characters)"
        )
    shown = id if label is None else label
    if not isinstance(shown, str) or not shown.strip() or len(shown) > 200:
        raise DefinitionError(f"choice {id!r}: label must be a non-blank string of at most 200 characters")
    fields = tuple(inputs)
    if not all(isinstance(item, TextInput) for item in fields):
        raise DefinitionError(f"choice {id!r}: inputs must be text_input(...) values")
    names = [item.name for item in fields]
    if len(set(names)) != len(names):
        raise DefinitionError(f"choice {id!r}: input names must be unique")
    return Choice(id, shown, fields)


def timeout_after(minutes: float, choice: str) -> TimeoutPolicy:
    """``on_timeout=timeout_after(10, "continue")``: answer ``continue`` 10 minutes after the gate opens."""
    if isinstance(minutes, bool) or not isinstance(minutes, int | float) or not math.isfinite(minutes):
        raise DefinitionError(f"on_timeout minutes must be a number, got {minutes!r}")
    if not 0 < minutes <= MAX_TIMEOUT_MINUTES:
        raise DefinitionError(
            f"on_timeout minutes must be > 0 and at most {MAX_TIMEOUT_MINUTES:,}, got {minutes!r}"
        )
    if not isinstance(choice, str) or not choice:
        raise DefinitionError("on_timeout choice must name one of the gate's choices")
    return TimeoutPolicy(float(minutes), choice)


def as_choices(choices: Sequence[str | Choice]) -> tuple[Choice, ...]:
    """Normalise ``["yes", "no"]`` or ``choice(...)`` values; ids must be unique."""
    if isinstance(choices, str | bytes) or not isinstance(choices, Sequence):
        raise DefinitionError(
            "human_decision choices must be a non-empty list of strings or choice(...) values"
        )
    out: list[Choice] = []
    for item in choices:
        if isinstance(item, Choice):
            out.append(item)
        elif isinstance(item, str) and item:
            out.append(choice(item))
        else:
            raise DefinitionError(
                "human_decision choices must be a non-empty list of strings or choice(...) values"
            )
    if not out:
        raise DefinitionError(
            "human_decision choices must be a non-empty list of strings or choice(...) values"
        )
    ids = [item.id for item in out]
    if len(set(ids)) != len(ids):
        raise DefinitionError(f"human_decision choices must have unique ids, got {ids}")
    return tuple(out)


def as_timeout(value: Any, choices: Sequence[Choice], where: str = "human_decision") -> TimeoutPolicy | None:
    """``None``, a ``timeout_after(...)`` value, or ``{"after_minutes"|"after_s": N, "choice": C}``, checked."""
    if value is None:
        return None
    if isinstance(value, TimeoutPolicy):
        policy = value
    elif isinstance(value, Mapping):
        keys = set(value)
        unknown = keys - {"after_minutes", "after_s", "choice"}
        if unknown or len(keys & {"after_minutes", "after_s"}) != 1 or "choice" not in keys:
            raise DefinitionError(
                f"{where} on_timeout must be {{'after_minutes': N, 'choice': C}} (or 'after_s'), "
                f"got keys {sorted(keys)}"
            )
        minutes = (
            value["after_minutes"] if "after_minutes" in value else _seconds_to_minutes(value["after_s"])
        )
        policy = timeout_after(minutes, value["choice"])
    else:
        raise DefinitionError(
            f"{where} on_timeout must be timeout_after(minutes, choice), a mapping or a function of the context"
        )
    target = next((item for item in choices if item.id == policy.choice), None)
    if target is None:
        raise DefinitionError(
            f"{where} on_timeout choice {policy.choice!r} is not one of {[item.id for item in choices]}"
        )
    if any(item.required for item in target.inputs):
        raise DefinitionError(
            f"{where} on_timeout choice {policy.choice!r} has required text inputs; a timeout cannot fill them"
        )
    return policy


def _seconds_to_minutes(seconds: Any) -> float:
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise DefinitionError(f"on_timeout after_s must be a number of seconds, got {seconds!r}")
    return float(seconds) / 60.0


# ---- the structured request (``piw.workflow.decision_request``) ----------------------------------------------


def as_request(value: Any, where: str) -> DecisionRequest:
    """A request string (its title), a ``DecisionRequest`` or an equivalent mapping; errors name the field."""
    from piw.workflow.decision_request import as_request as checked

    return checked(value, where)


RequestArg: TypeAlias = "str | DecisionRequest | Mapping[str, Any] | Callable[[NodeContext], Any]"
AudienceArg = str | Callable[["NodeContext"], str]
GateTimeoutArg = TimeoutPolicy | Mapping[str, Any] | Callable[["NodeContext"], Any] | None


@dataclass(frozen=True)
class HumanDecision:
    """The protected form of a checkpoint: only a person or the timeout policy answers."""

    audience: AudienceArg
    choices: tuple[Choice, ...]
    request: RequestArg
    on_timeout: GateTimeoutArg = None

    @property
    def choice_ids(self) -> tuple[str, ...]:
        return tuple(item.id for item in self.choices)

    def snapshot(self) -> dict[str, Any]:
        """The definition-snapshot form (no functions): static audience and timeout, every choice."""
        data: dict[str, Any] = {"choices": [item.to_json() for item in self.choices]}
        if isinstance(self.audience, str):
            data["audience"] = self.audience
        if isinstance(self.on_timeout, TimeoutPolicy):
            data["onTimeout"] = self.on_timeout.to_json()
        elif callable(self.on_timeout):
            data["onTimeout"] = {"computed": True}
        return data


def make_human_decision(
    audience: AudienceArg, choices: Sequence[str | Choice], request: RequestArg, on_timeout: GateTimeoutArg
) -> HumanDecision:
    """Check the load-time parts of a gate (the rest is checked when it opens)."""
    if not callable(audience) and (
        not isinstance(audience, str) or not audience.strip() or len(audience) > 200
    ):
        raise DefinitionError(
            "human_decision audience must be a non-empty string (at most 200 characters) or a function of the context"
        )
    options = as_choices(choices)
    from piw.workflow.decision_request import DecisionRequest

    if not (callable(request) or isinstance(request, str | DecisionRequest | Mapping)):
        raise DefinitionError(
            "human_decision request must be a str, a DecisionRequest, a mapping or a function of the node context"
        )
    if not callable(request):
        try:
            as_request(request, "human_decision")
        except ValueError as exc:
            raise DefinitionError(str(exc)) from None
    policy: GateTimeoutArg = on_timeout if callable(on_timeout) else as_timeout(on_timeout, options)
    return HumanDecision(audience, options, request, policy)


# ---- opening a gate and checking an answer ------------------------------------------------------------------

GATE_KIND = "human_decision"


def opened_request(
    gate: HumanDecision, ctx: NodeContext, decision_id: str, opened_at: datetime, where: str
) -> dict[str, Any]:
    """The open gate as recorded (the waiting run's output and the decision row's request), with its digest.

    ``where`` names the node for errors. The deadline is fixed here, when the gate opens, and never moves.
    """
    from piw.wire import digest, format_time

    audience = gate.audience(ctx) if callable(gate.audience) else gate.audience
    if not isinstance(audience, str) or not audience.strip() or len(audience) > 200:
        raise ValueError(f"{where}: audience must be a non-empty string of at most 200 characters")
    raw_request = gate.request(ctx) if callable(gate.request) else gate.request
    request = as_request(raw_request, where)
    raw_timeout = gate.on_timeout(ctx) if callable(gate.on_timeout) else gate.on_timeout
    try:
        policy = as_timeout(raw_timeout, gate.choices, where)
    except DefinitionError as exc:
        raise ValueError(str(exc)) from None
    data: dict[str, Any] = {
        "kind": GATE_KIND,
        "decisionId": decision_id,
        "audience": audience,
        "request": request.to_json(),
        "choices": [item.to_json() for item in gate.choices],
        "openedAt": format_time(opened_at),
    }
    if policy is not None:
        expires = opened_at + timedelta(minutes=policy.after_minutes)
        data["onTimeout"] = {**policy.to_json(), "expiresAt": format_time(expires)}
    data["requestSha256"] = digest(data)
    return data


def is_gate_request(value: Any) -> bool:
    """Whether a waiting run's output is an open human-decision gate (else a plain checkpoint's summary)."""
    return (
        isinstance(value, dict) and value.get("kind") == GATE_KIND and isinstance(value.get("choices"), list)
    )


def check_answer(
    opened: Mapping[str, Any], choice_id: str, texts: Mapping[str, str], provenance: str
) -> dict[str, Any]:
    """The answer as the edges after the gate see it: ``{choice, provenance, <text inputs by name>}``.

    Raises ``ValueError`` with one line naming what to fix: an unknown choice, a missing, blank, too short or too
    long required text, an unknown text field. Accepted text is stored unchanged.
    """
    choices = [item for item in opened.get("choices", []) if isinstance(item, dict)]
    ids = [str(item.get("id")) for item in choices]
    picked = next((item for item in choices if item.get("id") == choice_id), None)
    if picked is None:
        raise ValueError(f"{choice_id!r} is not a choice of this decision; choose one of: {', '.join(ids)}.")
    inputs = [item for item in picked.get("inputs", []) if isinstance(item, dict)]
    names = [str(item.get("name")) for item in inputs]
    unknown = sorted(set(texts) - set(names))
    if unknown:
        if not names:
            raise ValueError(f"Choice {choice_id!r} takes no text; drop --text.")
        raise ValueError(
            f"Choice {choice_id!r} has no text field {unknown[0]!r}; its fields are: {', '.join(names)}."
        )
    answer: dict[str, Any] = {"choice": choice_id, "provenance": provenance}
    for item in inputs:
        name = str(item.get("name"))
        value = texts.get(name)
        required = bool(item.get("required", True))
        if value is None or (required and not value.strip()) or (not required and value == ""):
            if required:
                prompt = str(item.get("prompt", name))
                raise ValueError(
                    f"Choice {choice_id!r} needs non-blank text for {name!r} ({prompt}); pass it with --text."
                )
            continue
        low, high = int(item.get("minLength", 0)), int(item.get("maxLength", MAX_TEXT_INPUT))
        if not low <= len(value) <= high:
            raise ValueError(
                f"Text for {name!r} has {len(value):,} characters; it must have {low:,} to {high:,}."
            )
        answer[name] = value
    return answer
