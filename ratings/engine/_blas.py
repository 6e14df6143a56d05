"""Run the engine with single-threaded OpenBLAS.

The engine's BLAS calls are small (p x p solves, k x n products with k = 4). On few cores,
OpenBLAS's worker threads cost more than they save: waking them and their spinning after
each call made a bootstrap replicate 2-3x slower in ``bench/ratings.py``. This does what
``threadpoolctl.threadpool_limits(1, "blas")`` does, for the OpenBLAS builds numpy and scipy
wheels ship, and does nothing where none is loaded.
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from contextlib import contextmanager

_PREFIXES = ("scipy_openblas_", "openblas_")
_SUFFIXES = ("64_", "_64_", "")


def _loaded_openblas_paths() -> list[str]:
    try:
        with open("/proc/self/maps", encoding="utf-8") as maps:
            paths = {line.split()[-1] for line in maps if "openblas" in line and "/" in line}
    except OSError:
        return []
    return sorted(p for p in paths if ".so" in p)


def _controls() -> tuple[tuple[object, object], ...]:
    found = []
    for path in _loaded_openblas_paths():
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for prefix in _PREFIXES:
            for suffix in _SUFFIXES:
                setter = getattr(lib, f"{prefix}set_num_threads{suffix}", None)
                getter = getattr(lib, f"{prefix}get_num_threads{suffix}", None)
                if setter is not None and getter is not None:
                    getter.restype = ctypes.c_int
                    found.append((getter, setter))
                    break
            else:
                continue
            break
    return tuple(found)


@contextmanager
def single_threaded_blas() -> Iterator[None]:
    controls = _controls()
    previous = [int(getter()) for getter, _ in controls]  # type: ignore[operator]
    for _, setter in controls:
        setter(1)  # type: ignore[operator]
    try:
        yield
    finally:
        for (_, setter), count in zip(controls, previous, strict=True):
            setter(count)  # type: ignore[operator]
