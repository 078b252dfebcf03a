"""Principal stage: one frontier-model call that writes the complete fix as search/replace edits."""
