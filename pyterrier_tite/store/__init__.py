"""The storage floor: everything that touches files and engines, and no model code or torch (where a build needs a
model, the encoder is passed in)."""
