"""The real servers the project starts: the embedded Valkey, private and shared."""
