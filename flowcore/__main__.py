import sys

from flowcore.cli.main import main

sys.exit(main())
