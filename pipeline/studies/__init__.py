"""Studies over runs: ``swepipe sweep``'s grid of team configurations (``sweep``) and the senior on fewer rollouts
after a run (``senior_at``, ``swepipe coverage --senior-at``). Each drives the run path (pipeline.run) and adds no
stage of its own; ``manifest`` reads a sweep's ``sweep.json`` without importing the run path (the sweep's report
reads it)."""
