"""Autoplan, then approval, with bounded replanning.

The included autoplan writes and explains a plan; the included plan-approval asks a person to continue, stop or
replan with instructions. A replan runs autoplan again with the reviewed plan and the instructions, at most
`maxReplans` times (builtins.md §6).
"""

from __future__ import annotations

import hashlib
import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, field_validator, model_validator
from pydantic.alias_generators import to_camel

from piw import NodeContext, compute, define_workflow, edge, include, switch

CONFIG = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True, frozen=True)
MAX_PLAN_JSON = 50_000


def canonical_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"), allow_nan=False)


def digest(value: Any) -> str:
    return "sha256:" + hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()


class Approval(BaseModel):
    """How the plan is approved (as plan-approval takes it)."""

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


class PlanChangeInput(BaseModel):
    """The task to plan, what is known, and how the plan is approved."""

    model_config = CONFIG

    task: str = Field(min_length=1, max_length=20_000, description="What to plan for (non-blank).")
    scope: str | None = Field(default=None, max_length=4_000, description="What is in and out of scope.")
    constraints: list[Annotated[str, Field(min_length=1, max_length=1_000)]] = Field(
        default_factory=list, max_length=32, description="Hard limits every plan must honour."
    )
    previous_plan: JsonValue = Field(
        default=None, description="A plan written earlier (JSON, ≤ 50,000 characters)."
    )
    new_evidence: str | None = Field(
        default=None, max_length=12_000, description="What has been learned since the previous plan."
    )
    approval: Approval | None = Field(
        default=None, description="The approval mode (default: auto, 10 minutes)."
    )
    max_replans: int = Field(
        default=3, ge=0, le=10, strict=True, description="Most times a person may send it back."
    )

    @field_validator("task")
    @classmethod
    def _task_non_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("task must not be blank")
        return value

    @field_validator("previous_plan")
    @classmethod
    def _previous_plan_size(cls, value: JsonValue) -> JsonValue:
        if value is not None and len(canonical_json(value)) > MAX_PLAN_JSON:
            raise ValueError(
                f"previousPlan must be at most {MAX_PLAN_JSON} characters of canonical JSON, "
                f"got {len(canonical_json(value))}"
            )
        return value


def spec_of(ctx: NodeContext) -> PlanChangeInput:
    return PlanChangeInput.model_validate(ctx.input)


def start(ctx: NodeContext) -> dict[str, Any]:
    spec = spec_of(ctx)
    mode = spec.approval.mode if spec.approval else "auto"
    return {**spec.model_dump(mode="json", by_alias=True), "approvalPending": mode != "skip"}


def replans(ctx: NodeContext) -> int:
    return int(ctx.outputs["replan_guard"]["count"]) if "replan_guard" in ctx.outputs else 0


def design_input(ctx: NodeContext) -> dict[str, Any]:
    spec, started = spec_of(ctx), ctx.outputs["start"]
    value: dict[str, Any] = {
        "problem": spec.task,
        "constraints": list(spec.constraints),
        "approvalPending": started["approvalPending"],
    }
    if spec.scope is not None:
        value["scope"] = spec.scope
    if "replan_guard" not in ctx.outputs:
        if spec.previous_plan is not None:
            value["previousPlan"] = spec.previous_plan
        if spec.new_evidence is not None:
            value["newEvidence"] = spec.new_evidence
        return value
    value["previousPlan"] = ctx.outputs["assess"]["plan"]
    evidence = "Reviewer instructions for the new plan:\n" + ctx.outputs["approval"]["instructions"]
    if spec.new_evidence:
        evidence += "\n\nEarlier evidence:\n" + spec.new_evidence
    value["newEvidence"] = evidence
    return value


def assess(ctx: NodeContext) -> dict[str, Any]:
    design = ctx.outputs["design"]
    return {"plan": design["plan"], "planDigest": design["planDigest"], "summary": design["plainSummary"]}


def approval_input(ctx: NodeContext) -> dict[str, Any]:
    spec, assessed = spec_of(ctx), ctx.outputs["assess"]
    value: dict[str, Any] = {
        "task": spec.task,
        "plan": assessed["plan"],
        "planDigest": assessed["planDigest"],
        "summary": assessed["summary"],
        "revision": replans(ctx) + 1,
    }
    if spec.approval is not None:
        value["approval"] = spec.approval.model_dump(mode="json", by_alias=True, exclude_none=True)
    return value


def replan_guard(ctx: NodeContext) -> dict[str, Any]:
    count = replans(ctx) + 1
    return {"count": count, "route": "again" if count <= spec_of(ctx).max_replans else "limit"}


def ready(ctx: NodeContext) -> dict[str, Any]:
    design, decided = ctx.outputs["design"], ctx.outputs["approval"]
    return {
        "plan": design["plan"],
        "planDigest": design["planDigest"],
        "autoplan": design,
        "approval": {"decision": decided["decision"], "provenance": decided["provenance"]},
        "replans": replans(ctx),
    }


def blocked(ctx: NodeContext) -> dict[str, Any]:
    design = ctx.outputs["design"]
    count = replans(ctx)
    if design["status"] == "blocked":
        cause, reason = "design", design["reason"]
    elif ctx.outputs.get("approval", {}).get("decision") == "stop":
        cause, reason = "stopped", "The reviewer chose to stop here."
    else:
        limit = spec_of(ctx).max_replans
        cause = "replan_limit"
        reason = f"The plan was sent back for replanning {count} times; the limit is {limit}."
        count = min(count, limit)
    return {"cause": cause, "reason": reason, "autoplan": design, "replans": count}


workflow = define_workflow(
    name="plan-change",
    description="Autoplan, then approval, with bounded replanning.",
    contract_id="piw.plan-change.v1",
    revision=1,
    max_steps=160,
    input=PlanChangeInput,
    start_at="start",
    nodes={
        "start": compute(start),
        "assess": compute(assess),
        "replan_guard": compute(replan_guard),
        "ready": compute(ready),
        "blocked": compute(blocked),
    },
    includes={
        "design": include("autoplan", input=design_input),
        "approval": include("plan-approval", input=approval_input),
    },
    edges=[
        edge("start", "design"),
        switch("design", on="$exit", cases={"ready": "assess", "blocked": "blocked"}),
        edge("assess", "approval"),
        switch(
            "approval", on="$exit", cases={"continue": "ready", "stop": "blocked", "replan": "replan_guard"}
        ),
        switch("replan_guard", on="$.route", cases={"again": "design", "limit": "blocked"}),
    ],
    exits={"ready": {"from_": "ready"}, "blocked": {"from_": "blocked"}},
)
