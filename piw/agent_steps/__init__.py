"""Agent steps: the step contract, the ``workflow`` tool, the agent loop and the agent executor."""
