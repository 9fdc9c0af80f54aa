"""The worker: the Consumer's threads and held leases, worker processes, and the chaos soak."""
