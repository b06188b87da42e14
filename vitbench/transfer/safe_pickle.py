"""Restricted unpickling for the CIFAR python-pickle layout: plain containers and numpy arrays, nothing else.

The project never unpickles untrusted files with `pickle.load`: a pickle can name any importable callable
(os.system, ...) and call it while loading. `SafeUnpickler.find_class` refuses every global except the exact
numpy reconstruction helpers an ndarray pickle needs (and `_codecs.encode` restricted to latin-1, which
Python-3 protocol-2 pickles use for bytes). Anything else raises `UnsafeFileError` *before* it is called.
"""

from __future__ import annotations

import codecs
import io
import pickle
from pathlib import Path

import numpy as np

from vitbench.errors import UnsafeFileError


def _latin1_encode(text: str, encoding: str = "latin1") -> bytes:
    """Stand-in for `_codecs.encode` that only performs the str->bytes step protocol-2 pickles need."""
    if codecs.lookup(encoding).name != "iso8859-1" or not isinstance(text, str):
        raise UnsafeFileError(f"pickle asked for _codecs.encode(..., {encoding!r}); only latin-1 is allowed")
    return text.encode("latin1")


# (module, name) -> the object handed to the unpickler. numpy moved `core` to `_core` in 2.0; pickles from
# either era name one or the other. `_frombuffer` is what protocol-5 pickles of contiguous arrays use.
try:  # numpy >= 2
    from numpy._core.multiarray import _reconstruct
    from numpy._core.numeric import _frombuffer
except ImportError:  # pragma: no cover - numpy 1.x
    from numpy.core.multiarray import _reconstruct
    from numpy.core.numeric import _frombuffer

_ALLOWED = {
    ("numpy.core.multiarray", "_reconstruct"): _reconstruct,
    ("numpy._core.multiarray", "_reconstruct"): _reconstruct,
    ("numpy.core.numeric", "_frombuffer"): _frombuffer,
    ("numpy._core.numeric", "_frombuffer"): _frombuffer,
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): np.dtype,
    ("_codecs", "encode"): _latin1_encode,
}


class SafeUnpickler(pickle.Unpickler):
    """Unpickler that resolves only the allow-listed numpy globals; every other global is refused."""

    def __init__(self, file, source: str = "<pickle>"):
        super().__init__(file, encoding="bytes")  # CIFAR batches are Python-2 pickles: keys come back as bytes
        self.source = source

    def find_class(self, module: str, name: str):
        obj = _ALLOWED.get((module, name))
        if obj is None:
            raise UnsafeFileError(
                f"{self.source}: refusing to unpickle global {module}.{name}; only numpy arrays and plain "
                "containers are allowed (CIFAR python layout). Convert the data to .npz if it is yours."
            )
        return obj

    def persistent_load(self, pid):
        raise UnsafeFileError(f"{self.source}: persistent ids are not allowed in a data pickle")


def safe_load(path: str | Path) -> object:
    """Load a data pickle (dicts, lists, bytes, numbers, numpy arrays) without running any code from it."""
    path = Path(path)
    data = path.read_bytes()
    try:
        obj = SafeUnpickler(io.BytesIO(data), source=str(path)).load()
    except UnsafeFileError:
        raise
    except Exception as e:  # truncated or not a pickle at all
        raise UnsafeFileError(f"{path}: not a readable CIFAR-format pickle ({type(e).__name__}: {e})") from e
    _check_arrays(obj, path)
    return obj


def _check_arrays(obj, path: Path) -> None:
    """Object-dtype arrays could smuggle anything past later code; data arrays must be numeric."""
    if isinstance(obj, np.ndarray):
        if obj.dtype.hasobject:
            raise UnsafeFileError(f"{path}: object-dtype array in a data pickle; expected numeric arrays")
    elif isinstance(obj, dict):
        for v in obj.values():
            _check_arrays(v, path)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            if isinstance(v, (np.ndarray, dict, list, tuple)):
                _check_arrays(v, path)
