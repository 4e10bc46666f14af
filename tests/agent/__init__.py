"""Tests of ``piw/agent_steps``: agent steps, their loop, the ``workflow`` tool, recovery and pi-rpc."""
