"""The leak guard's shell script, shared by every runtime."""

from importlib.resources import files

SANITISE_SCRIPT = files("pipeline.runtime").joinpath("sanitise.sh").read_text()
