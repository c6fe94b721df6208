"""Start a 2-process data-parallel run on CPU (gloo) the way users do, with ``torchrun``, and fail with its stderr."""

from __future__ import annotations

import os
import subprocess
import sys


def torchrun(*args: str, processes: int = 2, timeout: int = 300) -> subprocess.CompletedProcess:
    """``torchrun --standalone --nproc_per_node N args...`` (a free port each time), one thread per process."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={processes}", *args]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return done
