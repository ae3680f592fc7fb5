"""``add_python_archive``: PyFlink extracts the zip into the Python worker's working directory
under ``target_dir``, or without one under the archive's file name; only zip archives are supported.
Here: what the client ships, and what a task does with it (extract, run in that directory, return)."""
from __future__ import annotations

import os
import threading
import zipfile

import pytest

from millstream.client.execution import job_artifacts
from millstream.datastream import StreamExecutionEnvironment
from millstream.proto import cluster_pb2 as cpb
from millstream.runtime.artifact_names import InvalidArtifactError
from millstream.taskmanager.archives import extract_archive, task_working_directory


def _zip(path, files: dict[str, str]) -> str:
    with zipfile.ZipFile(path, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
    return str(path)


@pytest.fixture
def archive(tmp_path) -> str:
    return _zip(tmp_path / "data.zip", {"data.txt": "hello", "sub/more.txt": "more"})


def test_the_archive_travels_with_its_target_or_its_file_name(tmp_path, archive) -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.add_python_archive(archive, "data")
    other = _zip(tmp_path / "other.zip", {"x": "y"})
    env.add_python_archive(other)
    shipped = {a.name: a.archive_target for a in job_artifacts(env._python_archives) if a.name.endswith(".zip")}
    assert shipped == {"data.zip": "data", "other.zip": "other.zip"}  # (beside the main script)
    assert env.get_python_files() == []  # not modules: nothing on sys.path


def test_bad_archives_and_targets_are_rejected_when_added(tmp_path, archive) -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    with pytest.raises(FileNotFoundError, match="no such file"):
        env.add_python_archive(str(tmp_path / "missing.zip"))
    not_zip = tmp_path / "notes.zip"
    not_zip.write_text("plain text")
    with pytest.raises(ValueError, match="is not a zip archive"):
        env.add_python_archive(str(not_zip))
    for target in ("a/b", "..", "", "/abs"):
        with pytest.raises(InvalidArtifactError, match="Archive target directory"):
            env.add_python_archive(archive, target)


def _tdd(**targets: str) -> cpb.TaskDeploymentDescriptor:
    return cpb.TaskDeploymentDescriptor(
        artifacts=[cpb.ArtifactRef(name=name, blob_key="k", archive_target=t) for name, t in targets.items()])


def test_a_task_runs_in_the_directory_holding_the_extracted_archive_and_returns(tmp_path, archive) -> None:
    module_dir = str(tmp_path)
    before = os.getcwd()
    tdd = _tdd(**{"data.zip": "data"})
    with task_working_directory(tdd, [module_dir, archive]) as importable:
        assert importable == [module_dir]  # the zip is not put on sys.path
        with open("data/data.txt") as f:
            assert f.read() == "hello"
        assert open(os.path.join("data", "sub", "more.txt")).read() == "more"
    assert os.getcwd() == before


def test_a_job_without_archives_keeps_the_working_directory(tmp_path) -> None:
    before = os.getcwd()
    with task_working_directory(_tdd(), [str(tmp_path)]) as importable:
        assert importable == [str(tmp_path)] and os.getcwd() == before


def test_concurrent_tasks_extract_once_and_see_whole_archives(tmp_path) -> None:
    big = _zip(tmp_path / "big.zip", {f"f{i}.txt": str(i) * 1000 for i in range(200)})
    seen: list[int] = []

    def extract() -> None:
        workdir = extract_archive(big, "big")
        seen.append(len(os.listdir(os.path.join(workdir, "big"))))

    threads = [threading.Thread(target=extract) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == [200] * 4
    assert sorted(os.listdir(os.path.join(tmp_path, "workdir"))) == ["big"]  # no leftovers


def test_member_names_cannot_escape_the_target_directory(tmp_path) -> None:
    evil = _zip(tmp_path / "evil.zip", {"../../escaped.txt": "x", "/abs.txt": "y"})
    workdir = extract_archive(evil, "t")
    assert not (tmp_path / "escaped.txt").exists() and not os.path.exists("/abs.txt")
    found = [os.path.join(d, f) for d, _, fs in os.walk(os.path.join(workdir, "t")) for f in fs]
    assert sorted(os.path.basename(p) for p in found) == ["abs.txt", "escaped.txt"]


def test_overlapping_tasks_of_one_worker_never_return_to_a_deleted_workdir(tmp_path) -> None:
    """Slot placement runs a slot's subtasks as threads of one worker, and the working directory is
    the process's: a task that ends after an earlier one of another job must not change back into
    that job's workdir, which the job's cleanup may have deleted."""
    import shutil
    from millstream.taskmanager import archives

    (tmp_path / "job_a").mkdir()
    (tmp_path / "job_b").mkdir()
    a = _zip(tmp_path / "job_a" / "a.zip", {"a.txt": "a"})
    b = _zip(tmp_path / "job_b" / "b.zip", {"b.txt": "b"})
    task_a = task_working_directory(_tdd(**{"a.zip": "a"}), [a])
    task_b = task_working_directory(_tdd(**{"b.zip": "b"}), [b])
    task_a.__enter__()
    task_b.__enter__()
    assert open("b/b.txt").read() == "b"  # the task that entered last
    task_a.__exit__(None, None, None)
    assert open("b/b.txt").read() == "b"  # b still runs in its own workdir
    shutil.rmtree(tmp_path / "job_a")  # job a ended and its artifacts were cleaned up
    task_b.__exit__(None, None, None)
    assert os.getcwd() == archives._WORKER_HOME
