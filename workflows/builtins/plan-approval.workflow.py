"""A person approves, stops or redirects a plan.

A protected human decision: only a person answers (the waiting run's terminal prompt, `piw decide`, `piw answer`),
never a model. Mode `auto` continues by itself after `timeoutMinutes` (10 by default) without an answer,
`required` waits without limit, and `skip` opens no gate (builtins.md §5).
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, field_validator, model_validator
from pydantic.alias_generators import to_camel

from piw import (
    NodeContext,
    choice,
    compute,
    define_workflow,
    human_decision,
    switch,
    text_input,
    timeout_after,
)

CONFIG = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True, frozen=True)
MAX_PLAN_JSON = 50_000
DEFAULT_TIMEOUT_MINUTES = 10
DEFAULT_AUDIENCE = "the person who approves this plan"
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


def canonical_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"), allow_nan=False)


def digest(value: Any) -> str:
    return "sha256:" + hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()


def clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f"… [{len(text) - limit} more characters]"


class Summary(BaseModel):
    """A plain-summary result shown with the request."""

    model_config = CONFIG

    text: str = Field(min_length=1, max_length=10_000)


class Approval(BaseModel):
    """How the plan is approved."""

    model_config = CONFIG

    mode: Literal["auto", "required", "skip"] = Field(
        default="auto",
        description="auto: continue by itself after timeoutMinutes; required: wait for a person; skip: no gate.",
    )
    audience: str | None = Field(default=None, min_length=1, max_length=200, description="Who decides.")
    timeout_minutes: int | None = Field(
        default=None,
        ge=1,
        le=1440,
        strict=True,
        description="auto only: minutes without an answer (default 10).",
    )

    @model_validator(mode="after")
    def _timeout_only_with_auto(self) -> Approval:
        if self.timeout_minutes is not None and self.mode != "auto":
            raise ValueError(f"timeoutMinutes applies only to mode 'auto', not {self.mode!r}")
        return self


class PlanApprovalInput(BaseModel):
    """The plan to approve, its digest, and how to ask."""

    model_config = CONFIG

    task: str = Field(min_length=1, max_length=8_000, description="What the plan is for (non-blank).")
    plan: JsonValue = Field(description="The plan, any JSON (at most 50,000 characters of canonical JSON).")
    plan_digest: str = Field(description="digest(plan): 'sha256:' and 64 hex digits of its canonical JSON.")
    summary: Summary | None = Field(
        default=None, description="A plain-summary result shown with the request."
    )
    approval: Approval = Field(default_factory=Approval, description="The approval mode.")
    revision: int | None = Field(
        default=None, ge=1, le=1_000, strict=True, description="Plan revision shown."
    )

    @field_validator("task")
    @classmethod
    def _task_non_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("task must not be blank")
        return value

    @field_validator("plan")
    @classmethod
    def _plan_size(cls, value: JsonValue) -> JsonValue:
        size = len(canonical_json(value))
        if size > MAX_PLAN_JSON:
            raise ValueError(f"plan must be at most {MAX_PLAN_JSON} characters of canonical JSON, got {size}")
        return value

    @field_validator("plan_digest")
    @classmethod
    def _digest_shape(cls, value: str) -> str:
        if not DIGEST.fullmatch(value):
            raise ValueError("planDigest must be 'sha256:' followed by 64 lower-case hex digits")
        return value

    @model_validator(mode="after")
    def _digest_matches(self) -> PlanApprovalInput:
        actual = digest(self.plan)
        if self.plan_digest != actual:
            raise ValueError(
                f"planDigest {self.plan_digest} does not match the plan, whose digest is {actual}"
            )
        return self


def spec_of(ctx: NodeContext) -> PlanApprovalInput:
    return PlanApprovalInput.model_validate(ctx.input)


def timeout_of(spec: PlanApprovalInput) -> int:
    return spec.approval.timeout_minutes or DEFAULT_TIMEOUT_MINUTES


def route_policy(ctx: NodeContext) -> dict[str, Any]:
    spec = spec_of(ctx)
    return {
        "route": spec.approval.mode,
        "timeoutMinutes": timeout_of(spec) if spec.approval.mode == "auto" else None,
    }


def audience(ctx: NodeContext) -> str:
    return spec_of(ctx).approval.audience or DEFAULT_AUDIENCE


def request(ctx: NodeContext) -> dict[str, Any]:
    spec = spec_of(ctx)
    fields = [
        {"label": "Plan digest", "value": spec.plan_digest},
        {"label": "Revision", "value": str(spec.revision) if spec.revision is not None else "—"},
        {"label": "Mode", "value": spec.approval.mode},
    ]
    if spec.approval.mode == "auto":
        fields.append(
            {
                "label": "Timeout",
                "value": f"Continues automatically after {timeout_of(spec)} minutes without an answer",
            }
        )
    plan_text = clip(json.dumps(spec.plan, indent=2, ensure_ascii=False), 20_000)
    return {
        "title": "Approve the recommended plan?",
        "subject": clip(spec.task, 200),
        "summary": spec.summary.text if spec.summary else "A plan is ready for review.",
        "blocks": [
            {"kind": "fields", "items": fields},
            {"kind": "section", "title": "Task", "text": clip(spec.task, 2_000)},
            {"kind": "section", "title": "Plan", "blocks": [{"kind": "preformatted", "text": plan_text}]},
        ],
    }


CHOICES = [
    choice("continue", "Continue with this plan"),
    choice("stop", "Stop here"),
    choice(
        "replan",
        "Replan",
        inputs=[
            text_input(
                "instructions", prompt="What should change in the plan?", min_length=1, max_length=4_000
            )
        ],
    ),
]


def gate_answer(ctx: NodeContext) -> dict[str, Any]:
    for gate in ("approve_auto", "approve_required"):
        if gate in ctx.outputs:
            answer: dict[str, Any] = ctx.outputs[gate]
            return answer
    return {"choice": "continue", "provenance": "skip"}


def continued(ctx: NodeContext) -> dict[str, Any]:
    provenance = "skip" if ctx.outputs["route_policy"]["route"] == "skip" else gate_answer(ctx)["provenance"]
    return {"decision": "continue", "provenance": provenance, "planDigest": spec_of(ctx).plan_digest}


def stopped(ctx: NodeContext) -> dict[str, Any]:
    return {
        "decision": "stop",
        "provenance": gate_answer(ctx)["provenance"],
        "planDigest": spec_of(ctx).plan_digest,
    }


def replanned(ctx: NodeContext) -> dict[str, Any]:
    answer = gate_answer(ctx)
    return {"decision": "replan", "provenance": answer["provenance"], "instructions": answer["instructions"],
            "planDigest": spec_of(ctx).plan_digest}  # fmt: skip


ROUTES = {"continue": "continued", "stop": "stopped", "replan": "replanned"}

workflow = define_workflow(
    name="plan-approval",
    description="A person approves, stops or redirects a plan.",
    contract_id="piw.plan-approval.v1",
    revision=1,
    max_steps=3,
    input=PlanApprovalInput,
    start_at="route_policy",
    nodes={
        "route_policy": compute(route_policy),
        "approve_auto": human_decision(
            audience,
            CHOICES,
            request,
            on_timeout=lambda ctx: timeout_after(timeout_of(spec_of(ctx)), "continue"),
        ),
        "approve_required": human_decision(audience, CHOICES, request),
        "continued": compute(continued),
        "stopped": compute(stopped),
        "replanned": compute(replanned),
    },
    edges=[
        switch(
            "route_policy",
            on="$.route",
            cases={"auto": "approve_auto", "required": "approve_required", "skip": "continued"},
        ),
        switch("approve_auto", on="$.choice", cases=ROUTES),
        switch("approve_required", on="$.choice", cases=ROUTES),
    ],
    exits={
        "continue": {"from_": "continued"},
        "stop": {"from_": "stopped"},
        "replan": {"from_": "replanned"},
    },
)
