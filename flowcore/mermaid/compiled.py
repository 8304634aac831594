"""Which build of a hot module runs: Cython's compile (``setup.py``, run by ``make``) when it was built from the
source now on disk, else the ``.py`` itself. A stale build (the source edited since, a branch switched) is never
run: ``setup.py`` writes the hash of the sources it compiled next to the extension, and it must match."""

from __future__ import annotations

import importlib
import os
import sys
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))


def source_hash(name: str) -> str:
    """CRC-32 and size of ``name.py`` and ``name.pxd`` (the compile's inputs): enough to tell an edited source from
    the built one, and cheap at every start (hashlib's import alone is ~4 ms)."""
    parts = []
    for ext in (".py", ".pxd"):
        path = os.path.join(HERE, name + ext)
        if os.path.exists(path):
            with open(path, "rb") as f:
                data = f.read()
            parts.append(f"{zlib.crc32(data):08x}:{len(data)}")
    return " ".join(parts)


def stamp_path(name: str) -> str:
    return os.path.join(HERE, name + ".build")


def is_current(name: str) -> bool:
    """Whether an extension module of ``name`` exists and was built from the current source."""
    try:
        with open(stamp_path(name), encoding="ascii") as f:
            return f.read().strip() == source_hash(name)
    except OSError:
        return False


def load(name: str):
    """``flowcore.mermaid.<name>``: the compiled module when current, else the plain one."""
    full = f"{__package__}.{name}"
    if full in sys.modules:
        return sys.modules[full]
    if is_current(name):
        try:
            return importlib.import_module(full)  # an extension module wins over the .py of the same name
        except ImportError:
            pass
    return plain(name, full)


def plain(name: str, module_name: str | None = None):
    """The ``.py`` of ``name`` run by Python, even where a compiled build exists (the tests compare the two)."""
    import importlib.util  # (not at the top: it costs ~9 ms of every start, and the compiled build needs none)

    module_name = module_name or f"{__package__}._plain_{name}"
    spec = importlib.util.spec_from_file_location(module_name, os.path.join(HERE, name + ".py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module
