"""``python -m echomq.queue [DIR]``: a private Valkey in the foreground (prints its URL)."""

from echomq.servers.valkey import main

main()
