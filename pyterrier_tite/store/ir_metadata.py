"""The ``ir-metadata.yml`` beside a run (https://www.ir-metadata.org; docs/tirex.md): tirex-tracker's record (the
``tirex`` extra) completed with the run's tag, pyterrier-tite and the settings, else a short record::

    with tracked_run("pyterrier-tite.my-model") as record:
        results = ...  # the work measured
    text = render("pyterrier-tite.my-model", {"task": "rerank", "model": "me/model"}, record.tracked)
"""

from __future__ import annotations

import json
import platform
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path


@dataclass
class RunRecord:
    """What :func:`tracked_run` measured: ``tracked`` is tirex-tracker's ir_metadata as a dict (None without it)."""

    tracked: dict | None = None


@contextmanager
def tracked_run(system: str | None = None) -> Iterator[RunRecord]:
    """Measure the block with tirex-tracker (when installed) into a scratch folder, never beside the run (its code
    archive included); afterwards ``record.tracked`` holds its ir_metadata."""
    record = RunRecord()
    try:
        import tirex_tracker as tracker
    except ImportError:
        tracker = None
    with tempfile.TemporaryDirectory(prefix="pyterrier-tite-ir-metadata-") as scratch:
        target = Path(scratch) / "ir-metadata.yml"
        handle = _start(tracker, target, system) if tracker is not None else None
        try:
            yield record
        finally:
            if handle is not None:
                record.tracked = _stop(handle, target)


def _start(tracker, target: Path, system: str | None):
    """A started tracking handle, or None (with a warning) when the tracker cannot start on this machine."""
    measures = set(tracker.ALL_MEASURES) - {tracker.Measure.GIT_ARCHIVE_PATH}  # no zip of the working directory
    try:
        return tracker.tracking(
            measures=measures, system_name=system, export_file_path=target,
            export_format=tracker.ExportFormat.IR_METADATA,
        )  # fmt: skip
    except Exception as exc:  # the native library cannot start here (platform, permissions)
        warnings.warn(f"tirex-tracker could not start ({exc}); ir-metadata.yml is the short record", stacklevel=3)
        return None


def _stop(handle, target: Path) -> dict | None:
    import yaml

    try:
        handle.stop()
        tracked = yaml.safe_load(target.read_text(encoding="utf-8"))
    except Exception as exc:  # a failed export must not lose the run: fall back to the short record
        warnings.warn(f"tirex-tracker could not export ({exc}); ir-metadata.yml is the short record", stacklevel=3)
        return None
    if not isinstance(tracked, dict):
        return None
    source = tracked.get("implementation", {}).get("source")
    if isinstance(source, dict):  # the code archive stayed in the scratch folder
        source.pop("archive path", None)
        source.pop("archive", None)
    return tracked


def render(system: str, settings: dict, tracked: dict | None = None) -> str:
    """The text of ``ir-metadata.yml``: ``tracked`` completed, else :func:`hand_written`."""
    if tracked is None:
        return hand_written(system, settings)
    import yaml

    import pyterrier_tite

    record = dict(tracked)
    record["tag"] = system
    software = {"name": "pyterrier-tite", "version": pyterrier_tite.__version__}
    record.setdefault("implementation", {}).setdefault("source", {}).update(software)
    method = record.get("method") if isinstance(record.get("method"), dict) else {}
    record["method"] = {**method, **settings}
    if "input" in settings:
        record.setdefault("data", {})["test collection"] = {"source": str(settings["input"])}
    return yaml.safe_dump(record, sort_keys=False, allow_unicode=True)


def hand_written(system: str, settings: dict) -> str:
    """A small ir_metadata record without the tracker: tag, date, software, platform and the run's settings."""
    import pyterrier_tite

    lines = [
        "schema version: '0.1'",
        f"tag: {json.dumps(system)}",
        f"date: {json.dumps(datetime.now(timezone.utc).isoformat(timespec='seconds'))}",
        "implementation:",
        "  source:",
        "    name: pyterrier-tite",
        f"    version: {json.dumps(pyterrier_tite.__version__)}",
        "platform:",
        f"  python: {json.dumps(platform.python_version())}",
        f"  machine: {json.dumps(platform.machine())}",
        "method:",
        *(f"  {key}: {json.dumps(value)}" for key, value in settings.items()),
    ]
    return "\n".join(lines) + "\n"
