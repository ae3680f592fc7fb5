"""PyFlink's state backend and checkpoint storage names, mapped onto Millstream's heap keyed state
and its checkpoint directory (``execution.checkpointing.dir``)."""
from __future__ import annotations

import pytest

from millstream.common import Configuration
from millstream.datastream import (CheckpointStorage, EmbeddedRocksDBStateBackend, FileSystemCheckpointStorage,
                                   HashMapStateBackend,
                                   JobManagerCheckpointStorage, StateBackend, StreamExecutionEnvironment)


def test_set_and_get_the_hashmap_state_backend() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    assert env.get_state_backend() is None  # never set: the cluster decides, as in PyFlink
    assert env.set_state_backend(HashMapStateBackend()) is env
    backend = env.get_state_backend()
    assert isinstance(backend, HashMapStateBackend) and isinstance(backend, StateBackend)
    assert env.get_configuration().to_dict()["state.backend.type"] == "hashmap"  # reaches the job
    with pytest.raises(TypeError, match="needs a StateBackend"):
        env.set_state_backend("hashmap")  # type: ignore[arg-type]


def test_state_backend_type_from_the_configuration() -> None:
    conf = Configuration()
    conf.set_string("state.backend.type", "hashmap")
    assert isinstance(StreamExecutionEnvironment.get_execution_environment(conf).get_state_backend(), HashMapStateBackend)
    conf.set_string("state.backend.type", "rocksdb")
    assert isinstance(StreamExecutionEnvironment.get_execution_environment(conf).get_state_backend(),
                      EmbeddedRocksDBStateBackend)
    conf.set_string("state.backend.type", "forst")  # refused when the environment is built, named
    with pytest.raises(ValueError, match="state.backend.type: expected one of hashmap, rocksdb, got 'forst'"):
        StreamExecutionEnvironment.get_execution_environment(conf)
    with pytest.raises(ValueError, match="state.backend.type"):
        StreamExecutionEnvironment.get_execution_environment().configure(conf)


def test_a_cluster_configured_with_a_backend_millstream_lacks_is_refused() -> None:
    """What a JobManager or TaskManager loads (file, environment, -D) refuses it at once."""
    from millstream.runtime import config as cfg

    with pytest.raises(cfg.ConfigurationError, match="state.backend.type: expected one of hashmap, rocksdb, got 'forst'"):
        cfg.Configuration.from_dict({"state.backend.type": "forst"})
    assert cfg.Configuration.from_dict({"state.backend.type": "HashMap"}).get(cfg.STATE_BACKEND_TYPE) == "hashmap"
    assert cfg.Configuration.from_dict({"state.backend.type": "RocksDB"}).get(cfg.STATE_BACKEND_TYPE) == "rocksdb"
    with pytest.raises(cfg.ConfigurationError, match="state.backend.rocksdb.timer-service.factory"):
        cfg.Configuration.from_dict({"state.backend.rocksdb.timer-service.factory": "disk"})


def test_embedded_rocksdb_is_at_pyflinks_path() -> None:
    import millstream.datastream as ds
    from millstream.datastream.state_backend import EmbeddedRocksDBStateBackend as at_module_path

    assert ds.EmbeddedRocksDBStateBackend is at_module_path
    assert not at_module_path().is_incremental_checkpoints_enabled()
    assert at_module_path(True).is_incremental_checkpoints_enabled()


def test_filesystem_checkpoint_storage_sets_the_jobs_checkpoint_dir(tmp_path) -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    config = env.get_checkpoint_config()
    assert config.get_checkpoint_storage() is None
    storage = FileSystemCheckpointStorage(f"file://{tmp_path}")
    assert isinstance(storage, CheckpointStorage) and storage.get_checkpoint_path() == f"file://{tmp_path}"
    assert config.set_checkpoint_storage(storage) is config
    assert config.get_checkpoint_storage() == storage
    assert config._job_settings()["execution.checkpointing.dir"] == f"file://{tmp_path}"
    config.set_checkpoint_storage_dir(str(tmp_path / "other"))
    assert config.get_checkpoint_storage() == FileSystemCheckpointStorage(str(tmp_path / "other"))
    assert config._job_settings()["execution.checkpointing.dir"] == str(tmp_path / "other")
    # the job graph carries it, so the JobManager writes this job's checkpoints there
    env.enable_checkpointing(1000)
    env.from_collection([1]).print()
    graph = env.get_job_graph("storage").proto
    assert graph.execution_config.configuration["execution.checkpointing.dir"] == str(tmp_path / "other")


def test_configured_checkpoint_dir_is_the_storage(tmp_path) -> None:
    conf = Configuration()
    conf.set_string("execution.checkpointing.dir", str(tmp_path))
    storage = StreamExecutionEnvironment.get_execution_environment(conf).get_checkpoint_config().get_checkpoint_storage()
    assert storage == FileSystemCheckpointStorage(str(tmp_path))


def test_bad_filesystem_storage_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="must not be None"):
        FileSystemCheckpointStorage()
    with pytest.raises(ValueError, match="scheme 'hdfs' is not supported"):
        FileSystemCheckpointStorage("hdfs://namenode/checkpoints")
    with pytest.raises(ValueError, match="file_state_size_threshold and write_buffer_size cannot be set"):
        FileSystemCheckpointStorage("/tmp/chk", file_state_size_threshold=1024)


def test_jobmanager_checkpoint_storage_cannot_be_used() -> None:
    # Flink keeps JobManagerCheckpointStorage's state in the JobManager's memory; Millstream's holds none
    storage = JobManagerCheckpointStorage()
    assert storage.get_max_state_size() == JobManagerCheckpointStorage.DEFAULT_MAX_STATE_SIZE
    assert storage.get_checkpoint_path() is None
    config = StreamExecutionEnvironment.get_execution_environment().get_checkpoint_config()
    with pytest.raises(ValueError, match="JobManager's memory.*FileSystemCheckpointStorage"):
        config.set_checkpoint_storage(storage)
    assert config.get_checkpoint_storage() is None
    with pytest.raises(TypeError, match="needs a FileSystemCheckpointStorage"):
        config.set_checkpoint_storage("/tmp/chk")  # type: ignore[arg-type]
