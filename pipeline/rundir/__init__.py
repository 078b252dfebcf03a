"""A run directory on disk: where each file goes (layout), how it is written (storage), its docs."""
