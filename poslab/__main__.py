"""``python -m poslab``: the ``poslab`` command."""

import sys

from poslab.cli import main

sys.exit(main())
