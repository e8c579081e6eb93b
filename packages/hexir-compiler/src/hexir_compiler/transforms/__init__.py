"""Passes, one per module; the module name is the pass name with underscores."""
