"""Planning: what a run will spend before it spends (``piw run --plan``, ``docs/planning.md``).

``history`` reads what earlier runs of the same workflow spent per node, ``graph_walk`` bounds how often each
node can run (``max_steps``, loops, branches, declared fan-outs), ``project`` combines both with the prompt sizes
it can compute and the provider's prices into a :class:`~piw.planning.figures.Projection`, and ``render`` prints
it. Nothing here sends a model request.
"""
