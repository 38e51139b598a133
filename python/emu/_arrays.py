"""NumPy arrays and torch CPU tensors in and out of the C library.

Inputs are passed to C by pointer, without a copy, when they are
C-contiguous arrays of the right dtype; a torch tensor goes through
`t.detach().numpy()`, which shares its memory.  Non-contiguous inputs are
copied once (documented in README: the result is then a new contiguous
array of the same shape).  Outputs given by the caller (`out=`) must be
contiguous and of the right dtype: they are written in place, never
copied.  Anything else (other dtypes, CUDA or meta tensors, objects that
are not arrays) raises TypeError or ValueError before C is called.
"""

import numpy as np


def _is_torch(x):
    return type(x).__module__.startswith("torch") and hasattr(x, "device")


class Wrapped:
    """An input as a contiguous NumPy view, and how to hand results back
    in the caller's type (NumPy or torch)."""

    __slots__ = ("arr", "torch", "shape")

    def __init__(self, arr, torch, shape):
        self.arr = arr
        self.torch = torch
        self.shape = shape

    def back(self, result):
        """A NumPy result as the caller's type (torch shares memory)."""
        if self.torch:
            import torch
            return torch.from_numpy(result)
        return result


def as_input(x, dtypes=(np.float32, np.float64), what="x"):
    """x (NumPy array or torch CPU tensor) as a contiguous NumPy array of
    one of `dtypes`, sharing memory where it can."""
    torch_in = _is_torch(x)
    if torch_in:
        dev = x.device.type
        if dev != "cpu":
            raise ValueError("emu: %s is a torch tensor on device '%s'; only "
                             "CPU tensors are supported (move it with "
                             ".cpu())" % (what, x.device))
        if x.is_sparse if hasattr(x, "is_sparse") else False:
            raise ValueError("emu: %s is a sparse tensor" % what)
        import torch
        names = {torch.float32: np.float32, torch.float64: np.float64}
        if x.dtype not in names or names[x.dtype] not in dtypes:
            raise TypeError("emu: %s has dtype %s; expected %s" % (
                what, x.dtype, " or ".join("torch." + np.dtype(d).name
                                           for d in dtypes)))
        arr = x.detach().numpy()
    elif isinstance(x, (np.ndarray, np.generic)):
        arr = np.asarray(x)  # a NumPy scalar becomes a 0-d array
        if arr.dtype.type not in dtypes:
            raise TypeError("emu: %s has dtype %s; expected %s" % (
                what, arr.dtype, " or ".join(np.dtype(d).name for d in dtypes)))
    else:
        raise TypeError("emu: %s must be a NumPy array or a torch CPU tensor, "
                        "not %s" % (what, type(x).__name__))
    shape = arr.shape
    if not arr.flags.c_contiguous:
        arr = np.ascontiguousarray(arr)  # the documented copy
    return Wrapped(arr, torch_in, shape)


def as_output(out, dtype, shape, what="out"):
    """out (NumPy array or torch CPU tensor) as a NumPy view C may write:
    contiguous, `dtype`, `shape` elements; never copied."""
    if _is_torch(out):
        if out.device.type != "cpu":
            raise ValueError("emu: %s is on device '%s', not the CPU" % (
                what, out.device))
        if out.requires_grad:
            raise ValueError("emu: %s requires grad; pass a tensor without "
                             "autograd history to write into" % what)
        import torch
        want = {np.float32: torch.float32, np.float64: torch.float64}[dtype]
        if out.dtype != want:
            raise TypeError("emu: %s has dtype %s, expected %s" % (
                what, out.dtype, want))
        if not out.is_contiguous():
            raise ValueError("emu: %s is not contiguous (it would not be "
                             "written in place)" % what)
        arr = out.numpy()
    elif isinstance(out, np.ndarray):
        arr = out
        if arr.dtype != dtype:
            raise TypeError("emu: %s has dtype %s, expected %s" % (
                what, arr.dtype, np.dtype(dtype).name))
        if not arr.flags.c_contiguous or not arr.flags.writeable:
            raise ValueError("emu: %s must be a writable C-contiguous array "
                             "(it would not be written in place)" % what)
    else:
        raise TypeError("emu: %s must be a NumPy array or a torch CPU tensor"
                        % what)
    if tuple(arr.shape) != tuple(shape):
        raise ValueError("emu: %s has shape %s, expected %s" % (
            what, tuple(arr.shape), tuple(shape)))
    return arr


def ptr(arr):
    return arr.ctypes.data if arr.size else None
