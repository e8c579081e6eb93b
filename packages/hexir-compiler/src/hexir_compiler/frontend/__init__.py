"""Frontends: model formats brought in as a `hexir` graph (ONNX, behind the `onnx` extra)."""
