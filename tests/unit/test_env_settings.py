"""PyFlink's environment settings beyond parallelism: python requirements / executable, cached
files, the default local parallelism, the changelog flag, add_jars / add_classpaths."""
from __future__ import annotations

import logging
import os
import sys
import zipfile
from pathlib import Path

import pytest

from millstream.datastream import StreamExecutionEnvironment
from millstream.taskmanager import python_env


def tiny_wheel(directory: Path, value: str = "42") -> Path:
    """A pure-Python wheel made by hand (no build backend, no network): module ``tinypkg``."""
    wheel = directory / "tinypkg-1.0-py3-none-any.whl"
    files = {
        "tinypkg/__init__.py": f"VALUE = {value!r}\n",
        "tinypkg-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: tinypkg\nVersion: 1.0\n",
        "tinypkg-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{name},,\n" for name in files) + "tinypkg-1.0.dist-info/RECORD,,\n"
    with zipfile.ZipFile(wheel, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
        z.writestr("tinypkg-1.0.dist-info/RECORD", record)
    return wheel


def requirements(tmp_path: Path) -> tuple[Path, Path]:
    cache = tmp_path / "cache"
    cache.mkdir()
    tiny_wheel(cache)
    req = tmp_path / "requirements.txt"
    req.write_text("tinypkg==1.0\n")
    return req, cache


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


def test_python_executable_must_be_the_workers_own(tmp_path: Path) -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_python_executable("/opt/other/python3")
    conf = env.get_configuration().to_dict()
    assert conf["python.executable"] == "/opt/other/python3"
    with pytest.raises(python_env.PythonEnvironmentError, match="Spark workers run .*cannot choose another"):
        python_env.check_executable(conf)
    link = tmp_path / "python"
    link.symlink_to(sys.executable)
    python_env.check_executable({"python.executable": str(link)})  # the same interpreter: fine
    python_env.check_executable({})
    with pytest.raises(ValueError, match="path of a Python interpreter"):
        env.set_python_executable("")


def test_register_cached_file(tmp_path: Path) -> None:
    data = tmp_path / "data.csv"
    data.write_text("x\n")
    env = StreamExecutionEnvironment.get_execution_environment()
    env.register_cached_file(str(data), "data")
    assert env.get_cached_files() == [("data", str(data))]
    assert env.get_configuration().to_dict()["pipeline.cached-files"] == f"name:data,path:{data},executable:false"
    with pytest.raises(ValueError, match="registered already"):
        env.register_cached_file(str(data), "data")
    with pytest.raises(FileNotFoundError, match="no such file"):
        env.register_cached_file(str(tmp_path / "nope"), "other")


def test_changelog_flag_is_undefined_until_set_and_logged(caplog) -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    assert env.is_changelog_state_backend_enabled() is None
    with caplog.at_level(logging.INFO):
        env.enable_changelog_state_backend(True)
    assert env.is_changelog_state_backend_enabled() is True and "full snapshots" in caplog.text
    env.enable_changelog_state_backend(False)
    assert env.is_changelog_state_backend_enabled() is False
    with pytest.raises(TypeError):
        env.enable_changelog_state_backend("yes")  # type: ignore[arg-type]


def test_add_jars_and_classpaths_are_recorded_and_logged_as_ignored(caplog) -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    with caplog.at_level(logging.INFO):
        env.add_jars("file:///a.jar", "file:///b.jar").add_jars("file:///a.jar")
        env.add_classpaths("file:///classes/")
    conf = env.get_configuration().to_dict()
    assert conf["pipeline.jars"] == "file:///a.jar;file:///b.jar" and conf["pipeline.classpaths"] == "file:///classes/"
    assert "add_jars(file:///a.jar, file:///b.jar): ignored: a Millstream job has no JVM code" in caplog.text
    assert "add_classpaths(file:///classes/): ignored" in caplog.text
    assert not [r for r in caplog.records if r.levelno > logging.INFO]


def tiny_sdist(directory: Path) -> Path:
    """A source distribution (setup.py, no wheel) as PyFlink's cached-directory test ships one."""
    import io
    import tarfile

    sdist = directory / "python-package1-0.0.0.tar.gz"
    root = "python-package1-0.0.0"
    files = {
        f"{root}/setup.py": "from setuptools import setup\nsetup(name='python-package1', version='0.0.0', "
                            "packages=['python_package1'])\n",
        f"{root}/PKG-INFO": "Metadata-Version: 1.0\nName: python-package1\nVersion: 0.0.0\n",
        f"{root}/python_package1/__init__.py": "def plus(a, b):\n    return a + b\n",
    }
    with tarfile.open(sdist, "w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return sdist


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


def test_the_task_sees_its_python_executable_in_the_python_variable(monkeypatch) -> None:
    # PyFlink's Python workers find the job's python.executable in os.environ["python"]
    monkeypatch.setenv("python", "/usr/bin/worker-own")
    with python_env.executable_variable({"python.executable": "/opt/job/python3"}):
        assert os.environ["python"] == "/opt/job/python3"
    assert os.environ["python"] == "/usr/bin/worker-own"  # only for the task
    monkeypatch.delenv("python")
    with python_env.executable_variable({"python.executable": "/opt/job/python3"}):
        assert os.environ["python"] == "/opt/job/python3"
    assert "python" not in os.environ
    with python_env.executable_variable({}):
        assert "python" not in os.environ
