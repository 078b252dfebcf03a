"""swepipe: juniors explore, a senior briefs, a principal writes the patch, hidden tests score it."""

__version__ = "0.1.0"
