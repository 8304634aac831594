# Types for Cython's compile of lalr.py (setup.py): the same source runs as plain Python without it.
import cython

from flowcore.mermaid.flowdb cimport FlowDB

@cython.locals(k=Py_ssize_t)
cpdef object reduce_action(object r, FlowDB db, int prod, list v, object p, Py_ssize_t top, int n)

cdef inline bint _is_word(Py_ssize_t ch)

@cython.locals(d=dict)
cpdef dict destruct_link(object end, object start=*)

@cython.locals(length=Py_ssize_t, pos=Py_ssize_t, tok_pos=Py_ssize_t, last_shift_pos=Py_ssize_t,
               state=Py_ssize_t, sym=Py_ssize_t, action=cython.int, how=cython.int, sem=cython.int, prod=cython.int,
               n=cython.int, _k=Py_ssize_t, lhs=Py_ssize_t, goto=Py_ssize_t, slot=Py_ssize_t, mask=Py_ssize_t,
               bit=Py_ssize_t, kind=cython.int, tok=cython.int, rule=Py_ssize_t, ns=Py_ssize_t, w=Py_ssize_t,
               s=Py_ssize_t, j=Py_ssize_t, i=Py_ssize_t, end=Py_ssize_t, sid=Py_ssize_t, cls=Py_ssize_t,
               e=cython.int, ch=Py_ssize_t, cond=Py_ssize_t, masks=Py_ssize_t, width=Py_ssize_t, npairs=Py_ssize_t, sp=Py_ssize_t,
               cap=Py_ssize_t, snap_state=Py_ssize_t, snap_depth=Py_ssize_t, done=bint, code=str, flat="const int[:]", plhs="const int[:]",
               plen="const int[:]", psem="const int[:]", rule_kind="const int[:]", rule_tok="const int[:]",
               rule_cond="const int[:]", trans="const int[:]", start_tab="const int[:]",
               ascii_cls="const int[:]", bmp="const short[:]", chars="const unsigned int[:]", states="int[:]", positions="long long[:]", values=list,
               cstack=list, db=FlowDB, next_word="long long[:]", next_stop="long long[:]", pairs=list)
cpdef run(r)
