"""The storage floor: everything that touches files and engines, and no model code or torch (``tests/
test_architecture.py``). Where a build needs a model, the encoder is passed in.

- ``locks``: one writer per target; ``atomic``: all-or-nothing folder builds and file writes;
- ``values``: the id and text rules; ``text_files``: exact readers of UTF-8 lines, JSONL and whitespace tables;
- ``corpus``, ``topics``, ``qrels``, ``runs``: the files (or ir_datasets ids) commands read and write;
- ``pisa_files`` (checks), ``pisa_build`` (the text and the SPLADE ``toks`` writers), ``pisa_derived`` (opening
  retrievers); ``flex`` (the FlexIndex writer and retriever); ``sharding`` (encoding over ``torchrun`` ranks);
- ``index_info`` (what an index records of its model), ``packages`` (package URLs in, model packages out),
  ``cache`` (cache folders, the slug rule, per-model keys); ``tira`` and ``ir_metadata`` (TIREx inputs and outputs).
"""
