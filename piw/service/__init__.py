"""What a person asks of piw without a terminal: start a run for a host, answer or decide a waiting one.

The CLI (``piw run --detach``, ``piw answer``, ``piw decide``) and ``piw serve`` share these calls
(``docs/serve.md``), so a run started or answered over HTTP is checked and recorded exactly as one from the shell.
They sit above the engine and the agent steps: they build the agent executor a continuation will need.
"""
