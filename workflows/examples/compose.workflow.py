"""Mount one workflow inside another with include(): named exits, a $exit switch and mount-path node ids.

piw run compose                       # 42 leaves the child through its "large" exit
piw run compose --input '{"value": 3}'  # 3 leaves through "tiny"
"""

from pydantic import BaseModel, Field

from piw import compute, define_workflow, edge, include, switch


class Input(BaseModel):
    value: int = Field(default=42, description="The number the child workflow measures (over 10 is large).")


# The child workflow. It is defined in this file: a workflow file's own folder is not on the import path.
check = define_workflow(
    name="check",
    start_at="measure",
    nodes={
        "measure": compute(lambda ctx: {"value": ctx.input["value"], "big": ctx.input["value"] > 10}),
        "big": compute(lambda ctx: {"verdict": "big", "value": ctx.outputs["measure"]["value"]}),
        "small": compute(lambda ctx: {"verdict": "small", "value": ctx.outputs["measure"]["value"]}),
    },
    edges=[switch("measure", on="$.big", cases={"true": "big", "false": "small"})],
    exits={"large": {"from_": "big"}, "tiny": {"from_": "small"}},
)

workflow = define_workflow(
    name="compose",
    description="Mounts a child workflow with include() and routes on the exit it leaves through.",
    input=Input,
    start_at="prepare",
    nodes={
        "prepare": compute(lambda ctx: {"value": ctx.input["value"]}),
        "celebrate": compute(lambda ctx: f"{ctx.outputs['checker']['value']} is large"),
        "shrug": compute(lambda ctx: f"{ctx.outputs['checker']['value']} is tiny"),
    },
    includes={"checker": include(check, input=lambda ctx: ctx.outputs["prepare"])},
    edges=[
        edge("prepare", "checker"),
        switch("checker", on="$exit", cases={"large": "celebrate", "tiny": "shrug"}),
    ],
)
