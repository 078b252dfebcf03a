"""Errors a user can act on. The CLI prints their message (no traceback) and exits with code 2."""


class SwepipeError(Exception):
    """Bad input or an unusable environment, explained in the message."""


class DatasetError(SwepipeError):
    """A dataset that cannot be found, read or decoded; the message names file, row and column."""


class RuntimeUnavailable(SwepipeError):
    """Docker (or the local toolchain) is missing or failing, or an image cannot be had: an infrastructure
    fault. It is retried, and a task it stops stays unfinished for a rerun; it is never a result."""


class ContainerDied(SwepipeError):
    """A workspace's container stopped (killed, out of memory, exited) under an agent: what ran there ended
    it, so it is that agent's outcome (``runtime_error``), recorded like any other."""
