"""EchoMQ's test suite: one folder per part of the library, shared support in ``tests.support``."""
