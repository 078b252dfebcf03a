"""Errors a user can act on. The CLI prints their message (no traceback) and exits with code 2."""


class SwepipeError(Exception):
    """Bad input or an unusable environment, explained in the message."""


class DatasetError(SwepipeError):
    """A dataset that cannot be found, read or decoded; the message names file, row and column."""


class RuntimeUnavailable(SwepipeError):
    """Docker (or the local toolchain) is missing, or an image cannot be found or pulled."""
