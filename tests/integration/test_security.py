"""TLS and tokens on a real cluster: `millstream cluster start` with mutual TLS and both tokens (a
JobManager and a TaskManager process, real Spark), jobs run by the CLI and by `python job.py`, and
the peers it refuses: clients without a token, with a wrong one or with the TaskManagers' token
(nothing runs), a plaintext client and one whose certificate another CA signed, TaskManagers with
a wrong token or an untrusted certificate (they cannot register, the cluster serves on). One
cluster for the module."""
from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, Iterator

import grpc
import pytest

from millstream.client.cluster_client import ClusterClient, JobManagerTlsError
from millstream.datastream import StreamExecutionEnvironment
from millstream.runtime import config as cfg
from millstream.runtime.entrypoint.process import StartupError
from millstream.runtime.rpc.security import Credentials, client_credentials
from millstream.runtime.rpc.tls import TlsSettings
from millstream.taskmanager.taskmanager import TaskManager
from tests.certs import CertificateAuthority, Pem

pytestmark = pytest.mark.timeout(180)

CLIENT_TOKEN, CLUSTER_TOKEN = "client-token-of-the-test", "cluster-token-of-the-test"
WORDS = ["to be or not to be", "that is the question", "to be is to do"] * 50
EXPECTED = sorted({w: sum(line.split().count(w) for line in WORDS) for w in " ".join(WORDS).split()}.items())

JOB = textwrap.dedent(f"""
    from millstream.datastream import StreamExecutionEnvironment

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    lines = env.from_collection({WORDS!r})
    counts = (lines.flat_map(lambda line: [(w, 1) for w in line.split()])
              .key_by(lambda pair: pair[0])
              .reduce(lambda a, b: (a[0], a[1] + b[1])))
    final = {{}}
    with counts.execute_and_collect("secure word count") as results:
        for word, n in results:
            final[word] = max(final.get(word, 0), n)
    print("COUNTS", sorted(final.items()))
""")


def _yaml(path: Path, values: dict[str, str]) -> str:
    path.write_text("".join(f"{key}: {value!r}\n" for key, value in values.items()))
    return str(path)


def _tls(pem: Pem) -> TlsSettings:
    return TlsSettings(pem.key, pem.cert, pem.truststore)


class Secured:
    def __init__(self, directory: Path) -> None:
        ca = CertificateAuthority(directory / "ca")
        self.node = ca.issue("node")  # the cluster's processes
        self.client = ca.issue("client")
        self.rogue = CertificateAuthority(directory / "rogue", "rogue-ca").issue("rogue", truststore=ca.cert_path)
        fast = {"heartbeat.interval": "500 ms", "heartbeat.timeout": "5 s"}
        self.cluster_config = _yaml(directory / "cluster.yaml", {
            **self.node.options(), **fast, "security.auth.client-token": CLIENT_TOKEN,
            "security.auth.cluster-token": CLUSTER_TOKEN})
        self.client_config = _yaml(directory / "client.yaml", {
            **self.client.options(), "security.auth.client-token": CLIENT_TOKEN})
        self.env = {**os.environ, "MILLSTREAM_CLUSTER_DIR": str(directory / "cluster")}
        self.env.pop("MILLSTREAM_JOBMANAGER", None)
        self.address = ""

    def cli(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "millstream.client.cli", *args], env=self.env,
                              capture_output=True, text=True, timeout=timeout)

    def client_with(self, credentials: Credentials) -> ClusterClient:
        return ClusterClient(self.address, rpc_timeout_s=10, credentials=credentials)

    def good_client(self) -> ClusterClient:
        return self.client_with(client_credentials(cfg.load_configuration(self.client_config, env={})))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    secured = Secured(tmp_path_factory.mktemp("secure"))
    started = secured.cli("cluster", "start", "--port", "0", "--slots", "2", "--config", secured.cluster_config,
                          timeout=180)
    assert started.returncode == 0, started.stdout + started.stderr
    import json

    with open(Path(secured.env["MILLSTREAM_CLUSTER_DIR"]) / "cluster.json") as f:
        secured.address = json.load(f)["jobmanager"]
    try:
        yield secured
    finally:
        stopped = secured.cli("cluster", "stop", timeout=60)
        assert stopped.returncode == 0, stopped.stderr


def test_a_job_runs_with_tls_and_tokens_from_the_cli_and_from_python(cluster: Secured, tmp_path: Path) -> None:
    job = tmp_path / "words.py"
    job.write_text(JOB)
    run = cluster.cli("run", "--config", cluster.client_config, "--jobmanager", cluster.address, str(job))
    assert run.returncode == 0, run.stderr
    assert f"COUNTS {EXPECTED}" in run.stdout
    # python job.py, everything from the environment (as a container would set it)
    env = {**cluster.env, "MILLSTREAM_JOBMANAGER": cluster.address,
           **{"MILLSTREAM_CONF_" + key.upper().replace(".", "_").replace("-", "_"): value
              for key, value in {**cluster.client.options(), "security.auth.client-token": CLIENT_TOKEN}.items()}}
    direct = subprocess.run([sys.executable, str(job)], env=env, capture_output=True, text=True, timeout=120)
    assert direct.returncode == 0, direct.stderr
    assert f"COUNTS {EXPECTED}" in direct.stdout
    listed = cluster.cli("list", "--config", cluster.client_config, "--jobmanager", cluster.address)
    assert listed.returncode == 0, listed.stderr
    assert len([line for line in listed.stdout.splitlines() if "secure word count" in line and "FINISHED" in line]) == 2


def _job_graph(name: str) -> Any:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_collection([1, 2, 3]).map(lambda x: x * 2).print()
    return env.get_job_graph(name).proto


@pytest.mark.parametrize("token,code,says", [
    (None, grpc.StatusCode.UNAUTHENTICATED, "carries no 'authorization: Bearer <token>'"),
    ("not-the-token", grpc.StatusCode.UNAUTHENTICATED, "the call's token is not valid here"),
    (CLUSTER_TOKEN, grpc.StatusCode.PERMISSION_DENIED, "carries the cluster token, which may not call it"),
])
def test_a_client_without_the_client_token_cannot_submit_and_nothing_runs(cluster: Secured, token: str | None,
                                                                          code: grpc.StatusCode, says: str) -> None:
    graph = _job_graph(f"refused job {token}")
    with cluster.good_client() as client:
        before = len(client.list_jobs())
    with cluster.client_with(Credentials(_tls(cluster.client), token)) as client:
        with pytest.raises(grpc.RpcError) as refused:
            client.submit(graph)
        assert refused.value.code() == code
        assert refused.value.details().startswith("Dispatcher/SubmitJob needs the client token (security.auth.client-token)")
        assert says in refused.value.details()
        with pytest.raises(grpc.RpcError) as listing:
            client.list_jobs()
        assert listing.value.code() == code
    with cluster.good_client() as client:
        jobs = client.list_jobs()
        assert len(jobs) == before and graph.job_id not in [job.job_id for job in jobs]


def test_the_cli_says_why_it_was_refused(cluster: Secured) -> None:
    listed = cluster.cli("list", "--config", cluster.client_config, "--jobmanager", cluster.address,
                         "-D", "security.auth.client-token=wrong")
    assert listed.returncode == 1
    assert listed.stderr.strip() == ("millstream: error: UNAUTHENTICATED: Dispatcher/ListJobs needs the client token "
                                     "(security.auth.client-token): the call's token is not valid here")


def test_a_plaintext_client_or_one_with_an_untrusted_certificate_is_told_about_tls(cluster: Secured) -> None:
    with pytest.raises(JobManagerTlsError) as plaintext:
        cluster.client_with(Credentials(None, CLIENT_TOKEN)).check_reachable()
    assert str(plaintext.value) == (
        f"Cannot connect to the JobManager at {cluster.address}: the JobManager closed the connection at once; if "
        "the cluster uses TLS, set security.ssl.enabled: true with security.ssl.key, security.ssl.cert and "
        "security.ssl.truststore")
    with pytest.raises(JobManagerTlsError) as rogue:
        cluster.client_with(Credentials(_tls(cluster.rogue), CLIENT_TOKEN)).check_reachable()
    assert "closed the connection during the TLS handshake: it does not accept this process's certificate" in str(rogue.value)
    listed = cluster.cli("list", "--jobmanager", cluster.address)  # no --config: no TLS
    assert listed.returncode == 1 and "if the cluster uses TLS, set security.ssl.enabled: true" in listed.stderr


class NoSpark:
    """A TaskManager that is refused never runs a task: it needs no Spark."""

    max_concurrent_tasks = 2
    master = "local[2]"

    def on_death(self, listener: Any) -> None:
        pass

    def running_task_ids(self) -> list[str]:
        return []


def _taskmanager_start(cluster: Secured, pem: Pem, token: str | None, timeout_s: float) -> BaseException:
    tokens = {"security.auth.cluster-token": token} if token else {}
    conf = cfg.Configuration.from_dict({**pem.options(), **tokens, "taskmanager.numberOfTaskSlots": 1})

    async def start() -> BaseException:
        with pytest.raises((StartupError, RuntimeError)) as refused:
            await TaskManager(conf, cluster.address, spark=NoSpark(), registration_timeout_s=timeout_s).start()
        return refused.value

    return asyncio.run(start())


def test_taskmanagers_with_a_wrong_token_or_an_untrusted_certificate_cannot_register(cluster: Secured) -> None:
    wrong_token = _taskmanager_start(cluster, cluster.node, "not-the-cluster-token", 20)
    assert isinstance(wrong_token, StartupError)
    assert "cannot register at the JobManager" in str(wrong_token)
    assert ("UNAUTHENTICATED: ResourceManager/RegisterTaskManager needs the cluster token (security.auth.cluster-token): "
            "the call's token is not valid here (check security.auth.cluster-token)") in str(wrong_token)
    no_token = _taskmanager_start(cluster, cluster.node, None, 20)
    assert "UNAUTHENTICATED" in str(no_token) and "carries no 'authorization: Bearer <token>'" in str(no_token)
    client_token = _taskmanager_start(cluster, cluster.node, CLIENT_TOKEN, 20)
    assert "PERMISSION_DENIED" in str(client_token) and "carries the client token" in str(client_token)
    untrusted = _taskmanager_start(cluster, cluster.rogue, CLUSTER_TOKEN, 4)
    assert f"could not register at the JobManager {cluster.address} within 4 s; last answer: UNAVAILABLE the " \
           "JobManager closed the connection during the TLS handshake: it does not accept this process's " \
           "certificate" in str(untrusted)
    # The cluster serves on: its own TaskManager only, healthy.
    with cluster.good_client() as client:
        assert client.overview().taskmanagers == 1
    log = Path(cluster.env["MILLSTREAM_CLUSTER_DIR"]) / "log"
    [taskmanager] = re.findall(r"serving at (\S+) with 2 slots", (log / "taskmanager-0.log").read_text())
    for address in (cluster.address, taskmanager):  # both check healthy over TLS, with no token
        health = _healthcheck(address, "--config", cluster.client_config)
        assert health.returncode == 0, health.stderr
        plaintext = _healthcheck(address)
        assert plaintext.returncode == 1 and "if the cluster uses TLS" in plaintext.stderr
    # The JobManager logged whom it turned away, and why.
    refusals = [line for line in (log / "jobmanager.log").read_text().splitlines() if "refused a call from" in line]
    assert any("UNAUTHENTICATED ResourceManager/RegisterTaskManager needs the cluster token" in line for line in refusals)


def _healthcheck(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MILLSTREAM_")}
    return subprocess.run([sys.executable, "-m", "millstream.runtime.rpc.healthcheck", *args], env=env,
                          capture_output=True, text=True, timeout=30)


# The token XORed, so the job's own code and data never hold it: a scan finds only copies the worker got.
_MASK = 0x5A
LEAK_JOB = textwrap.dedent(f"""
    import gc, os
    from millstream.common import WatermarkStrategy
    from millstream.datastream import StreamExecutionEnvironment
    from millstream.datastream.connectors.datagen import DataGeneratorSource

    NEEDLE = {bytes(b ^ _MASK for b in CLUSTER_TOKEN.encode())!r}
    TABLE = bytes(b ^ {_MASK} for b in range(256))
    SCANNED = []

    def hit(data):
        if isinstance(data, str):
            data = data.encode("utf-8", "surrogateescape")
        return NEEDLE in bytes(data).translate(TABLE)

    def leaks(where):
        # what user code in this worker can reach: its environment, its files, every object alive
        found = [f"{{where}}: os.environ[{{k}}]" for k, v in os.environ.items() if hit(k) or hit(v)]
        for path in ["/proc/self/environ", *[v for v in os.environ.values() if os.path.isfile(v)]]:
            try:
                with open(path, "rb") as f:
                    if hit(f.read(1 << 20)):
                        found.append(f"{{where}}: the file {{path}}")
            except OSError:
                pass
        for obj in gc.get_objects():
            for ref in [obj, *gc.get_referents(obj)]:
                if isinstance(ref, (str, bytes, bytearray)) and len(ref) >= len(NEEDLE) and hit(ref):
                    found.append(f"{{where}}: a {{type(ref).__name__}} held by a {{type(obj).__name__}}")
        return found

    def scan_once(where):
        def scan(record):
            if SCANNED:
                return (record, [])
            SCANNED.append(1)
            return (record, leaks(where))
        return scan

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.enable_checkpointing(200)
    numbers = env.from_source(DataGeneratorSource(lambda i: i, 60, records_per_second=20),
                              WatermarkStrategy.no_watermarks(), "numbers")
    scanned = (numbers.map(scan_once("source worker"))
               .key_by(lambda pair: pair[0] % 2)                 # a data exchange: partition look-ups
               .map(lambda pair: (pair[0], pair[1] + scan_once("consumer worker")(pair[0])[1])))
    found, total = set(), 0
    with scanned.execute_and_collect("token scan") as results:
        for record, leaked in results:
            total += record
            found.update(leaked)
    print("TOTAL", total)
    print("LEAKS", sorted(found))
""")


def test_user_code_cannot_find_the_cluster_token_and_exchange_and_checkpoints_still_work(
        cluster: Secured, tmp_path: Path) -> None:
    """A job with the client token scans its workers' environment, files named there and every live
    object for the cluster token: it finds none, while its keyed exchange (partition look-ups with
    the task's credential) and its checkpoints (acks) work with TLS and tokens on."""
    job = tmp_path / "scan.py"
    job.write_text(LEAK_JOB)
    run = cluster.cli("run", "--config", cluster.client_config, "--jobmanager", cluster.address, str(job))
    assert run.returncode == 0, run.stderr
    assert "TOTAL 1770" in run.stdout  # sum(range(60)): every record crossed the exchange
    assert "LEAKS []" in run.stdout, run.stdout
    with cluster.good_client() as client:
        [job_summary] = [j for j in client.list_jobs() if j.job_name == "token scan"]
        assert job_summary.checkpoints.num_completed >= 1


CHILDREN_JOB = textwrap.dedent("""
    import multiprocessing, os, subprocess, sys, threading, time
    from millstream.datastream import StreamExecutionEnvironment

    OUT = sys.argv[1]

    def spawn(x):
        sleeper = subprocess.Popen(["sleep", "300"])
        lock = threading.Lock()
        lock.acquire()
        fork = multiprocessing.get_context("fork").Process(target=lock.acquire)  # hangs on the held lock
        fork.start()
        with open(os.path.join(OUT, f"pids-{x}"), "w") as f:
            f.write(f"{sleeper.pid} {fork.pid}")
        return x

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    with env.from_collection([1, 2]).map(spawn).execute_and_collect("children") as results:
        print("RESULTS", sorted(results))
""")


def test_processes_a_user_function_starts_end_with_its_task(cluster: Secured, tmp_path: Path) -> None:
    job = tmp_path / "children.py"
    job.write_text(CHILDREN_JOB)
    out = tmp_path / "out"
    out.mkdir()
    run = cluster.cli("run", "--config", cluster.client_config, "--jobmanager", cluster.address, str(job), str(out))
    assert run.returncode == 0, run.stderr
    assert "RESULTS [1, 2]" in run.stdout
    pids = [int(pid) for name in ("pids-1", "pids-2") for pid in (out / name).read_text().split()]
    assert len(pids) == 4

    def alive(pid: int) -> bool:
        try:
            return (Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0] != b"Z")
        except OSError:
            return False

    from .harness import poll_for
    poll_for(lambda: not any(alive(pid) for pid in pids), 10, what="the user's sleep and fork to end with the task")


def test_processes_a_user_function_starts_end_when_its_job_is_cancelled(cluster: Secured, tmp_path: Path) -> None:
    from millstream.runtime.execution_state import JobStatus

    from .harness import poll_for

    out = tmp_path / "out"
    out.mkdir()
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    directory = str(out)

    def spawn_and_wait(x: int) -> int:
        import subprocess as sp
        import time as t
        child = sp.Popen(["sleep", "300"])
        Path(directory, "pid").write_text(str(child.pid))
        t.sleep(300)  # the task runs until it is cancelled
        return x

    env.from_collection([1]).map(spawn_and_wait).print()
    graph = env.get_job_graph("cancelled children").proto
    with cluster.good_client() as client:
        job_id = client.submit(graph)
        pid = int(poll_for(lambda: (out / "pid").exists() and (out / "pid").read_text(), 60, what="the child's pid"))
        assert Path(f"/proc/{pid}").exists()
        client.cancel(job_id)
        poll_for(lambda: JobStatus.from_proto(client.status(job_id).status) is JobStatus.CANCELED, 60,
                 what="the job to be cancelled")

    def alive() -> bool:
        try:
            return Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0] != b"Z"
        except OSError:
            return False

    poll_for(lambda: not alive(), 15, what="the user's sleep to end with its cancelled task")
