"""``python -m echomq.queue [DIR]``: a private Valkey in the foreground (prints its URL)."""

from echomq.queue.embedded import main

main()
