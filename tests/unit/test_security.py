"""Security decisions without sockets: which call each token may make, the options that turn TLS
and tokens on (and the errors that name a missing or unreadable one), the TLS contexts built from
PEM files, and the words a TLS failure is reported in."""
from __future__ import annotations

import ssl
from pathlib import Path

import grpc
import pytest

from millstream.runtime import config as cfg
from millstream.runtime.rpc.auth import Role, TokenAuthenticator, client_token, cluster_token
from millstream.runtime.rpc.security import client_credentials, cluster_credentials, server_security
from millstream.runtime.rpc.tls import TlsSettings, tls_problem, tls_settings
from tests.certs import CertificateAuthority

DISPATCHER = "/millstream.v1.Dispatcher/SubmitJob"
LIST_JOBS = "/millstream.v1.Dispatcher/ListJobs"
REGISTER = "/millstream.v1.ResourceManager/RegisterTaskManager"
OFFER = "/millstream.v1.JobMasterService/OfferSlots"
BLOB = "/millstream.v1.BlobServer/GetBlob"
SUBMIT_TASK = "/millstream.v1.TaskExecutor/SubmitTask"
LOOKUP = "/millstream.v1.TaskExecutor/LookupPartition"
HEALTH = "/grpc.health.v1.Health/Check"
REFLECTION = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"

CLIENT, CLUSTER = "client-secret", "cluster-secret"
JOBMANAGER = TokenAuthenticator({Role.CLIENT: CLIENT, Role.CLUSTER: CLUSTER})


def bearer(token: str) -> str:
    return f"Bearer {token}"


# ---- the interceptor's decisions ---------------------------------------------------------------


@pytest.mark.parametrize("method", [DISPATCHER, LIST_JOBS])
def test_the_client_token_may_call_the_dispatcher(method: str) -> None:
    assert JOBMANAGER(method, bearer(CLIENT)) is None


@pytest.mark.parametrize("method", [REGISTER, OFFER, BLOB, SUBMIT_TASK, LOOKUP])
def test_the_cluster_token_may_call_the_cluster_services(method: str) -> None:
    assert JOBMANAGER(method, bearer(CLUSTER)) is None


def test_a_taskmanagers_token_cannot_submit_a_job() -> None:
    code, message = JOBMANAGER(DISPATCHER, bearer(CLUSTER))
    assert code is grpc.StatusCode.PERMISSION_DENIED
    assert message == ("Dispatcher/SubmitJob needs the client token (security.auth.client-token): the call carries "
                       "the cluster token, which may not call it")


@pytest.mark.parametrize("method", [REGISTER, OFFER, SUBMIT_TASK, BLOB])
def test_a_clients_token_cannot_register_or_offer_slots_or_deploy(method: str) -> None:
    code, message = JOBMANAGER(method, bearer(CLIENT))
    assert code is grpc.StatusCode.PERMISSION_DENIED
    assert "needs the cluster token (security.auth.cluster-token)" in message and "carries the client token" in message


def test_no_token_is_unauthenticated_and_the_message_says_which_token_is_needed() -> None:
    code, message = JOBMANAGER(DISPATCHER, None)
    assert code is grpc.StatusCode.UNAUTHENTICATED
    assert message == ("Dispatcher/SubmitJob needs the client token (security.auth.client-token): the call carries "
                       "no 'authorization: Bearer <token>' metadata")
    code, message = JOBMANAGER(REGISTER, None)
    assert code is grpc.StatusCode.UNAUTHENTICATED and "security.auth.cluster-token" in message


@pytest.mark.parametrize("header", [bearer("guess"), bearer(CLIENT + "x"), bearer(CLIENT[:-1]), "Bearer ", CLIENT,
                                    f"Basic {CLIENT}", ""])
def test_a_wrong_or_malformed_token_is_unauthenticated(header: str) -> None:
    code, message = JOBMANAGER(DISPATCHER, header)
    assert code is grpc.StatusCode.UNAUTHENTICATED
    assert message.startswith("Dispatcher/SubmitJob needs the client token (security.auth.client-token): the call's ")


def test_the_scheme_is_case_insensitive_and_spaces_around_the_token_do_not_count() -> None:
    assert JOBMANAGER(DISPATCHER, f"bearer  {CLIENT} ") is None


def test_health_checks_are_open_and_reflection_takes_either_token() -> None:
    assert JOBMANAGER(HEALTH, None) is None
    assert JOBMANAGER(HEALTH, bearer("anything")) is None
    assert JOBMANAGER(REFLECTION, bearer(CLIENT)) is None
    assert JOBMANAGER(REFLECTION, bearer(CLUSTER)) is None
    code, message = JOBMANAGER(REFLECTION, None)
    assert code is grpc.StatusCode.UNAUTHENTICATED and "needs a token" in message


def test_a_service_no_role_may_call_is_refused_to_every_token() -> None:
    code, message = JOBMANAGER("/some.Other/Method", bearer(CLUSTER))
    assert code is grpc.StatusCode.PERMISSION_DENIED and "no token may call this service" in message


def test_a_taskmanager_that_knows_only_the_cluster_token_does_not_know_the_clients() -> None:
    taskmanager = TokenAuthenticator({Role.CLUSTER: CLUSTER})
    assert taskmanager(SUBMIT_TASK, bearer(CLUSTER)) is None
    code, message = taskmanager(SUBMIT_TASK, bearer(CLIENT))
    assert code is grpc.StatusCode.UNAUTHENTICATED and "not valid here" in message


def test_an_authenticator_without_any_token_is_a_programming_error() -> None:
    with pytest.raises(ValueError):
        TokenAuthenticator({Role.CLIENT: ""})


# ---- options -----------------------------------------------------------------------------------


def conf(**values: str) -> cfg.Configuration:
    return cfg.Configuration.from_dict(values)


def test_everything_is_off_by_default() -> None:
    assert cfg.Configuration().get(cfg.SSL_ENABLED) is False
    security = server_security(cfg.Configuration(), jobmanager=True)
    assert security.tls is None and security.authenticator is None
    assert client_credentials(cfg.Configuration()).token is None
    assert cluster_credentials(cfg.Configuration()).tls is None


def test_each_side_presents_its_own_token() -> None:
    c = cfg.Configuration.from_dict({"security.auth.client-token": CLIENT, "security.auth.cluster-token": CLUSTER})
    assert client_credentials(c).token == CLIENT
    assert cluster_credentials(c).token == CLUSTER
    assert CLIENT not in repr(client_credentials(c))  # never in a log line


def test_tokens_from_files(tmp_path: Path) -> None:
    (tmp_path / "client").write_text(f"  {CLIENT}\n")
    (tmp_path / "cluster").write_text(CLUSTER)
    c = cfg.Configuration.from_dict({"security.auth.client-token-file": str(tmp_path / "client"),
                                     "security.auth.cluster-token-file": str(tmp_path / "cluster")})
    assert (client_token(c), cluster_token(c)) == (CLIENT, CLUSTER)
    authenticator = server_security(c, jobmanager=True).authenticator
    assert authenticator is not None and authenticator(DISPATCHER, bearer(CLIENT)) is None
    # The value option wins over the file.
    c.set(cfg.AUTH_CLUSTER_TOKEN, "inline")
    assert cluster_token(c) == "inline"


def test_an_unreadable_or_empty_token_file_is_an_error_naming_the_key(tmp_path: Path) -> None:
    with pytest.raises(cfg.ConfigurationError, match=r"security.auth.client-token-file: cannot read .*nope"):
        client_token(cfg.Configuration.from_dict({"security.auth.client-token-file": str(tmp_path / "nope")}))
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(cfg.ConfigurationError, match=r"security.auth.cluster-token-file: .*empty is empty"):
        cluster_token(cfg.Configuration.from_dict({"security.auth.cluster-token-file": str(tmp_path / "empty")}))


def test_a_jobmanager_with_one_token_only_refuses_to_start() -> None:
    with pytest.raises(cfg.ConfigurationError, match=r"security.auth.cluster-token is set\) but "
                                                     r"security.auth.client-token \(or security.auth.client-token-file\)"):
        server_security(cfg.Configuration.from_dict({"security.auth.cluster-token": CLUSTER}), jobmanager=True)
    with pytest.raises(cfg.ConfigurationError, match="but security.auth.cluster-token"):
        server_security(cfg.Configuration.from_dict({"security.auth.client-token": CLIENT}), jobmanager=True)


def test_the_two_tokens_must_differ() -> None:
    with pytest.raises(cfg.ConfigurationError, match="must differ"):
        server_security(cfg.Configuration.from_dict({"security.auth.client-token": "same",
                                                     "security.auth.cluster-token": "same"}), jobmanager=True)


def test_a_taskmanager_needs_the_cluster_token_only() -> None:
    security = server_security(cfg.Configuration.from_dict({"security.auth.cluster-token": CLUSTER}), jobmanager=False)
    assert security.authenticator is not None
    assert security.authenticator(SUBMIT_TASK, bearer(CLUSTER)) is None


def test_tokens_come_from_the_environment_too() -> None:
    c = cfg.load_configuration(env={"MILLSTREAM_CONF_SECURITY_AUTH_CLIENT_TOKEN": CLIENT,
                                    "MILLSTREAM_CONF_SECURITY_SSL_ENABLED": "false"})
    assert client_token(c) == CLIENT


# ---- TLS settings and contexts -----------------------------------------------------------------


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> CertificateAuthority:
    return CertificateAuthority(tmp_path_factory.mktemp("ca"))


def test_tls_needs_all_three_files(ca: CertificateAuthority) -> None:
    pem = ca.issue("node")
    assert tls_settings(conf(**{"security.ssl.key": pem.key})) is None  # not enabled: files unused
    for missing in ("security.ssl.key", "security.ssl.cert", "security.ssl.truststore"):
        options = {k: v for k, v in pem.options().items() if k != missing}
        with pytest.raises(cfg.ConfigurationError, match=f"security.ssl.enabled is true but {missing} is not set"):
            tls_settings(cfg.Configuration.from_dict(options))
    settings = tls_settings(cfg.Configuration.from_dict(pem.options()))
    assert settings == TlsSettings(pem.key, pem.cert, pem.truststore)


def test_flinks_internal_key_turns_tls_on_too(ca: CertificateAuthority) -> None:
    pem = ca.issue("flink-style")
    options = {**pem.options(), "security.ssl.internal.enabled": "true"}
    del options["security.ssl.enabled"]
    assert tls_settings(cfg.Configuration.from_dict(options)) is not None


def test_a_missing_or_wrong_file_is_named_at_start(ca: CertificateAuthority, tmp_path: Path) -> None:
    pem = ca.issue("node2")
    with pytest.raises(cfg.ConfigurationError, match=r"security.ssl.cert .*nope.* and security.ssl.key"):
        tls_settings(cfg.Configuration.from_dict({**pem.options(), "security.ssl.cert": str(tmp_path / "nope")}))
    with pytest.raises(cfg.ConfigurationError, match=r"security.ssl.truststore .*: cannot load it as PEM"):
        tls_settings(cfg.Configuration.from_dict({**pem.options(), "security.ssl.truststore": pem.key}))
    other = ca.issue("node3")
    with pytest.raises(cfg.ConfigurationError, match="cannot load them as a PEM certificate chain and its private key"):
        tls_settings(cfg.Configuration.from_dict({**pem.options(), "security.ssl.key": other.key}))
    with pytest.raises(cfg.ConfigurationError, match=r"security.ssl.key: cannot read"):
        TlsSettings(str(tmp_path / "gone"), pem.cert, pem.truststore).channel_credentials()


def test_socket_contexts_are_mutual_and_check_host_names(ca: CertificateAuthority) -> None:
    settings = tls_settings(cfg.Configuration.from_dict(ca.issue("node4").options()))
    assert settings is not None
    server, client = settings.server_context(), settings.client_context()
    assert server.verify_mode == ssl.CERT_REQUIRED and client.verify_mode == ssl.CERT_REQUIRED
    assert client.check_hostname and server.num_tickets == 0
    assert server.minimum_version >= ssl.TLSVersion.TLSv1_2
    assert settings.server_credentials() is not None and settings.channel_credentials() is not None


# ---- the words of a TLS failure ----------------------------------------------------------------


def test_tls_failures_are_told_in_words_that_name_the_options() -> None:
    verify = ("failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:1: Tls handshake failed "
              "(TSI_PROTOCOL_FAILURE): SSL_ERROR_SSL: error:1000007d:SSL routines:OPENSSL_internal:"
              "CERTIFICATE_VERIFY_FAILED: unable to get local issuer certificate: OK")
    assert tls_problem(verify, True, "JobManager") == (
        "TLS handshake failed: the JobManager's certificate is not signed by a CA in security.ssl.truststore")
    plain_server = "Tls handshake failed (TSI_PROTOCOL_FAILURE): SSL_ERROR_SSL: ...:WRONG_VERSION_NUMBER: x"
    assert "does not use TLS (is security.ssl.enabled true there?)" in tls_problem(plain_server, True, "JobManager")
    closed = "failed to connect to all addresses; last error: UNAVAILABLE: ipv4:127.0.0.1:1: Socket closed"
    assert "does not accept this process's certificate (security.ssl.cert" in tls_problem(closed, True)
    assert "if the cluster uses TLS, set security.ssl.enabled: true" in tls_problem(closed, False)
    refused = "failed to connect to all addresses; last error: UNAVAILABLE: ipv4:127.0.0.1:1: Connection refused"
    assert tls_problem(refused, True) is None and tls_problem(refused, False) is None


# --- task credentials: what a task's Spark worker holds instead of the cluster token -----------------

def test_a_task_credential_may_look_up_partitions_and_nothing_else() -> None:
    from millstream.runtime.rpc.auth import task_credential

    credential = task_credential(CLUSTER, b"a" * 16)
    assert CLUSTER not in credential
    assert JOBMANAGER(LOOKUP, bearer(credential)) is None
    for method in ("/millstream.v1.ResourceManager/SendSlotReport", "/millstream.v1.ResourceManager/RegisterTaskManager",
                   "/millstream.v1.JobMasterService/AcknowledgeCheckpoint", "/millstream.v1.TaskExecutor/SubmitTask",
                   "/millstream.v1.BlobServer/GetBlob", "/millstream.v1.Dispatcher/SubmitJob"):
        refusal = JOBMANAGER(method, bearer(credential))
        assert refusal is not None and refusal[0] is grpc.StatusCode.PERMISSION_DENIED, method
        assert "a task's credential, which may only look up partitions" in refusal[1]


def test_a_forged_or_foreign_task_credential_is_unauthenticated() -> None:
    from millstream.runtime.rpc.auth import task_credential

    good = task_credential(CLUSTER, b"a" * 16)
    attempt, mac = good[len("task."):].split(".")
    for forged in (f"task.{'b' * 32}.{mac}", f"task.{attempt}.{'0' * 64}", "task.zz.00", "task.",
                   task_credential("another cluster's token", b"a" * 16)):
        refusal = JOBMANAGER(LOOKUP, bearer(forged))
        assert refusal is not None and refusal[0] is grpc.StatusCode.UNAUTHENTICATED, forged
    # a client-facing server that knows no cluster token accepts no task credential
    refusal = TokenAuthenticator({Role.CLIENT: CLIENT})(LOOKUP, bearer(good))
    assert refusal is not None and refusal[0] is grpc.StatusCode.UNAUTHENTICATED


def test_processes_that_run_user_code_start_without_token_variables() -> None:
    from millstream.runtime.rpc.auth import without_secrets

    env = {"PATH": "/bin", "MILLSTREAM_CONF_SECURITY_AUTH_CLUSTER_TOKEN": "t", "MILLSTREAM_CONF_SECURITY_AUTH_CLIENT_TOKEN_FILE": "/f",
           "MILLSTREAM_CONFIG_FILE": "/etc/m.yaml", "MILLSTREAM_CONF_HEARTBEAT_TIMEOUT": "5 s"}
    assert without_secrets(env) == {"PATH": "/bin", "MILLSTREAM_CONF_HEARTBEAT_TIMEOUT": "5 s"}
