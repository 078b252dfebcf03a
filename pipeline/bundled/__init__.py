"""Bundled benchmark tasks in SWE-Bench Pro format (see README.md); build.py turns the sources into a dataset."""
