"""The studies' smoke tests use the library tests' fixtures (the offline data mirror, a per-session index cache, one
torch thread, the thread count restored after each test)."""

from tests.conftest import _torch_threads_restored, irds_home, single_thread, tite_cache  # noqa: F401
