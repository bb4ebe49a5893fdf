"""``python -m engine.cli``: the same as the ``trackscope`` command."""

import sys

from engine.cli.entry import main

if __name__ == "__main__":
    sys.exit(main())
