"""``python -m echomq.archive [DIR]``: a local SeaweedFS S3 endpoint in the foreground."""

from echomq.archive.seaweed import main

main()
