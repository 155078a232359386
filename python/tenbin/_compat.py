"""Names the package gives on demand: TensorcomDataset (torch is optional and
slow to import) and former names kept working with a DeprecationWarning."""

from __future__ import annotations

import warnings

from ._errors import IOFailure

_RENAMED = {"IOError": ("IOFailure", IOFailure)}


def __getattr__(name):
    if name == "TensorcomDataset":
        from ._dataset import TensorcomDataset
        return TensorcomDataset
    if name in _RENAMED:
        new, value = _RENAMED[name]
        warnings.warn(f"tenbin.{name} is now tenbin.{new} (the old name shadowed a builtin)", DeprecationWarning,
                      stacklevel=2)
        return value
    raise AttributeError(f"module 'tenbin' has no attribute {name!r}")
