"""HA options, the no-HA services and the HA stores' file side, without a ZooKeeper server."""
from __future__ import annotations

import asyncio
import threading
import uuid
from pathlib import Path
from typing import Optional

import pytest

from millstream.runtime import config as cfg
from millstream.runtime.ha import (
    DEFAULT_LEADER_ID,
    HaConfigurationError,
    HaError,
    HaSettings,
    HaStorageError,
    JobResultEntry,
    JobResultStatus,
    LeaderInformation,
    LoopContender,
    LoopListener,
    StandaloneHaServices,
    create_ha_services,
)
from millstream.runtime.checkpoint_ids import StandaloneCheckpointIDCounter
from millstream.runtime.ha.checkpoints import checkpoint_node_name
from millstream.runtime.ha.job_stores import FileSystemJobResultStore, InMemoryJobGraphStore, InMemoryJobResultStore
from millstream.runtime.ha.leader_election import decode_leader_information, encode_leader_information
from millstream.runtime.ha.settings import join_zk_path
from millstream.runtime.ha.state_handle_store import FileStateStorage

JOB = bytes(range(16))


# -- options ----------------------------------------------------------------------------------


def test_defaults_are_flinks_except_the_root() -> None:
    conf = cfg.Configuration()
    assert conf.get(cfg.HA_TYPE) == "NONE"
    assert conf.get(cfg.HA_ZOOKEEPER_ROOT) == "/millstream"  # Flink: /flink
    assert conf.get(cfg.HA_CLUSTER_ID) == "/default"
    assert conf.get(cfg.HA_ZOOKEEPER_SESSION_TIMEOUT) == 60_000
    assert conf.get(cfg.HA_ZOOKEEPER_CONNECTION_TIMEOUT) == 15_000
    assert conf.get(cfg.HA_ZOOKEEPER_RETRY_WAIT) == 5_000
    assert conf.get(cfg.HA_ZOOKEEPER_MAX_RETRY_ATTEMPTS) == 3
    assert conf.get(cfg.HA_ZOOKEEPER_TOLERATE_SUSPENDED) is False
    assert conf.get(cfg.HA_STORAGE_DIR) is None and conf.get(cfg.HA_ZOOKEEPER_QUORUM) is None
    assert HaSettings.from_configuration(conf).zookeeper is False


def test_the_old_key_and_any_spelling_of_the_mode_are_read() -> None:
    assert cfg.Configuration.from_dict({"high-availability": "zookeeper"}).get(cfg.HA_TYPE) == "ZOOKEEPER"
    assert cfg.Configuration.from_dict({"high-availability.type": "ZooKeeper"}).get(cfg.HA_TYPE) == "ZOOKEEPER"
    with pytest.raises(cfg.ConfigurationError, match="high-availability.type"):
        cfg.Configuration.from_dict({"high-availability.type": "kubernetes"})


def test_flink_style_millisecond_integers_and_durations_both_work() -> None:
    conf = cfg.Configuration.from_dict({"high-availability.zookeeper.client.session-timeout": "5000",
                                        "high-availability.zookeeper.client.connection-timeout": "3 s",
                                        "high-availability.zookeeper.client.retry-wait": 250})
    settings = HaSettings.from_configuration(conf.set(cfg.HA_TYPE, "zookeeper").set(cfg.HA_ZOOKEEPER_QUORUM, "h:1")
                                             .set(cfg.HA_STORAGE_DIR, "/tmp/x"))
    assert (settings.session_timeout_ms, settings.connection_timeout_ms, settings.retry_wait_ms) == (5000, 3000, 250)


def test_zookeeper_settings_are_read(tmp_path: Path) -> None:
    conf = cfg.load_configuration(env={}, dynamic_properties=[
        "high-availability.type=zookeeper", "high-availability.zookeeper.quorum=a:2181, b:2181",
        f"high-availability.storageDir=file://{tmp_path}", "high-availability.cluster-id=prod/one",
        "high-availability.zookeeper.path.root=/ms", "high-availability.zookeeper.client.max-retry-attempts=7",
        "high-availability.zookeeper.client.tolerate-suspended-connections=true"])
    s = HaSettings.from_configuration(conf)
    assert s.zookeeper and s.quorum == "a:2181,b:2181" and s.max_retry_attempts == 7 and s.tolerate_suspended
    assert s.namespace == "/ms/prod/one"
    assert s.cluster_storage_dir == tmp_path / "prod" / "one"


@pytest.mark.parametrize("values, message", [
    ({}, "high-availability.zookeeper.quorum is not set"),
    ({"high-availability.zookeeper.quorum": "h:1"}, "high-availability.storageDir is not set"),
    ({"high-availability.zookeeper.quorum": "h:1", "high-availability.storageDir": "relative/dir"}, "not absolute"),
    ({"high-availability.zookeeper.quorum": "h:1", "high-availability.storageDir": "s3://b/x"}, "storageDir"),
    ({"high-availability.zookeeper.quorum": "h:1", "high-availability.storageDir": "/x",
      "high-availability.cluster-id": "../escape"}, "high-availability.cluster-id"),
    ({"high-availability.zookeeper.quorum": "h:1", "high-availability.storageDir": "/x",
      "high-availability.zookeeper.path.root": "millstream"}, "high-availability.zookeeper.path.root"),
])
def test_bad_zookeeper_settings_name_the_key(values: dict[str, str], message: str) -> None:
    conf = cfg.Configuration.from_dict({"high-availability.type": "zookeeper", **values})
    with pytest.raises(HaConfigurationError, match=message.replace(".", r"\.")):
        HaSettings.from_configuration(conf)


def test_zk_paths_are_joined_like_flinks() -> None:
    assert join_zk_path("/millstream/", "/default", "leader", "") == "/millstream/default/leader"
    assert checkpoint_node_name(42) == "0000000000000000042" and checkpoint_node_name(9) < checkpoint_node_name(10)


# -- the leader record -------------------------------------------------------------------------


def test_leader_record_round_trip_and_malformed() -> None:
    info = LeaderInformation("10.0.0.1:6123", uuid.uuid4())
    assert decode_leader_information(encode_leader_information(info)) == info
    assert decode_leader_information(b"") is None
    for bad in (b"{", b"[]", b'{"address": "", "session_id": "x"}', b'{"address": "h:1", "session_id": "nope"}'):
        with pytest.raises(ValueError):
            decode_leader_information(bad)


# -- no HA ------------------------------------------------------------------------------------


class Contender:
    def __init__(self) -> None:
        self.events: list[object] = []
        self.changed = threading.Event()
        self.thread: Optional[threading.Thread] = None

    def grant_leadership(self, session_id: uuid.UUID) -> None:
        self.thread = threading.current_thread()
        self.events.append(session_id)
        self.changed.set()

    def revoke_leadership(self) -> None:
        self.events.append("revoked")
        self.changed.set()

    def handle_error(self, error: BaseException) -> None:
        self.events.append(error)


def test_standalone_grants_the_default_leader_id_and_retrieval_gives_the_configured_address() -> None:
    conf = cfg.Configuration.from_dict({"jobmanager.rpc.address": "jm.example", "jobmanager.rpc.port": 7000})
    services = create_ha_services(conf)
    assert isinstance(services, StandaloneHaServices) and not services.highly_available
    contender = Contender()
    election = services.jobmanager_leader_election()
    election.start(contender)
    assert contender.changed.wait(5)
    assert contender.events == [DEFAULT_LEADER_ID]
    assert contender.thread is not threading.main_thread()  # called on the HA event thread
    assert election.has_leadership(DEFAULT_LEADER_ID) and not election.has_leadership(uuid.uuid4())
    assert services.jobmanager_leader_retrieval().current_leader(0.1) == LeaderInformation("jm.example:7000",
                                                                                           DEFAULT_LEADER_ID)
    contender.changed.clear()
    services.close()
    assert contender.events == [DEFAULT_LEADER_ID, "revoked"]


def test_standalone_uses_the_address_the_jobmanager_bound() -> None:
    services = create_ha_services(cfg.Configuration(), jobmanager_address="127.0.0.1:40123")
    try:
        assert services.jobmanager_leader_retrieval().current_leader(0.1).address == "127.0.0.1:40123"
    finally:
        services.close()


def test_in_memory_stores() -> None:
    graphs = InMemoryJobGraphStore()
    graphs.put_job_graph(JOB, b"graph")
    assert graphs.job_ids() == [JOB] and graphs.recover_job_graph(JOB) == b"graph"
    graphs.remove_job_graph(JOB)
    with pytest.raises(HaStorageError, match=JOB.hex()):
        graphs.recover_job_graph(JOB)
    results = InMemoryJobResultStore()
    results.create_dirty_result(JobResultEntry(JOB, JobResultStatus.FINISHED))
    assert results.has_dirty_job_result_entry(JOB) and not results.has_clean_job_result_entry(JOB)
    with pytest.raises(HaError, match="already has a result"):
        results.create_dirty_result(JobResultEntry(JOB, JobResultStatus.FAILED))
    results.mark_result_clean(JOB)
    assert results.has_clean_job_result_entry(JOB) and results.dirty_results() == []
    counter = StandaloneCheckpointIDCounter(5)
    assert [counter.get_and_increment(), counter.get_and_increment(), counter.get()] == [5, 6, 7]
    with pytest.raises(ValueError):
        counter.set_count(0)


# -- HA storage files ------------------------------------------------------------------------


def test_job_result_store_dirty_then_clean_on_disk(tmp_path: Path) -> None:
    store = FileSystemJobResultStore(tmp_path / "jrs")
    entry = JobResultEntry(JOB, JobResultStatus.CANCELED, "wc", "", 1234, {"k": "v"})
    store.create_dirty_result(entry)
    assert (tmp_path / "jrs" / f"{JOB.hex()}_DIRTY.json").is_file()
    again = FileSystemJobResultStore(tmp_path / "jrs")  # another JobManager reading the same storage
    assert again.dirty_results() == [entry] and again.has_job_result_entry(JOB)
    again.mark_result_clean(JOB)
    assert store.has_clean_job_result_entry(JOB) and not store.has_dirty_job_result_entry(JOB)
    assert store.dirty_results() == [] and store.clean_result(JOB) == entry
    with pytest.raises(HaError, match="already has a result"):
        store.create_dirty_result(entry)  # a terminal job is never recorded (nor run) twice


def test_a_corrupt_job_result_is_a_loud_error(tmp_path: Path) -> None:
    store = FileSystemJobResultStore(tmp_path)
    (tmp_path / f"{JOB.hex()}_DIRTY.json").write_text("{not json")
    with pytest.raises(HaStorageError, match="corrupt"):
        store.dirty_results()


def test_file_state_storage_detects_truncation_and_loss(tmp_path: Path) -> None:
    storage = FileStateStorage(tmp_path / "graphs", "submittedJobGraph")
    stored = storage.store(b"x" * 1000)
    assert Path(stored.path).name.startswith("submittedJobGraph-")
    assert FileStateStorage.retrieve(stored) == b"x" * 1000
    assert not [p for p in (tmp_path / "graphs").iterdir() if p.name.endswith(".inprogress")]
    Path(stored.path).write_bytes(b"x" * 10)
    with pytest.raises(HaStorageError, match="corrupt"):
        FileStateStorage.retrieve(stored)
    Path(stored.path).write_bytes(b"y" * 1000)  # same size, other bytes
    with pytest.raises(HaStorageError, match="corrupt"):
        FileStateStorage.retrieve(stored)
    FileStateStorage.discard(stored)
    with pytest.raises(HaStorageError, match="cannot be read"):
        FileStateStorage.retrieve(stored)


# -- onto an asyncio loop ---------------------------------------------------------------------


def test_loop_adapters_run_callbacks_on_the_loop() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        loop_thread = threading.current_thread()
        seen: list[tuple[str, object, bool]] = []
        done = asyncio.Event()

        class OnLoop:
            def grant_leadership(self, session_id: uuid.UUID) -> None:
                seen.append(("grant", session_id, threading.current_thread() is loop_thread))

            def revoke_leadership(self) -> None:
                seen.append(("revoke", None, threading.current_thread() is loop_thread))

            def notify_leader_address(self, leader: Optional[LeaderInformation]) -> None:
                seen.append(("leader", leader, threading.current_thread() is loop_thread))
                done.set()

            def handle_error(self, error: BaseException) -> None:
                seen.append(("error", error, threading.current_thread() is loop_thread))

        target = OnLoop()
        contender, listener = LoopContender(target, loop), LoopListener(target, loop)
        sid = uuid.uuid4()
        info = LeaderInformation("h:1", sid)

        def from_another_thread() -> None:
            contender.grant_leadership(sid)
            contender.revoke_leadership()
            listener.notify_leader_address(info)

        threading.Thread(target=from_another_thread).start()
        await asyncio.wait_for(done.wait(), 5)
        assert seen == [("grant", sid, True), ("revoke", None, True), ("leader", info, True)]

    asyncio.run(main())
