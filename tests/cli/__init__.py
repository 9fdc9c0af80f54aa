"""The faces: the ``emq`` command line, the demo, and the README's examples."""
