"""Build the compiled reader: `python setup.py build_ext --inplace` (make does it; see README Dependencies).

Cython compiles the reader's hot modules (types in their .pxd files) into extension modules next to them: the lexer
and LALR driver (flowcore/mermaid/lalr.py), the graph its actions build (flowdb.py) and its conversion to the workflow
model (convert.py). Without a C compiler or Cython the build is skipped and Python runs the .py files themselves: same
answers, slower.
"""

import importlib.util

from setuptools import setup

try:
    from Cython.Build import cythonize
except ImportError:  # pragma: no cover - Cython is pinned in requirements.txt
    raise SystemExit("Cython is not installed: the reader runs as plain Python") from None

# flowcore.mermaid.compiled lists the modules and checks their stamps (loaded alone: importing the flowcore package
# would import the reader being built)
_spec = importlib.util.spec_from_file_location("_compiled", "flowcore/mermaid/compiled.py")
_compiled = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_compiled)

setup(
    name="flowcore-speedups",
    ext_modules=cythonize([f"flowcore/mermaid/{name}.py" for name in _compiled.MODULES], language_level=3,
                          quiet=True,
                          compiler_directives={"boundscheck": False, "wraparound": True, "initializedcheck": False,
                                               "annotation_typing": False}),
    py_modules=[],
    packages=[],
)

# The stamps flowcore.mermaid.compiled checks: an extension runs only while its source still hashes to this.
for name in _compiled.MODULES:
    with open(_compiled.stamp_path(name), "w", encoding="ascii") as f:
        f.write(_compiled.source_hash(name) + "\n")
