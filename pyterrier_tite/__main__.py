"""``python -m pyterrier_tite ...`` is the ``pyterrier-tite`` command."""

from pyterrier_tite.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
