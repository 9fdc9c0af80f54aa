"""The substrate: keys, replies, the two executors, the script cache, states, admin, bounds,
events, connecting, secrets and TLS."""
