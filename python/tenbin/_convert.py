"""Conversion of received arrays: DLPack capsules, zero-copy torch tensors,
tensorcom's torch conversion, and the ``converters`` and
``batch_transforms`` arguments of Connection and Loader."""

from __future__ import annotations

from ._public import public

import numpy as np

from . import _tenbin
from ._errors import BadArgument, Unsupported

__all__ = ["to_dlpack", "to_torch"]


@public
def to_dlpack(a):
    """A DLPack capsule ("dltensor") of array ``a`` without a copy, for any
    consumer's ``from_dlpack``: an array tenbin made (received, decoded,
    mapped) exports its tenbin buffer, which the capsule keeps alive, also
    when read-only (NumPy refuses to export those: DLPack cannot say
    read-only, so do not write through the result)."""
    return _tenbin.to_dlpack(a)


# What a torch without uint16/uint32 holds such arrays in.
_WIDER = {"u2": np.int32, "u4": np.int64}


@public
def to_torch(a):
    """A torch tensor on the same memory as NumPy array ``a`` (no copy, via
    DLPack), in its dtype and layout. Arrays tenbin made (received,
    decoded, mapped) export their tenbin buffer, which stays alive as long
    as the tensor; other arrays are kept alive by the tensor. torch has no
    read-only tensors: do not write to one made from a received array
    (``.clone()`` it first).

    torch builds without uint16/uint32 get a widened copy of u2 and u4
    arrays (int32, int64); u8 raises ``Unsupported`` there. Anything but a
    NumPy array is returned as it is."""
    if not isinstance(a, np.ndarray):
        return a
    import torch.utils.dlpack
    try:
        return torch.utils.dlpack.from_dlpack(_tenbin.to_dlpack(a))
    except (RuntimeError, BufferError) as e:
        wider = _WIDER.get(a.dtype.str[1:])
        if wider is None:
            raise Unsupported(f"torch cannot hold {a.dtype} arrays: {e}") from e
        return torch.from_numpy(a.astype(wider))


def to_device(device):
    """A converter to zero-copy torch tensors, copied to ``device`` unless
    it is the cpu."""
    def convert(a):
        t = to_torch(a)
        return t if device in (None, "cpu") else t.to(device)
    return convert


def tensorcom_torch(device="cpu"):
    """A converter doing what tensorcom's ``converters="torch"`` did: floats
    (f2, f4, f8) become float32 tensors and i2, u2, i4 and i8 int64 ones
    (a copy where the dtype changes), other dtypes stay as they are (no
    copy); an image batch with 3 or 4 channels last (HWC, NHWC) is
    transposed channels first (CHW, NCHW), as a view of the same memory."""
    import torch
    floats, ints = ("f2", "f4", "f8"), ("i2", "u2", "i4", "i8")

    def convert(a):
        if not isinstance(a, np.ndarray):
            return a
        t = to_torch(a)
        if a.ndim == 3 and a.shape[2] in (3, 4):
            t = t.permute(2, 0, 1)
        elif a.ndim == 4 and a.shape[3] in (3, 4):
            t = t.permute(0, 3, 1, 2)
        code = a.dtype.str[1:]
        dtype = torch.float32 if code in floats else torch.int64 if code in ints else None
        return t.to(device=device, dtype=dtype)
    return convert


_NAMED = ("numpy", "torch", "torch_cuda", "tensorcom")


def converters_of(converters, device):
    """The functions of a ``converters`` argument: None, a name (``_NAMED``),
    a function, or a list of functions (function ``i % len`` converts item
    ``i``, as in tensorcom)."""
    if isinstance(converters, str):
        if converters == "numpy":
            return None
        if converters == "torch":
            return [to_device(device)]
        if converters == "torch_cuda":
            return [to_device(device or "cuda")]
        if converters == "tensorcom":
            return [tensorcom_torch(device or "cpu")]
        raise BadArgument(f"converters={converters!r}: one of {', '.join(_NAMED)}, a function or a list of them")
    conv = listify(converters)
    if conv is None and device is not None:
        conv = [to_device(device)]
    for f in conv or ():
        if f is not None and not callable(f):
            raise BadArgument(f"converters: {f!r} is not a function")
    return conv


def listify(x):
    """None for None, a list for a list or tuple, else ``[x]``."""
    if x is None:
        return None
    if isinstance(x, (list, tuple)):
        return list(x)
    return [x]


def transform_with(sample, transformers):
    """tensorcom's rule: function ``i % len(transformers)`` applies to item
    ``i`` (None leaves it)."""
    if not transformers:
        return sample
    result = list(sample)
    n = len(transformers)
    for i in range(len(result)):
        f = transformers[i % n]
        if f is not None:
            result[i] = f(result[i])
    return result
