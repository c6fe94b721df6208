"""The schematic every transformer of this package shows (``pt.schematic``, ``pt.inspect``, notebooks), the name it
has in ``pt.Experiment`` (``str``) and its equality (``plan='tree'`` shares the prefixes that compare equal)."""

from __future__ import annotations

import os

#: characters ``pt.Experiment(..., save_dir=)`` refuses in a system name (``pyterrier.io.ok_filename``)
UNSAFE_IN_FILENAMES = ':"%<>^|?\\'


def filename_safe(text: str) -> str:
    """``text`` with what ``save_dir`` refuses replaced: ``/`` by ``--`` (as the hub cache does), others by ``_``."""
    text = text.replace("/", "--").replace(os.sep, "--")
    return "".join("_" if c in UNSAFE_IN_FILENAMES else c for c in text)


class NamedSchematic:
    """Label = the class name and no ``help_url`` lookup (PyTerrier would download a documentation inventory that
    does not list this package, and fail offline). ``str`` is the repr made safe as a file name: ``pt.Experiment``
    names systems (and, with ``save_dir``, files) by ``str``."""

    def schematic(self, *, input_columns=None) -> dict:
        return {"label": type(self).__name__, "help_url": None}

    def __str__(self) -> str:
        return filename_safe(repr(self))


class KeyedEquality:
    """``==`` / ``hash`` on :meth:`eq_key` (what determines the output), equal only within one class."""

    def eq_key(self) -> tuple:
        raise NotImplementedError

    def __eq__(self, other) -> bool:
        return type(other) is type(self) and other.eq_key() == self.eq_key()

    def __hash__(self) -> int:
        return hash((type(self).__name__, self.eq_key()))
