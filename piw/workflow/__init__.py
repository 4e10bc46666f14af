"""What a workflow is: the definition DSL, graph validation and flattening, loading and routing."""
