"""Executing a run: the engine, the foreground runner, node contexts and the executors."""
