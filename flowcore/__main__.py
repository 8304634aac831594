"""``python -m flowcore``: the command line (flowcore/cli/main.py).

The process starts with the cyclic garbage collector off: the imports allocate tens of thousands of objects that live
as long as the process (modules, classes, the grammar's tables), and collecting among them as they are made cost ~7%
of a ``check``. Once the command's modules are imported they are frozen (``gc.freeze``: never scanned again) and the
collector runs as usual for the command itself.
"""

import gc
import sys

gc.disable()
from flowcore.cli.main import parse_args, run  # noqa: E402 - after the collector is off

args = parse_args()
gc.freeze()
gc.enable()
sys.exit(run(args))
