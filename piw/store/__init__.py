"""What a run leaves: the trace and its fold, run state, bundles, the writer, artifacts and the session."""
