"""Which build of the reader's hot modules runs: Cython's compile (``setup.py``, run by ``make``) when it was built
from the sources now on disk, else the ``.py`` files themselves. A stale build (a source edited since, a branch
switched) is never run: ``setup.py`` writes the hash of the sources it compiled next to each extension, and it must
match. The modules are used all compiled or all plain: a compiled module reads the others' C structs
(``convert`` reads ``flowdb``'s records)."""

from __future__ import annotations

import importlib
import os
import sys
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
MODULES = ("lalr", "flowdb", "convert")  # what setup.py compiles


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


def all_current() -> bool:
    """Whether every compiled module exists and was built from the current sources (checked once a process)."""
    global _ALL_CURRENT
    if _ALL_CURRENT is None:  # FLOWCORE_PLAIN_READER=1: run the .py files, as a machine without a compiler does
        _ALL_CURRENT = os.environ.get("FLOWCORE_PLAIN_READER") != "1" and all(is_current(m) for m in MODULES)
    return _ALL_CURRENT


_ALL_CURRENT: bool | None = None


def load(name: str):
    """``flowcore.mermaid.<name>``: the compiled module when all of them are current, else the plain one."""
    full = f"{__package__}.{name}"
    if full in sys.modules:
        return sys.modules[full]
    if all_current():
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
