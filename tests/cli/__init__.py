"""The faces: the ``emq`` command line, the demo, and the examples of the README and docs/."""
