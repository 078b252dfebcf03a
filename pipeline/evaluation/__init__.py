"""Scoring patches with hidden tests, by the official SWE-Bench Pro protocol."""
