"""What a run is told: the config file and its overlays, model specs, plug-ins by import string."""
