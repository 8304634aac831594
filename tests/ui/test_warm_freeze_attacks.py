"""Attacks on the warm-up's gc.freeze (flowcore/ui/warm.py settle()): what page views make after it is still
collected, memory does not grow with the number of views, and the collector stays on. Run in a fresh
interpreter (a frozen pytest process would hide its own garbage from every later test)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

CODE = r"""
import gc, json, weakref
from flowcore.ui.warm import settle

class Node:  # a session's state as a script run leaves it: objects in reference cycles
    def __init__(self, parent=None):
        self.parent, self.children, self.blob = parent, [], bytearray(1024)
        if parent is not None:
            parent.children.append(self)

def view():  # one page view's garbage: 2,000 objects in cycles, 500 KB
    root = Node()
    for _ in range(500):
        Node(root)
    return weakref.ref(root)

settle()
settle()  # twice (a second warm-up) is no harm
frozen = gc.get_freeze_count()
gc.collect()
base = len(gc.get_objects())
alive, sizes = 0, []
for i in range(300):
    ref = view()
    gc.collect()  # what Streamlit does after every script run
    alive += ref() is not None
    if i % 50 == 49:
        sizes.append(len(gc.get_objects()) - base)
print(json.dumps({"enabled": gc.isenabled(), "alive": alive, "growth": sizes,
                  "frozen_after": gc.get_freeze_count() - frozen}))
"""


def test_what_page_views_make_after_the_freeze_is_collected_and_memory_stays_flat():
    out = subprocess.run([sys.executable, "-c", CODE], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["enabled"] is True
    assert got["alive"] == 0  # every view's cycles collected: none is frozen with the warm-up
    assert got["frozen_after"] == 0  # the freeze happened once: later views never join the permanent generation
    assert max(got["growth"]) < 200, got["growth"]  # flat, not 300 views x 2,000 objects
