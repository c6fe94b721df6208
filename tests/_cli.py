"""``pyterrier-tite`` run inside the test process, for refusals that end before any real work (no interpreter start,
seconds each)."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess


def cli_here(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """``pyterrier-tite ARGS`` in this process: exit code, stdout, stderr. A ``SystemExit`` becomes the exit code (a
    message code is printed and exits 1, as Python does); any other exception propagates and fails the test, where a
    process would print a traceback. ``env`` is set for the call; the environment and torch's thread count (which a
    command changes) are restored."""
    import torch

    from pyterrier_tite.cli import main

    out, err, threads = io.StringIO(), io.StringIO(), torch.get_num_threads()
    saved = {k: os.environ.get(k) for k in env or {}}
    os.environ.update(env or {})
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(list(args))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
        if not isinstance(exc.code, int | None):
            err.write(f"{exc.code}\n")
    finally:
        torch.set_num_threads(threads)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return subprocess.CompletedProcess(list(args), code or 0, out.getvalue(), err.getvalue())
