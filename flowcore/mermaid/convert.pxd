# Types for Cython's compile of convert.py (setup.py): the same source runs as plain Python without it.
import cython

from flowcore.mermaid.flowdb cimport FlowEdge, Vertex


@cython.locals(i=Py_ssize_t, v=Vertex, bracketed=bint)
cpdef add_nodes(dict nodes, list verts, list lines, list columns, dict click_targets, dict class_defs, list own)

@cython.locals(i=Py_ssize_t, e=FlowEdge)
cpdef add_edges(list out, list edges, list lines, list columns, Py_ssize_t first, dict click_targets)

@cython.locals(k=Py_ssize_t, i=Py_ssize_t, s=Py_ssize_t, m=Py_ssize_t, j=Py_ssize_t, lo=Py_ssize_t, nl=Py_ssize_t,
               hi=Py_ssize_t, mid=Py_ssize_t,
               p=cython.longlong, offs="long long[:]", new_start="long long[:]", old_start="long long[:]",
               linear="signed char[:]", line_start="long long[:]")
cpdef tuple lines_columns(list steps, list starts, list poss, Py_ssize_t n)
