# Types for Cython's compile of lalr.py (setup.py): the same source runs as plain Python without it.
import cython

cdef class _Condition:
    cdef public list rules, patterns, pairs, ahead, slots
    cdef public object buckets
    cdef public Py_ssize_t width, uses
    cdef public object join

cpdef object reduce_action(object r, int prod, list v, list poss, int n)

@cython.locals(length=Py_ssize_t, pos=Py_ssize_t, tok_pos=Py_ssize_t, last_shift_pos=Py_ssize_t,
               state=Py_ssize_t, sym=Py_ssize_t, action=cython.int, how=cython.int, prod=cython.int,
               n=cython.int, lhs=Py_ssize_t, goto=Py_ssize_t, bucket=Py_ssize_t, slot=Py_ssize_t, bit=Py_ssize_t,
               kind=cython.int, tok=cython.int, rule=Py_ssize_t, ns=Py_ssize_t, w=Py_ssize_t, s=Py_ssize_t,
               j=Py_ssize_t, done=bint, code=str, flat="const int[:]", plhs="const int[:]", plen="const int[:]",
               psem="const int[:]", rule_kind="const int[:]", rule_tok="const int[:]", states=list, values=list,
               poss=list, stack=list, cond=_Condition, entry=tuple, rule_state=list, next_word=list,
               next_stop=list)
cpdef run(r)
