"""The archive: the fold, the floor, the remote, restore and verify."""
