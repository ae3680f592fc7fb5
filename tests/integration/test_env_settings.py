"""Python requirements installed offline by pip in a process of its own, from the shipped bundle
(the settings' rules are tests/unit/test_env_settings.py)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from millstream.datastream import StreamExecutionEnvironment
from millstream.taskmanager import python_env

from tests.packages import requirements, tiny_sdist


def test_set_python_requirements_ships_one_bundle_that_installs_offline(tmp_path: Path) -> None:
    req, cache = requirements(tmp_path)
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_python_requirements(str(req), str(cache))
    bundles = [f for f in env.get_python_files() if os.path.basename(f) == python_env.REQUIREMENTS_ARTIFACT]
    assert len(bundles) == 1
    assert env.get_configuration().to_dict()["python.requirements"] == f"{req}#{cache}"
    # what the first task on a machine does: install into the job's directory, offline
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    bundle = job_dir / python_env.REQUIREMENTS_ARTIFACT
    bundle.write_bytes(Path(bundles[0]).read_bytes())
    other = job_dir / "helpers.py"
    paths = python_env.prepare({}, [str(job_dir), str(bundle)])
    assert paths == [str(job_dir / "python-requirements"), str(job_dir)]
    assert (job_dir / "python-requirements" / "tinypkg" / "__init__.py").read_text() == "VALUE = '42'\n"
    assert python_env.prepare({}, [str(bundle)]) == [str(job_dir / "python-requirements")]  # done once
    assert not other.exists()


def test_a_requirement_that_cannot_be_installed_names_pips_error(tmp_path: Path) -> None:
    req, cache = requirements(tmp_path)
    req.write_text("tinypkg==2.0\n")
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_python_requirements(str(req), str(cache))
    bundle = next(f for f in env.get_python_files() if f.endswith(python_env.REQUIREMENTS_ARTIFACT))
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    (job_dir / python_env.REQUIREMENTS_ARTIFACT).write_bytes(Path(bundle).read_bytes())
    with pytest.raises(python_env.PythonEnvironmentError, match="(?s)requirements failed.*tinypkg==2.0"):
        python_env.prepare({}, [str(job_dir / python_env.REQUIREMENTS_ARTIFACT)])
    with pytest.raises(FileNotFoundError, match="no such requirements file"):
        env.set_python_requirements(str(tmp_path / "missing.txt"))
    with pytest.raises(FileNotFoundError, match="no such cache directory"):
        env.set_python_requirements(str(req), str(tmp_path / "nowhere"))


def test_an_sdist_in_the_requirements_cache_installs_offline(tmp_path: Path, monkeypatch) -> None:
    # PyFlink installs requirements from the cache directory without reaching an index, sdists too
    cache = tmp_path / "cache"
    cache.mkdir()
    tiny_sdist(cache)
    req = tmp_path / "requirements.txt"
    req.write_text("python-package1==0.0.0\n")
    for proxy in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
        monkeypatch.setenv(proxy, "http://127.0.0.1:9")  # any network use fails fast
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_python_requirements(str(req), str(cache))
    bundle = next(f for f in env.get_python_files() if f.endswith(python_env.REQUIREMENTS_ARTIFACT))
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    (job_dir / python_env.REQUIREMENTS_ARTIFACT).write_bytes(Path(bundle).read_bytes())
    [target] = python_env.prepare({}, [str(job_dir / python_env.REQUIREMENTS_ARTIFACT)])
    assert "def plus" in (Path(target) / "python_package1" / "__init__.py").read_text()
