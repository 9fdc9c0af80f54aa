"""``python -m echomq``: the ``emq`` command."""

from echomq.cli import main

main()
