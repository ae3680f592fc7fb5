"""Flink's own web dashboard, served by the JobManager beside Millstream's page
(``rest.web.flink-dashboard: true``).

The dashboard is the Angular application Flink ships as static files under ``web/`` in its
``flink-dist`` jar (in the PyPI wheel ``apache-flink-libraries``: ``pyflink/lib/flink-dist-*.jar``).
It is served at ``/flink/``; the application calls the REST API relative to its page (its base
URL is "."), so the REST paths are served under ``/flink`` too. The jar is found where ``make
install`` puts Flink's CLI (``<venv>/flink-tools/pyflink``), under ``MILLSTREAM_FLINK_HOME``, or
in an importable ``pyflink`` package; nothing is downloaded.
"""
from __future__ import annotations

import importlib.util
import mimetypes
import os
import sys
import threading
import zipfile
from pathlib import Path

__all__ = ["DASHBOARD_PREFIX", "FlinkDashboard", "DashboardNotFound", "find_flink_dist"]

DASHBOARD_PREFIX = "/flink"
_WEB = "web/"


class DashboardNotFound(RuntimeError):
    """``rest.web.flink-dashboard`` is on but no flink-dist jar was found (the message says where it looked)."""


def _candidate_homes() -> list[Path]:
    homes = []
    if os.environ.get("MILLSTREAM_FLINK_HOME"):
        homes.append(Path(os.environ["MILLSTREAM_FLINK_HOME"]))
    homes.append(Path(sys.prefix) / "flink-tools" / "pyflink")
    spec = importlib.util.find_spec("pyflink") if "pyflink" not in sys.modules else None
    if spec is not None and spec.submodule_search_locations:
        homes.extend(Path(p) for p in spec.submodule_search_locations)
    return homes


def find_flink_dist() -> Path:
    """The ``flink-dist`` jar holding the dashboard; DashboardNotFound naming where it looked."""
    homes = _candidate_homes()
    for home in homes:
        jars = sorted((home / "lib").glob("flink-dist*.jar"))
        if jars:
            return jars[-1]
    raise DashboardNotFound(
        "rest.web.flink-dashboard is on, but no Flink distribution's lib/flink-dist-*.jar was found in "
        f"{', '.join(str(h) for h in homes)}: install the apache-flink-libraries wheel (`make install` puts it "
        "under .venv/flink-tools) or set MILLSTREAM_FLINK_HOME to a Flink distribution")


class FlinkDashboard:
    """The dashboard's files (about 15 MB), read from the jar once each on first request: the jar
    is large (its index alone takes a fifth of a second to read), so it is opened once and the
    files read are kept."""

    def __init__(self, jar: Path) -> None:
        self.jar = jar
        self._archive = zipfile.ZipFile(jar)
        self._files = {info.filename[len(_WEB):]: info for info in self._archive.infolist()
                       if info.filename.startswith(_WEB) and not info.is_dir()}
        if "index.html" not in self._files:
            self._archive.close()
            raise DashboardNotFound(f"{jar} holds no web/index.html: it is no Flink distribution with a dashboard")
        self._read: dict[str, tuple[bytes, str]] = {}
        self._lock = threading.Lock()

    def has(self, name: str) -> bool:
        """Whether ``name`` (a path below /flink/, "" for the index) is one of the dashboard's files."""
        return (name or "index.html") in self._files

    def read(self, name: str) -> tuple[bytes, str]:
        """Blocking the first time: a file's bytes and content type (KeyError if it is none of the
        dashboard's)."""
        name = name or "index.html"
        with self._lock:  # one reader of the archive at a time; each file is read once
            if name not in self._read:
                info = self._files[name]
                content_type = mimetypes.guess_type(info.filename)[0] or "application/octet-stream"
                self._read[name] = (self._archive.read(info), content_type)
            return self._read[name]

    def close(self) -> None:
        self._archive.close()
