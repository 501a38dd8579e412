"""``python -m lightning_resumable_data.cli``: the same as the ``lrd`` command."""

import sys

from lightning_resumable_data.cli import main

sys.exit(main())
