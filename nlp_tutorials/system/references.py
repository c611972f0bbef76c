"""Objects named as ``"package.module:attribute"``: how a lower floor names what an upper floor
provides (a task shape's serving module, its baselines) without importing it.

Only names written in the package's own code (or a test's) are loaded this way, never one read
from a file: importing a module runs its code.
"""
import importlib


def load_reference(reference: str):
    """The object ``reference`` (``"package.module:attribute"``) names, its module imported."""
    module_name, _, attribute = reference.partition(":")
    if not module_name or not attribute:
        raise ValueError(f"{reference!r}: expected 'package.module:attribute'")
    return getattr(importlib.import_module(module_name), attribute)
