"""The storage floor: everything that touches files and engines, and no model code or torch (``tests/
test_architecture.py``). Where a build needs a model, the encoder is passed in. ARCHITECTURE.md's ``store/`` row says
what each module holds."""
