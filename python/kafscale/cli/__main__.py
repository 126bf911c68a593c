"""``python -m kafscale.cli``: the same as the ``kafscale`` command."""

import sys

from kafscale.cli import main

sys.exit(main())
