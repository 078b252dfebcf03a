"""Senior stage: extract the code context the real fix depends on."""
