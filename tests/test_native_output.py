"""PISA's C-level logs are silenced while Python output (progress bars, prints) still arrives."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from pyterrier_tite.store.pisa_files import native_output_silenced

SCRIPT = textwrap.dedent(
    """
    import os, sys
    from pyterrier_tite.store.pisa_files import native_output_silenced
    with native_output_silenced():
        os.write(1, b"NATIVE-OUT\\n")
        os.write(2, b"NATIVE-ERR\\n")
        print("PY-OUT")
        print("PY-ERR", file=sys.stderr)
    os.write(1, b"AFTER\\n")
    """
)


def test_terminal_process_keeps_python_output_only():
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "PY-OUT" in done.stdout and "AFTER" in done.stdout and "NATIVE" not in done.stdout
    assert "PY-ERR" in done.stderr and "NATIVE" not in done.stderr


def test_captured_streams_keep_python_output_only(capfd):
    with native_output_silenced():
        os.write(1, b"NATIVE-OUT\n")
        print("PY-OUT")
    os.write(1, b"AFTER\n")
    out = capfd.readouterr().out
    assert "PY-OUT" in out and "AFTER" in out and "NATIVE" not in out


def test_disabled_lets_everything_through(capfd):
    with native_output_silenced(enabled=False):
        os.write(1, b"NATIVE-OUT\n")
    assert "NATIVE-OUT" in capfd.readouterr().out


def test_a_failing_block_attaches_the_native_output_to_its_error():
    try:
        with native_output_silenced():
            os.write(2, b"engine: fatal: cannot open fwd.doclex\n")
            raise RuntimeError("engine failed")
    except RuntimeError as exc:
        notes = "\n".join(getattr(exc, "__notes__", []))
    assert "cannot open fwd.doclex" in notes
