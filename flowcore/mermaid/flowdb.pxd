# Types for Cython's compile of flowdb.py (setup.py): the same source runs as plain Python without it.
import cython

cdef class Vertex:
    cdef public object id, text, label_type, type, props
    cdef public list styles, classes
    cdef public dict data
    cdef public Py_ssize_t pos
    cdef public bint labeled

cdef class FlowEdge:
    cdef public object start, end, type, stroke, length, text, label_type, id, style, interpolate
    cdef public bint user_id
    cdef public list classes
    cdef public dict data
    cdef public Py_ssize_t pos

cdef class SubGraph:
    cdef public object id, title, dir, label_type
    cdef public list nodes, classes
    cdef public Py_ssize_t pos

cdef class FlowDB:
    cdef public dict vertices, classes, sub_lookup, tooltips, _edge_ids, _pair_count
    cdef public list edges, subgraphs, clicks, relabels, kept_statements
    cdef public object direction, default_style, default_interpolate, acc_title, acc_descr
    cdef public bint first_graph_flag
    cdef public Py_ssize_t sub_count, cur_pos
    cdef public set _claimed

    # the grammar's actions call these as C methods (lalr.pxd types its db as FlowDB)
    cpdef bint first_graph(self)
    @cython.locals(v=Vertex, edge=FlowEdge)
    cpdef add_vertex(self, object vid, object text=*, object vtype=*, object styles=*, object classes=*,
                     object dir_=*, object props=*, object shape_data=*)
    cpdef add_link(self, list starts, list ends, dict link)
    @cython.locals(v=Vertex, e=FlowEdge, n=Py_ssize_t)
    cpdef _add_single_link(self, object start, object end, dict link, object lid)
    @cython.locals(v=Vertex, e=FlowEdge, s=SubGraph)
    cpdef set_class(self, object ids, object cls)
