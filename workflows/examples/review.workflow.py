"""Review a change with agent steps: a structured summary, a decision, then a short reply.

Offline, with the scripted provider (replies come from review.replies.json beside this file):

    piw run review --provider scripted
"""

import json
from typing import Literal

from pydantic import BaseModel

from piw import NodeContext, agent, assistant_message, decision, define_workflow, edge, notify, switch

DEFAULT_CHANGE = "rename config keys"


class Summary(BaseModel):
    title: str
    risk: Literal["low", "medium", "high"]
    points: list[str]


def change_of(ctx: NodeContext) -> str:
    return str(ctx.input.get("change", DEFAULT_CHANGE))


def at_most_three_points(value: Summary, ctx: NodeContext) -> Summary:
    """Runs after the model class accepted the output; raising rejects it and the model may try again."""
    if len(value.points) > 3:
        raise ValueError(f"give at most 3 points, not {len(value.points)}")
    return value


workflow = define_workflow(
    name="review",
    description="Summarizes a change, decides whether to ship it and drafts an announcement (agent steps).",
    title=lambda input, name: f"Review: {input.get('change', DEFAULT_CHANGE)[:40]}",
    start_at="summarize",
    nodes={
        "summarize": agent(
            prompt=lambda ctx: f"Summarize this change for a reviewer:\n{change_of(ctx)}",
            expected_output=Summary,
            validate=at_most_three_points,
            status_detail="Summarizing the change",
        ),
        "route": decision(
            lambda ctx: f"Should this change ship now?\n{json.dumps(ctx.outputs['summarize'])}",
            choices=["ship", "hold"],
        ),
        "announce": agent(
            prompt=lambda ctx: f"Write a two-sentence note announcing: {ctx.outputs['summarize']['title']}",
            expected_output=assistant_message(max_chars=300),
            status_detail="Drafting the announcement",
        ),
        "hold": notify(lambda ctx: f"Holding the change: {ctx.outputs['route']['reason']}", kind="final"),
    },
    edges=[
        edge("summarize", "route"),
        switch("route", on="$.route", cases={"ship": "announce", "hold": "hold"}),
    ],
)
