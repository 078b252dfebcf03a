"""Other tools' formats: a run's predictions and trajectories written in the shapes the SWE-bench harnesses and
mini-swe-agent read (``export``, ``swepipe export``); the home of importing their trajectories and of reading
prediction files in the official harness's and swebench's shapes too (``predictions``). Like the
analyses, it reads a run through its records and imports no stage package (tests/test_imports.py)."""
