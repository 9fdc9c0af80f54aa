"""The programming model: an :class:`~echomq.app.app.App` of tasks, routed by name to
one worker over many queues (``echomq.App``, ``@app.task``, ``app.worker``)."""
