"""Code generation for devices: `cuda` (toolkit lookup, device images) is the one target.

cpu kernels need none: the runtime brings their bodies.
"""
