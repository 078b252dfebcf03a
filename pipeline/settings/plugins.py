"""Naming a class or function by import string (``package.module:Name``), so a stage is swapped by config."""

from __future__ import annotations

import importlib

from pipeline.errors import SwepipeError


def load_object(spec: str, what: str):
    """The object ``spec`` names (``package.module:Name``); a clear error naming ``what`` it was meant to be."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise SwepipeError(f"{what} {spec!r} is not an import string: write it as package.module:Name")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise SwepipeError(f"{what} {spec!r}: cannot import {module_name} ({error}); is it installed, or on "
                           "PYTHONPATH?") from None
    target = module
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise SwepipeError(f"{what} {spec!r}: {module_name} has no {attribute}") from None
    return target
