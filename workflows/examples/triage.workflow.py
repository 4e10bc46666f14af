"""Triage a report with an agent: classify it (structured submit), then reply or queue it."""

from typing import Literal

from pydantic import BaseModel

from piw import agent, assistant_message, compute, define_workflow, switch


class Triage(BaseModel):
    route: Literal["bug", "feature"]
    reason: str


workflow = define_workflow(
    name="triage",
    description="Classifies a report with a model and answers bugs with a short reply.",
    title=lambda input, name: f"Triage: {input.get('text', 'crash on save')[:40]}",
    start_at="classify",
    nodes={
        "classify": agent(
            prompt=lambda ctx: (
                f"Classify this report:\n{ctx.input.get('text', 'The app crashes when I save.')}"
            ),
            expected_output=Triage,
            status_detail="Classifying the report",
        ),
        "bug": agent(
            prompt="Write a short reply for the reporter.",
            expected_output=assistant_message(max_chars=800),
            status_detail="Drafting a reply",
        ),
        "feature": compute(lambda ctx: {"queued": True, "reason": ctx.outputs["classify"]["reason"]}),
    },
    edges=[switch("classify", on="$.route", cases={"bug": "bug", "feature": "feature"})],
)
