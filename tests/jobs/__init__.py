"""The lifecycle verbs above the substrate: extend and the stalled ladder, cancel, the
stalled sweep's fallback, and the batch scheduler."""
