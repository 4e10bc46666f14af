"""Test cases made from real runs: record one, replay it offline, grade it, compare models on it (``docs/testing.md``).

A case is a folder of plain JSON a person can read and edit: ``case.json`` (which workflow, which input, the
definition it was recorded against), ``replies.ndjson`` (the model replies of each agent step, the replay fixture)
and ``expected.json`` (the route, each node's output, the final output). ``piw test`` and the pytest plugin
(``piw.pytest_plugin``) run them.
"""
