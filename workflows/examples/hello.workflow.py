"""A first workflow: compute a greeting, run a command, notify, and finish.

piw run hello
piw run hello --input '{"name": "Ada"}'
"""

from pydantic import BaseModel, Field

from piw import ShellCommand, compute, define_workflow, edge, notify, shell


class Input(BaseModel):
    name: str = Field(default="world", description="Who to greet.")


workflow = define_workflow(
    name="hello",
    description="Greets someone with a compute step, a shell command and a notification.",
    input=Input,
    start_at="greet",
    nodes={
        "greet": compute(lambda ctx: {"greeting": f"Hello, {ctx.input['name']}!"}),
        "echo": shell(lambda ctx: ShellCommand(command="echo", args=[ctx.outputs["greet"]["greeting"]])),
        "tell": notify(lambda ctx: ctx.outputs["echo"]["stdout"].strip()),
    },
    edges=[edge("greet", "echo"), edge("echo", "tell")],
)
