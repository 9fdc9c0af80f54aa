"""``python -m echomq.archive ...``: the archive's commands, the same as ``emq archive ...``.

(The SeaweedFS launcher lives at ``python -m echomq.servers.seaweed``.)
"""

from echomq.cli.archive import archive

archive(prog_name="python -m echomq.archive")
