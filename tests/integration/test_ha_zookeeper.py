"""The ZooKeeper HA services against a real ZooKeeper server (Debian's package, see zookeeper.py):
leader election and retrieval across sessions that end, the JobGraphStore and checkpoint stores
read by a new leader, unreadable HA storage, and a ZooKeeper restart."""
from __future__ import annotations

import logging
import threading
import time
import uuid
from pathlib import Path
from typing import Iterator, Optional

import pytest

from millstream.runtime import config as cfg
from millstream.runtime.checkpoint_storage import CheckpointStorageError, write_task_state
from millstream.runtime.ha import HaError, HaStorageError, LeaderInformation, ZooKeeperHaServices, create_ha_services
from millstream.runtime.ha.checkpoints import HaCheckpointStorageError
from tests.integration.harness import poll_for
from tests.integration.zookeeper import ZooKeeperServer, expire_session, ha_config

JOB = bytes.fromhex("00112233445566778899aabbccddeeff")
OTHER_JOB = bytes.fromhex("ffeeddccbbaa99887766554433221100")

logging.getLogger("kazoo.client").setLevel(logging.WARNING)


class Contender:
    """Records grants and revocations; confirms each grant with its address, as a JobManager."""

    def __init__(self, name: str, election: object, confirm: bool = True) -> None:
        self.name = name
        self.address = f"{name}.example:6123"
        self.election = election
        self.confirm = confirm
        self.session_id: Optional[uuid.UUID] = None
        self.grants: list[uuid.UUID] = []
        self.revocations = 0
        self.errors: list[BaseException] = []

    def grant_leadership(self, session_id: uuid.UUID) -> None:
        self.session_id = session_id
        self.grants.append(session_id)
        if self.confirm:
            self.election.confirm_leadership(session_id, self.address)  # type: ignore[attr-defined]

    def revoke_leadership(self) -> None:
        self.session_id = None
        self.revocations += 1

    def handle_error(self, error: BaseException) -> None:
        self.errors.append(error)


class Listener:
    def __init__(self) -> None:
        self.seen: list[Optional[LeaderInformation]] = []
        self.lock = threading.Lock()

    def notify_leader_address(self, leader: Optional[LeaderInformation]) -> None:
        with self.lock:
            self.seen.append(leader)

    def handle_error(self, error: BaseException) -> None:
        raise AssertionError(f"retrieval error: {error!r}")

    @property
    def last(self) -> Optional[LeaderInformation]:
        with self.lock:
            return self.seen[-1] if self.seen else None


@pytest.fixture
def services(zookeeper_server: ZooKeeperServer, tmp_path: Path) -> Iterator[list[ZooKeeperHaServices]]:
    """A factory list: ``make(conf)`` appends a started services object; all are closed after."""
    made: list[ZooKeeperHaServices] = []
    yield made
    for s in reversed(made):
        s.close()


def make(made: list[ZooKeeperHaServices], conf: cfg.Configuration, name: str) -> ZooKeeperHaServices:
    s = create_ha_services(conf, name=name)
    assert isinstance(s, ZooKeeperHaServices)
    made.append(s)
    return s


def start_pair(made: list[ZooKeeperHaServices], conf: cfg.Configuration) -> tuple[Contender, Contender]:
    a_services, b_services = make(made, conf, "jm-a"), make(made, conf, "jm-b")
    a = Contender("a", a_services.jobmanager_leader_election())
    a_services.jobmanager_leader_election().start(a)
    poll_for(lambda: a.session_id, 20, what="the first contender to lead")
    b = Contender("b", b_services.jobmanager_leader_election())
    b_services.jobmanager_leader_election().start(b)
    return a, b


# -- leader election and retrieval ------------------------------------------------------------


def test_one_leader_and_the_standby_takes_over_when_the_leaders_session_expires(
        zookeeper_server: ZooKeeperServer, tmp_path: Path, services: list[ZooKeeperHaServices]) -> None:
    conf = ha_config(zookeeper_server, tmp_path / "ha")
    a, b = start_pair(services, conf)
    client_side = make(services, conf, "tm")
    listener = Listener()
    client_side.jobmanager_leader_retrieval().start(listener)
    first = poll_for(lambda: listener.last, 20, what="the retrieval to see the leader")
    assert first == LeaderInformation(a.address, a.grants[0])
    time.sleep(1.0)  # the standby stays a standby
    assert b.grants == [] and a.revocations == 0
    a_election = services[0].jobmanager_leader_election()
    assert a_election.has_leadership(a.grants[0])

    started = time.monotonic()
    expire_session(services[0].client.kazoo)  # as after a partition longer than the session timeout
    poll_for(lambda: b.session_id, 30, what="the standby to be granted leadership")
    takeover_s = time.monotonic() - started
    assert a.session_id is None and a.revocations == 1 and not a_election.has_leadership(a.grants[0])
    assert b.grants[0] != a.grants[0]  # a new fencing token
    new = poll_for(lambda: listener.last if listener.last and listener.last.address == b.address else None, 20,
                   what="the retrieval to see the new leader")
    assert new.session_id == b.grants[0]
    assert takeover_s < 10, takeover_s
    # The old leader rejoined with a new session and waits behind the new one.
    time.sleep(1.0)
    assert len(a.grants) == 1 and len(b.grants) == 1
    assert client_side.jobmanager_leader_retrieval().current_leader(10) == new  # the blocking CLI helper


def test_closing_the_leader_hands_over_at_once_and_a_late_confirmation_is_ignored(
        zookeeper_server: ZooKeeperServer, tmp_path: Path, services: list[ZooKeeperHaServices]) -> None:
    conf = ha_config(zookeeper_server, tmp_path / "ha", session_timeout="60 s")
    a, b = start_pair(services, conf)
    old = a.grants[0]
    started = time.monotonic()
    services[0].close()  # a JobManager shutting down: no session timeout to wait for
    poll_for(lambda: b.session_id, 10, what="the standby to be granted leadership")
    assert time.monotonic() - started < 5
    observer = make(services, conf, "cli").jobmanager_leader_retrieval()
    assert observer.current_leader(10) == LeaderInformation(b.address, b.grants[0])
    # A confirmation under a session id that is not the current grant publishes nothing.
    services[1].jobmanager_leader_election().confirm_leadership(old, "stale.example:1")
    time.sleep(0.5)
    assert observer.current_leader(1).address == b.address


def test_no_leader_is_a_clear_timeout(zookeeper_server: ZooKeeperServer, tmp_path: Path,
                                      services: list[ZooKeeperHaServices]) -> None:
    retrieval = make(services, ha_config(zookeeper_server, tmp_path / "ha"), "cli").jobmanager_leader_retrieval()
    with pytest.raises(HaError, match="no jobmanager leader .* within 0.5 s"):
        retrieval.current_leader(0.5)


def test_unreachable_zookeeper_fails_within_the_connection_timeout(tmp_path: Path) -> None:
    server = ZooKeeperServer(tmp_path / "never-started")  # a free port nobody serves
    conf = ha_config(server, tmp_path / "ha", **{"high-availability.zookeeper.client.connection-timeout": "1 s"})
    started = time.monotonic()
    with pytest.raises(HaError, match=f"could not connect to ZooKeeper at {server.connect_string} within 1 s"):
        create_ha_services(conf)
    assert time.monotonic() - started < 10


@pytest.mark.parametrize("tolerate", [False, True])
def test_zookeeper_restart_clients_reconnect_and_a_leader_is_there_again(
        zookeeper_server: ZooKeeperServer, tmp_path: Path, services: list[ZooKeeperHaServices], tolerate: bool) -> None:
    conf = ha_config(zookeeper_server, tmp_path / "ha",
                     **{"high-availability.zookeeper.client.tolerate-suspended-connections": str(tolerate).lower()})
    a, b = start_pair(services, conf)
    listener = Listener()
    make(services, conf, "tm").jobmanager_leader_retrieval().start(listener)
    poll_for(lambda: listener.last, 20, what="the leader")
    first = a.grants[0]
    zookeeper_server.stop()
    time.sleep(1.0)  # well within the 5 s session timeout
    if tolerate:
        assert a.session_id == first and a.revocations == 0  # a suspended connection is tolerated
    else:
        assert a.session_id is None and a.revocations == 1  # Flink's default: revoke on SUSPENDED
        assert listener.last is None  # nobody can tell who leads
    zookeeper_server.start()

    def consistent() -> Optional[LeaderInformation]:
        holders = [c for c in (a, b) if c.session_id is not None]
        leader = listener.last
        if len(holders) == 1 and leader == LeaderInformation(holders[0].address, holders[0].session_id):
            return leader
        return None

    leader = poll_for(consistent, 30, what="one leader, seen by the retrieval, after the restart")
    if tolerate:
        assert a.grants == [first] and a.revocations == 0  # the same leadership all along
    else:
        assert leader.session_id != first  # granted again: a new fencing token


def test_a_connection_suspended_for_a_session_timeout_counts_as_lost(
        zookeeper_server: ZooKeeperServer, tmp_path: Path, services: list[ZooKeeperHaServices]) -> None:
    conf = ha_config(zookeeper_server, tmp_path / "ha", session_timeout="3 s",
                     **{"high-availability.zookeeper.client.tolerate-suspended-connections": "true"})
    leader_services = make(services, conf, "jm-a")
    a = Contender("a", leader_services.jobmanager_leader_election())
    leader_services.jobmanager_leader_election().start(a)
    poll_for(lambda: a.session_id, 20, what="leadership")
    zookeeper_server.stop()
    stopped = time.monotonic()
    poll_for(lambda: a.revocations == 1, 20, what="revocation after a session timeout without ZooKeeper")
    assert 2.0 < time.monotonic() - stopped < 10
    zookeeper_server.start()
    # The server kept the session (a restart does), so the same latch node leads again: no
    # contender must end up queued behind its own old node.
    poll_for(lambda: a.session_id, 30, what="leadership again after ZooKeeper is back")
    assert len(a.grants) == 2 and a.grants[1] != a.grants[0]


# -- job graphs and results --------------------------------------------------------------------


def test_job_graphs_survive_the_leader_and_a_deposed_leader_cannot_delete_a_recovered_job(
        zookeeper_server: ZooKeeperServer, tmp_path: Path, services: list[ZooKeeperHaServices]) -> None:
    conf = ha_config(zookeeper_server, tmp_path / "ha")
    old, new = make(services, conf, "jm-old"), make(services, conf, "jm-new")
    payload = b"\x00job graph\xff" * 1000
    old.job_graph_store().put_job_graph(JOB, payload)
    old.job_graph_store().put_job_graph(OTHER_JOB, b"other")
    files = sorted((tmp_path / "ha" / "test" / "job-graphs").iterdir())
    assert len(files) == 2 and all(f.name.startswith("submittedJobGraph-") for f in files)

    store = new.job_graph_store()
    assert sorted(store.job_ids()) == sorted([JOB, OTHER_JOB])
    assert store.recover_job_graph(JOB) == payload  # the new leader reads what the old wrote (and locks it)
    old.job_graph_store().remove_job_graph(JOB)  # the deposed leader finishing the job late
    assert store.recover_job_graph(JOB) == payload  # still there: the new leader holds it
    store.remove_job_graph(JOB)  # globally terminal on the new leader: no lock left, gone
    assert store.job_ids() == [OTHER_JOB]
    assert len(list((tmp_path / "ha" / "test" / "job-graphs").iterdir())) == 1
    with pytest.raises(HaStorageError, match="does not exist"):
        store.recover_job_graph(JOB)


def test_a_crashed_leaders_locks_go_with_its_session(
        zookeeper_server: ZooKeeperServer, tmp_path: Path, services: list[ZooKeeperHaServices]) -> None:
    conf = ha_config(zookeeper_server, tmp_path / "ha")
    old, new = make(services, conf, "jm-old"), make(services, conf, "jm-new")
    old.job_graph_store().put_job_graph(JOB, b"graph")
    services.remove(old)
    old.client.close()  # its lock was ephemeral
    assert new.job_graph_store().recover_job_graph(JOB) == b"graph"
    new.job_graph_store().remove_job_graph(JOB)
    assert new.job_graph_store().job_ids() == []


@pytest.mark.parametrize("damage", ["delete", "truncate"])
def test_an_unreadable_job_graph_file_is_a_clear_error(
        zookeeper_server: ZooKeeperServer, tmp_path: Path, services: list[ZooKeeperHaServices], damage: str) -> None:
    conf = ha_config(zookeeper_server, tmp_path / "ha")
    make(services, conf, "jm-old").job_graph_store().put_job_graph(JOB, b"graph" * 100)
    (path,) = (tmp_path / "ha" / "test" / "job-graphs").iterdir()
    if damage == "delete":
        path.unlink()
    else:
        path.write_bytes(b"gr")
    store = make(services, conf, "jm-new").job_graph_store()
    assert store.job_ids() == [JOB]
    with pytest.raises(HaStorageError, match=f"job {JOB.hex()} cannot be recovered: HA storage file {path}"):
        store.recover_job_graph(JOB)


def test_job_results_are_shared_through_storage(zookeeper_server: ZooKeeperServer, tmp_path: Path,
                                                services: list[ZooKeeperHaServices]) -> None:
    from millstream.runtime.ha import JobResultEntry, JobResultStatus

    conf = ha_config(zookeeper_server, tmp_path / "ha")
    old, new = make(services, conf, "jm-old"), make(services, conf, "jm-new")
    old.job_result_store().create_dirty_result(JobResultEntry(JOB, JobResultStatus.FINISHED, "wc"))
    assert new.job_result_store().has_job_result_entry(JOB)  # the new leader never re-runs it
    assert [e.job_id for e in new.job_result_store().dirty_results()] == [JOB]  # ... and finishes its cleanup
    new.job_result_store().mark_result_clean(JOB)
    assert old.job_result_store().has_clean_job_result_entry(JOB)


# -- checkpoints --------------------------------------------------------------------------------


def complete(store: object, base: Path, checkpoint_id: int) -> None:
    handle = write_task_state(base, JOB, checkpoint_id, f"state {checkpoint_id}".encode())
    store.add_checkpoint(checkpoint_id, 1000.0 * checkpoint_id, {"v_0": handle})  # type: ignore[attr-defined]


def test_checkpoint_store_keeps_n_and_a_new_leader_recovers_the_latest(
        zookeeper_server: ZooKeeperServer, tmp_path: Path, services: list[ZooKeeperHaServices]) -> None:
    conf = ha_config(zookeeper_server, tmp_path / "ha")
    base = tmp_path / "checkpoints"
    old, new = make(services, conf, "jm-old"), make(services, conf, "jm-new")
    counter = old.checkpoint_id_counter(JOB)
    store = old.completed_checkpoint_store(base, JOB, num_retained=2)
    assert store.recover() is None
    for _ in range(4):
        complete(store, base, counter.get_and_increment())
    assert [c.checkpoint_id for c in store.checkpoints] == [3, 4]
    assert sorted(p.name for p in (base / JOB.hex()).iterdir()) == ["chk-3", "chk-4"]
    zk = old.client.kazoo
    assert sorted(zk.get_children(old.client.path("checkpoints", JOB.hex()))) == ["0000000000000000003",
                                                                          "0000000000000000004"]

    recovered_store = new.completed_checkpoint_store(base, JOB, num_retained=2)
    latest = recovered_store.recover()
    assert latest is not None and latest.checkpoint_id == 4
    assert latest.task_states["v_0"] is not None and latest.task_states["v_0"].read() == b"state 4"
    new_counter = new.checkpoint_id_counter(JOB)
    assert new_counter.get_and_increment() == 5  # ids continue across leaders
    complete(recovered_store, base, 5)
    # The old leader still holds checkpoint 3: the new leader keeps its directory too.
    assert [c.checkpoint_id for c in recovered_store.checkpoints] == [4, 5]
    assert "chk-3" in {p.name for p in (base / JOB.hex()).iterdir()}
    store.shutdown(globally_terminal=False)  # the old leader lets go
    recovered_store.recover()
    assert sorted(zk.get_children(new.client.path("checkpoints", JOB.hex()))) == ["0000000000000000004",
                                                                          "0000000000000000005"]
    recovered_store.shutdown(globally_terminal=True)
    new_counter.shutdown(globally_terminal=True)
    new.cleanup_job_data(JOB)
    assert zk.exists(new.client.path("checkpoints", JOB.hex())) is None
    assert zk.exists(new.client.path("checkpoint_id_counter", JOB.hex())) is None


def test_two_counters_never_hand_out_the_same_id(zookeeper_server: ZooKeeperServer, tmp_path: Path,
                                                 services: list[ZooKeeperHaServices]) -> None:
    conf = ha_config(zookeeper_server, tmp_path / "ha")
    counters = [make(services, conf, f"jm-{i}").checkpoint_id_counter(JOB) for i in range(2)]
    ids: list[list[int]] = [[], []]

    def take(i: int) -> None:
        for _ in range(50):
            ids[i].append(counters[i].get_and_increment())

    threads = [threading.Thread(target=take, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    everything = ids[0] + ids[1]
    assert sorted(everything) == list(range(1, 101))
    counters[0].set_count(500)
    assert counters[1].get() == 500


@pytest.mark.parametrize("damage", ["metadata deleted", "metadata corrupt", "pointer corrupt"])
def test_an_unreadable_checkpoint_is_a_loud_error_never_a_fresh_start(
        zookeeper_server: ZooKeeperServer, tmp_path: Path, services: list[ZooKeeperHaServices], damage: str) -> None:
    conf = ha_config(zookeeper_server, tmp_path / "ha")
    base = tmp_path / "checkpoints"
    old = make(services, conf, "jm-old")
    store = old.completed_checkpoint_store(base, JOB, num_retained=1)
    complete(store, base, 1)
    metadata = base / JOB.hex() / "chk-1" / "_metadata"
    if damage == "metadata deleted":
        metadata.unlink()
    elif damage == "metadata corrupt":
        metadata.write_text("{truncated")
    else:
        old.client.kazoo.set(old.client.path("checkpoints", JOB.hex(), "0000000000000000001"), b"\xffnot json")
    recovering = make(services, conf, "jm-new").completed_checkpoint_store(base, JOB, num_retained=1)
    with pytest.raises(HaCheckpointStorageError, match=f"checkpoint 1 of job {JOB.hex()}") as raised:
        recovering.recover()
    assert isinstance(raised.value, CheckpointStorageError)  # what the checkpoint driver already handles


LEADER_PROCESS = """
import sys, time, threading
from millstream.runtime import config as cfg
from millstream.runtime.ha import create_ha_services
conf = cfg.Configuration.from_dict(dict(arg.split("=", 1) for arg in sys.argv[1:]))
services = create_ha_services(conf, name="jm-child")
election = services.jobmanager_leader_election()
class Contender:
    def grant_leadership(self, session_id):
        election.confirm_leadership(session_id, "child.example:6123")
        print("LEADER", session_id, flush=True)
    def revoke_leadership(self):
        print("REVOKED", flush=True)
    def handle_error(self, error):
        print("ERROR", error, flush=True)
election.start(Contender())
time.sleep(600)
"""


def test_kill_9_of_the_leader_process_hands_over_after_the_session_timeout(
        zookeeper_server: ZooKeeperServer, tmp_path: Path, services: list[ZooKeeperHaServices]) -> None:
    import subprocess
    import sys

    conf = ha_config(zookeeper_server, tmp_path / "ha", session_timeout="5 s")
    args = [f"{k}={v}" for k, v in conf.to_dict(as_strings=True).items()]
    child = subprocess.Popen([sys.executable, "-c", LEADER_PROCESS, *args], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True)
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        assert line.startswith("LEADER"), line
        standby_services = make(services, conf, "jm-standby")
        standby = Contender("standby", standby_services.jobmanager_leader_election())
        standby_services.jobmanager_leader_election().start(standby)
        observer = make(services, conf, "tm").jobmanager_leader_retrieval()
        assert observer.current_leader(10).address == "child.example:6123"
        time.sleep(0.5)
        assert standby.grants == []
        child.kill()  # SIGKILL: no goodbye, ZooKeeper notices only when the session times out
        killed = time.monotonic()
        poll_for(lambda: standby.session_id, 30, what="the standby to take over")
        takeover_s = time.monotonic() - killed
        poll_for(lambda: observer.current_leader(10).address == standby.address, 10, what="retrieval of the new leader")
        print(f"takeover after kill -9 with a 5 s session timeout: {takeover_s:.2f} s")
        assert 3.0 < takeover_s < 12.0, takeover_s  # about one session timeout, not before
    finally:
        child.kill()
        child.wait(10)
