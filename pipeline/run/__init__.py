"""`swepipe run`: the four stages over many tasks, resumable, with a run directory on disk."""
