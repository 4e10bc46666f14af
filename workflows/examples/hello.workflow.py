"""A first workflow: compute a greeting, run a command, notify, and finish."""

from piw import ShellCommand, compute, define_workflow, edge, notify, shell

workflow = define_workflow(
    name="hello",
    description="Greets someone with a compute step, a shell command and a notification.",
    start_at="greet",
    nodes={
        "greet": compute(lambda ctx: {"greeting": f"Hello, {ctx.input.get('name', 'world')}!"}),
        "echo": shell(lambda ctx: ShellCommand(command="echo", args=[ctx.outputs["greet"]["greeting"]])),
        "tell": notify(lambda ctx: ctx.outputs["echo"]["stdout"].strip()),
    },
    edges=[edge("greet", "echo"), edge("echo", "tell")],
)
