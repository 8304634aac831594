"""Build the compiled reader loop: `python setup.py build_ext --inplace` (make does it; see README Dependencies).

Cython compiles flowcore/mermaid/lalr.py (types in lalr.pxd) into an extension module next to it. Without a C
compiler or Cython the build is skipped and Python runs lalr.py itself: same answers, slower.
"""

import importlib.util

from setuptools import setup

try:
    from Cython.Build import cythonize
except ImportError:  # pragma: no cover - Cython is pinned in requirements.txt
    raise SystemExit("Cython is not installed: the reader runs as plain Python") from None

setup(
    name="flowcore-speedups",
    ext_modules=cythonize(["flowcore/mermaid/lalr.py"], language_level=3, quiet=True,
                          compiler_directives={"boundscheck": False, "wraparound": True, "initializedcheck": False,
                                               "annotation_typing": False}),
    py_modules=[],
    packages=[],
)

# The stamp flowcore.mermaid.compiled checks: the extension runs only while the source still hashes to this.
# (compiled.py is loaded alone: importing the flowcore package would import the reader being built.)
_spec = importlib.util.spec_from_file_location("_compiled", "flowcore/mermaid/compiled.py")
_compiled = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_compiled)
with open(_compiled.stamp_path("lalr"), "w", encoding="ascii") as f:
    f.write(_compiled.source_hash("lalr") + "\n")
