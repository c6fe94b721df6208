"""The sparse (windowed, asymmetric) cross-encoder (imports nothing: a module loads what it needs)."""
