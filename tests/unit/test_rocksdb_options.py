"""EmbeddedRocksDBStateBackend's set_predefined_options and set_options (PyFlink's API, a Python
RocksDBOptionsFactory in place of a Java one): the job's configuration carries them to the task,
whose RocksDB opens with them. What RocksDB really applied is read back from the OPTIONS file it
writes into the opened database's directory."""
from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from millstream.datastream import EmbeddedRocksDBStateBackend, PredefinedOptions, StreamExecutionEnvironment
from millstream.datastream.state_backend import RocksDBOptionsFactory
from millstream.runtime.keygroups import KeyGroupRange
from millstream.runtime.state.backends import KeyedBackendFactory
from millstream.runtime.state.rocksdb_backend import RocksDBOptions, TaskRocksDB


class SmallFilesFactory(RocksDBOptionsFactory):
    """Applied after the predefined profile: its settings win."""

    def create_db_options(self, current_options: Any, handles_to_close: list[Any]) -> Any:
        current_options.set_max_background_jobs(3)
        return current_options

    def create_column_options(self, current_options: Any, handles_to_close: list[Any]) -> Any:
        current_options.set_target_file_size_base(8 << 20)
        return current_options


class NotAFactory:
    pass


def applied(db_dir: str) -> dict[str, set[str]]:
    """option name -> the values in the newest OPTIONS file RocksDB wrote (every section)."""
    files = sorted(Path(db_dir).glob("OPTIONS-*"), key=lambda p: int(p.name.split("-")[1]))
    out: dict[str, set[str]] = {}
    for line in files[-1].read_text().splitlines():
        m = re.match(r"\s*([a-z_]+)=(.*)$", line)
        if m:
            out.setdefault(m.group(1), set()).add(m.group(2).strip())
    return out


def _task_db(tmp_path: Path, backend: EmbeddedRocksDBStateBackend, expect: dict[str, str] | None = None) -> TaskRocksDB:
    """A task's RocksDB as a job with ``backend`` opens it: through the job's configuration."""
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_state_backend(backend)
    params = {k: str(v) for k, v in env.get_configuration().to_dict().items()}
    for key, value in (expect or {}).items():
        assert params.get(key) == value, (key, params)
    params["state.backend.rocksdb.localdir"] = str(tmp_path)
    task_env = SimpleNamespace(job_parameters=params, job_id="j", task_name="t", subtask_index=0, attempt_number=0,
                               max_parallelism=128, parallelism=1, key_group_range=KeyGroupRange(0, 127),
                               now_ms=lambda: 0)
    factory = KeyedBackendFactory(task_env)
    factory.create("op").get_value_state  # noqa: B018 - opens the task's RocksDB
    db = factory.db
    db.column_family("op/some-state")  # a column family opened with the same options
    return db


def test_a_predefined_profile_reaches_the_tasks_rocksdb(tmp_path: Path) -> None:
    backend = EmbeddedRocksDBStateBackend()
    backend.set_predefined_options(PredefinedOptions.SPINNING_DISK_OPTIMIZED_HIGH_MEM)
    assert backend.get_predefined_options() is PredefinedOptions.SPINNING_DISK_OPTIMIZED_HIGH_MEM
    db = _task_db(tmp_path, backend)
    o = applied(db.path)
    assert o["max_background_jobs"] == {"4"} and o["max_open_files"] == {"-1"}
    assert o["block_size"] == {"131072"} and o["target_file_size_base"] == {"268435456"}
    assert o["max_bytes_for_level_base"] == {"1073741824"} and o["min_write_buffer_number_to_merge"] == {"3"}
    assert o["level_compaction_dynamic_level_bytes"] == {"true"} and o["write_buffer_size"] == {"67108864"}
    db.close()


def test_the_default_profile_changes_nothing(tmp_path: Path) -> None:
    backend = EmbeddedRocksDBStateBackend()
    assert backend.get_predefined_options() is PredefinedOptions.DEFAULT
    db = _task_db(tmp_path, backend)
    o = applied(db.path)
    assert o["max_background_jobs"] == {"2"} and o["block_size"] == {"4096"}
    db.close()


def test_spinning_disk_and_flash_profiles(tmp_path: Path) -> None:
    db = TaskRocksDB(str(tmp_path / "a"), RocksDBOptions(str(tmp_path), predefined="SPINNING_DISK_OPTIMIZED"))
    o = applied(db.path)
    assert o["max_background_jobs"] == {"4"} and o["level_compaction_dynamic_level_bytes"] == {"true"}
    assert o["compaction_style"] == {"kCompactionStyleLevel"}
    db.close()
    db = TaskRocksDB(str(tmp_path / "b"), RocksDBOptions(str(tmp_path), predefined="flash_ssd_optimized"))
    o = applied(db.path)
    assert o["max_background_jobs"] == {"4"} and o["max_open_files"] == {"-1"} and o["block_size"] == {"4096"}
    db.close()


def test_an_options_factory_is_applied_on_top_of_the_profile(tmp_path: Path) -> None:
    backend = EmbeddedRocksDBStateBackend()
    backend.set_predefined_options(PredefinedOptions.SPINNING_DISK_OPTIMIZED_HIGH_MEM)
    backend.set_options(f"{__name__}.SmallFilesFactory")
    assert backend.get_options() == f"{__name__}.SmallFilesFactory"
    db = _task_db(tmp_path, backend, {"state.backend.rocksdb.predefined-options": "SPINNING_DISK_OPTIMIZED_HIGH_MEM",
                                      "state.backend.rocksdb.options-factory": f"{__name__}.SmallFilesFactory"})
    o = applied(db.path)
    assert o["max_background_jobs"] == {"3"} and o["target_file_size_base"] == {str(8 << 20)}
    assert o["block_size"] == {"131072"}  # the rest of the profile stays
    db.close()


def test_bad_options_are_refused_naming_the_problem() -> None:
    backend = EmbeddedRocksDBStateBackend()
    with pytest.raises(ValueError, match="no.such.module.Factory"):
        backend.set_options("no.such.module.Factory")
    with pytest.raises(ValueError, match="is not a RocksDBOptionsFactory"):
        backend.set_options(f"{__name__}.NotAFactory")
    with pytest.raises(ValueError, match="fully-qualified"):
        backend.set_options("Factory")
    with pytest.raises(TypeError, match="PredefinedOptions"):
        backend.set_predefined_options("SPINNING_DISK_OPTIMIZED")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="predefined-options"):
        RocksDBOptions("/tmp", predefined="FAST")
