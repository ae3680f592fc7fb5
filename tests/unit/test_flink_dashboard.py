"""Flink's dashboard files read from a flink-dist jar (rest.web.flink-dashboard): found, served
from the jar's web/ folder, and a clear error without a jar or without a dashboard in it."""
from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from millstream.jobmanager.rest import flink_dashboard
from millstream.jobmanager.rest.flink_dashboard import DashboardNotFound, FlinkDashboard, find_flink_dist


def _jar(path: Path, files: dict[str, bytes]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return path


def test_the_dashboard_files_come_from_the_jars_web_folder(tmp_path: Path) -> None:
    jar = _jar(tmp_path / "lib" / "flink-dist-2.3.0.jar",
               {"web/index.html": b"<html>", "web/main.abc.js": b"js", "org/apache/X.class": b"\xca\xfe"})
    dashboard = FlinkDashboard(jar)
    assert dashboard.has("") and dashboard.has("main.abc.js") and not dashboard.has("org/apache/X.class")
    assert dashboard.read("") == (b"<html>", "text/html")
    data, content_type = dashboard.read("main.abc.js")
    assert data == b"js" and "javascript" in content_type
    with pytest.raises(KeyError):
        dashboard.read("nope.js")
    dashboard.close()


def test_a_jar_without_a_dashboard_is_refused(tmp_path: Path) -> None:
    jar = _jar(tmp_path / "flink-dist.jar", {"org/apache/X.class": b"\xca\xfe"})
    with pytest.raises(DashboardNotFound, match="holds no web/index.html"):
        FlinkDashboard(jar)


def test_the_jar_is_found_under_millstream_flink_home_or_the_error_says_where_it_looked(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "flink"
    jar = _jar(home / "lib" / "flink-dist-2.3.0.jar", {"web/index.html": b""})
    monkeypatch.setenv("MILLSTREAM_FLINK_HOME", str(home))
    assert find_flink_dist() == jar
    monkeypatch.setenv("MILLSTREAM_FLINK_HOME", str(tmp_path / "empty"))
    monkeypatch.setattr(flink_dashboard, "_candidate_homes", lambda: [tmp_path / "empty"])
    with pytest.raises(DashboardNotFound, match=f"rest.web.flink-dashboard is on.*{tmp_path / 'empty'}"):
        find_flink_dist()
