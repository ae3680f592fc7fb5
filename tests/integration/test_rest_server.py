"""The REST shell over a fake JobManager state: routing, Flink's error bodies, leadership, tokens
and TLS (an aiohttp server on 127.0.0.1, port 0, in this process; no cluster)."""
from __future__ import annotations

import asyncio
import fnmatch
import json
import ssl
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from millstream.jobmanager.rest import views
from millstream.jobmanager.rest.server import OPENAPI_PATH, ROUTES, RestServer
from millstream.proto import cluster_pb2 as cpb
from millstream.runtime.rpc.auth import Role, TokenAuthenticator
from millstream.runtime.rpc.tls import TlsSettings
from tests.certs import CertificateAuthority

from .rest_fakes import JOB, VERTEX, FakeSource, serve


async def call(server: RestServer, method: str, path: str, **kwargs: Any) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as session:
        async with session.request(method, server.url + path, **kwargs) as response:
            return response.status, json.loads(await response.text())


def test_routes_answer_flinks_shapes() -> None:
    source = FakeSource()

    async def check(server: RestServer) -> None:
        assert server.port > 0 and server.url == f"http://127.0.0.1:{server.port}"
        status, body = await call(server, "GET", "/overview")
        assert status == 200 and body["taskmanagers"] == 1 and body["flink-version"] == "0.1.0"
        for prefix in ("", "/v1"):
            status, body = await call(server, "GET", f"{prefix}/jobs/overview")
            assert status == 200 and body["jobs"][0]["jid"] == JOB.hex()
        assert (await call(server, "GET", "/jobs"))[1] == {"jobs": [{"id": JOB.hex(), "status": "RUNNING"}]}
        status, body = await call(server, "GET", f"/jobs/{JOB.hex()}")
        assert status == 200 and body["state"] == "RUNNING"
        assert (await call(server, "GET", f"/jobs/{JOB.hex()}/plan"))[1] == {"plan": {"jid": JOB.hex(), "nodes": []}}
        assert (await call(server, "GET", f"/jobs/{JOB.hex()}/exceptions"))[1]["exceptionHistory"]["entries"] == []
        status, body = await call(server, "GET", f"/jobs/{JOB.hex()}/checkpoints")
        assert status == 404 and "Checkpointing has not been enabled" in body["errors"][0]
        assert (await call(server, "GET", "/taskmanagers"))[1]["taskmanagers"][0]["id"] == "tm-1"
        assert (await call(server, "GET", "/taskmanagers/tm-1"))[1]["slotsNumber"] == 2
        assert (await call(server, "GET", "/config"))[1]["flink-version"] == "0.1.0"

    serve(source)(check)


def test_errors_are_flinks_json() -> None:
    async def check(server: RestServer) -> None:
        status, body = await call(server, "GET", "/no/such/path")
        assert status == 404 and body == {"errors": ["Not found: /no/such/path"]}
        status, body = await call(server, "GET", f"/jobs/{'ab' * 16}")
        assert status == 404 and body == {"errors": [f"Job {'ab' * 16} not found."]}
        status, body = await call(server, "GET", "/jobs/not-a-job-id/plan")
        assert status == 400 and "Invalid JobID 'not-a-job-id'" in body["errors"][0]
        status, body = await call(server, "GET", "/taskmanagers/tm-9")
        assert status == 404 and body == {"errors": ["TaskManager tm-9 not found."]}
        status, body = await call(server, "DELETE", "/overview")
        assert status == 405 and "GET" in body["errors"][0]

    serve(FakeSource())(check)


def test_patch_cancels_with_202() -> None:
    source = FakeSource()

    async def check(server: RestServer) -> None:
        assert await call(server, "PATCH", f"/jobs/{JOB.hex()}?mode=cancel") == (202, {})
        assert await call(server, "PATCH", f"/jobs/{JOB.hex()}") == (202, {})
        status, body = await call(server, "PATCH", f"/jobs/{JOB.hex()}?mode=stop")
        assert status == 400 and "only mode=cancel" in body["errors"][0]
        assert (await call(server, "PATCH", f"/jobs/{'ab' * 16}"))[0] == 404
        assert source.cancelled == [JOB, JOB]
        # A globally terminal job: 409 (Flink's FlinkJobTerminatedWithoutCancellationException), not cancelled again.
        for ended in (cpb.FINISHED, cpb.CANCELED, cpb.FAILED):
            source.jobs[JOB].summary.status = ended
            status, body = await call(server, "PATCH", f"/jobs/{JOB.hex()}?mode=cancel")
            assert status == 409 and "already reached another terminal state" in body["errors"][0]
        assert source.cancelled == [JOB, JOB]

    serve(source)(check)
    assert source.cancelled == [JOB, JOB]


def test_a_standby_answers_503_except_the_openapi_document() -> None:
    source = FakeSource()
    source.leading = False

    async def check(server: RestServer) -> None:
        for path in ("/overview", "/jobs/overview", f"/jobs/{JOB.hex()}", "/taskmanagers"):
            status, body = await call(server, "GET", path)
            assert status == 503 and "not the leader" in body["errors"][0], path
        assert (await call(server, "GET", OPENAPI_PATH))[0] == 200

    serve(source)(check)


def test_openapi_lists_every_path() -> None:
    async def check(server: RestServer) -> None:
        status, body = await call(server, "GET", OPENAPI_PATH)
        assert status == 200 and body["openapi"].startswith("3.")
        assert set(body["paths"]) == set(ROUTES)
        assert {"/overview", "/jobs/overview", "/jobs/{jobid}", "/taskmanagers/{taskmanagerid}"} <= set(body["paths"])
        assert "patch" in body["paths"]["/jobs/{jobid}"]

    serve(FakeSource())(check)


def test_tokens_client_token_required_everywhere_but_openapi() -> None:
    authenticator = TokenAuthenticator({Role.CLIENT: "client-secret", Role.CLUSTER: "cluster-secret"})

    async def check(server: RestServer) -> None:
        status, body = await call(server, "GET", "/overview")
        assert status == 401 and "Authorization: Bearer" in body["errors"][0]
        assert (await call(server, "GET", "/overview", headers={"Authorization": "Bearer wrong"}))[0] == 401
        assert (await call(server, "GET", "/overview", headers={"Authorization": "Basic x"}))[0] == 401
        status, body = await call(server, "GET", "/overview", headers={"Authorization": "Bearer cluster-secret"})
        assert status == 403 and "client token" in body["errors"][0]
        assert (await call(server, "GET", "/overview", headers={"Authorization": "Bearer client-secret"}))[0] == 200
        assert (await call(server, "PATCH", f"/jobs/{JOB.hex()}"))[0] == 401
        assert (await call(server, "GET", OPENAPI_PATH))[0] == 200

    source = FakeSource()
    serve(source, authenticator=authenticator)(check)
    assert source.cancelled == []


def test_tls_is_mutual(tmp_path: Path) -> None:
    ca = CertificateAuthority(tmp_path)
    node, client = ca.issue("node"), ca.issue("client")
    tls = TlsSettings(node.key, node.cert, node.truststore)
    with_cert = ssl.create_default_context(cafile=client.truststore)
    with_cert.load_cert_chain(client.cert, client.key)
    without_cert = ssl.create_default_context(cafile=client.truststore)

    async def check(server: RestServer) -> None:
        assert server.url.startswith("https://")
        assert (await call(server, "GET", "/overview", ssl=with_cert))[0] == 200
        with pytest.raises(aiohttp.ClientError):
            await call(server, "GET", "/overview", ssl=without_cert)
        plain = FakeSource()  # a plaintext request gets no answer from a TLS server
        with pytest.raises(aiohttp.ClientError):
            async with aiohttp.ClientSession() as session:
                async with session.get(server.url.replace("https://", "http://") + "/overview") as response:
                    plain.cancelled.append(str(response.status).encode())
        assert plain.cancelled == []

    serve(FakeSource(), tls=tls)(check)


def test_views_module_is_what_the_server_serves() -> None:
    assert views.error_body("x") == {"errors": ["x"]}


async def fetch(server: RestServer, path: str, **kwargs: Any) -> tuple[int, str, str]:
    async with aiohttp.ClientSession() as session:
        async with session.get(server.url + path, **kwargs) as response:
            return response.status, response.content_type, await response.text()


def test_web_ui_static_files_without_a_token_and_on_a_standby() -> None:
    """The web UI's files are served at / and /web/<name> with no token, even on a standby (the
    page asks for the token and shows the API's errors); nothing else under /web/ is."""
    authenticator = TokenAuthenticator({Role.CLIENT: "client-secret", Role.CLUSTER: "cluster-secret"})
    source = FakeSource()
    source.leading = False

    async def check(server: RestServer) -> None:
        status, content_type, text = await fetch(server, "/")
        assert (status, content_type) == (200, "text/html") and "/web/app.js" in text
        assert (await fetch(server, "/web/index.html"))[:2] == (200, "text/html")
        status, content_type, text = await fetch(server, "/web/app.js")
        assert (status, content_type) == (200, "application/javascript") and "Authorization" in text
        assert (await fetch(server, "/web/style.css"))[:2] == (200, "text/css")
        for path in ("/web/nope.js", "/web/..%2Frest_server.py", "/web/"):
            assert (await fetch(server, path))[0] == 404, path
        assert (await call(server, "GET", "/overview"))[0] == 401  # the API still needs the token

    serve(source, authenticator=authenticator)(check)


def test_web_files_are_package_data() -> None:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+

    from millstream.jobmanager.rest.server import WEB_DIR, WEB_FILES

    root = Path(__file__).resolve().parents[2]
    setuptools = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "millstream*" in setuptools["packages"]["find"]["include"]
    patterns = setuptools["package-data"]["millstream.jobmanager.rest.web"]
    assert all((WEB_DIR / name).is_file() and any(fnmatch.fnmatch(name, p) for p in patterns) for name in WEB_FILES)


def test_vertex_routes_answer_flinks_shapes_and_errors() -> None:
    base = f"/jobs/{JOB.hex()}/vertices/{VERTEX.hex()}"

    async def check(server: RestServer) -> None:
        status, body = await call(server, "GET", base)
        assert status == 200 and body["id"] == VERTEX.hex() and body["subtasks"][0]["metrics"]["read-records"] == 5
        assert (await call(server, "GET", f"/v1{base}/metrics?get=0.Map.hits"))[1] == [{"id": "0.Map.hits", "value": "3"}]
        status, body = await call(server, "GET", f"{base}/subtasks/metrics?get=numRecordsIn&agg=max")
        assert body == [{"id": "numRecordsIn", "max": 5.0}]
        status, body = await call(server, "GET", f"{base}/backpressure")
        assert status == 200 and body["backpressure-level"] == "high"
        status, body = await call(server, "GET", f"/jobs/{JOB.hex()}/vertices/{'ab' * 16}")
        assert status == 404 and body == {"errors": [f"Job {JOB.hex()} has no vertex {'ab' * 16}."]}
        status, body = await call(server, "GET", f"/jobs/{JOB.hex()}/vertices/xyz/metrics")
        assert status == 400 and "Invalid JobVertexID 'xyz'" in body["errors"][0]
        status, body = await call(server, "GET", f"/jobs/{'ab' * 16}/vertices/{VERTEX.hex()}/backpressure")
        assert status == 404 and body == {"errors": [f"Job {'ab' * 16} not found."]}
        status, body = await call(server, "GET", f"{base}/subtasks/metrics?get=numRecordsIn&agg=median")
        assert status == 400 and "Unknown aggregation 'median'" in body["errors"][0]

    serve(FakeSource())(check)


async def completed(server: RestServer, path: str) -> dict:
    """Polls a savepoint operation's path until it is COMPLETED; its last answer."""
    for _ in range(100):
        _, result = await call(server, "GET", path)
        if result["status"]["id"] == "COMPLETED":
            break
        await asyncio.sleep(0.01)
    return result


def test_savepoint_is_an_asynchronous_operation_on_flinks_paths() -> None:
    source = FakeSource()
    job = JOB.hex()

    async def check(server: RestServer) -> None:
        status, body = await call(server, "POST", f"/jobs/{job}/savepoints",
                                  json={"target-directory": "/sp", "cancel-job": False})
        assert status == 202 and len(body["request-id"]) == 32  # answered before the savepoint is taken
        trigger = body["request-id"]
        status, body = await call(server, "GET", f"/jobs/{job}/savepoints/{trigger}")
        assert (status, body) == (200, {"status": {"id": "IN_PROGRESS"}, "operation": None})
        source.release.set()
        body = await completed(server, f"/v1/jobs/{job}/savepoints/{trigger}")
        assert body == {"status": {"id": "COMPLETED"}, "operation": {"location": "/sp/savepoint-1"}}
        # stop-with-savepoint: the same operation, stop=True; a trigger id given twice is one savepoint.
        mine = "0f" * 16
        for _ in range(2):
            status, body = await call(server, "POST", f"/jobs/{job}/stop", json={"targetDirectory": "/sp", "triggerId": mine})
            assert (status, body) == (202, {"request-id": mine})
        assert source.savepoints == [(JOB, "/sp", False), (JOB, "/sp", True)]
        # drain (Flink's stop --drain) reaches the Dispatcher
        source.release.set()
        status, body = await call(server, "POST", f"/jobs/{job}/stop", json={"targetDirectory": "/sp", "drain": True})
        assert status == 202 and source.savepoints[-1] == (JOB, "/sp", True, True)
        # A failed savepoint: COMPLETED with its failure-cause.
        _, body = await call(server, "POST", f"/jobs/{job}/savepoints", json={"target-directory": "/broken"})
        source.release.set()
        result = await completed(server, f"/jobs/{job}/savepoints/{body['request-id']}")
        assert "no checkpoints" in result["operation"]["failure-cause"]["stack-trace"]
        # cancel-job (Flink's cancel-with-savepoint): a plain savepoint, then the job is cancelled.
        assert source.cancelled == []
        _, body = await call(server, "POST", f"/jobs/{job}/savepoints", json={"target-directory": "/sp", "cancel-job": True})
        assert source.savepoints[-1] == (JOB, "/sp", False) and source.cancelled == []  # not before the savepoint
        source.release.set()
        result = await completed(server, f"/jobs/{job}/savepoints/{body['request-id']}")
        assert result["operation"]["location"].startswith("/sp/savepoint-") and source.cancelled == [JOB]

    serve(source)(check)


def test_savepoint_refusals_are_flinks_errors() -> None:
    source = FakeSource()
    job = JOB.hex()

    async def check(server: RestServer) -> None:
        status, body = await call(server, "POST", f"/jobs/{'ff' * 16}/savepoints", json={"target-directory": "/sp"})
        assert status == 404 and "not found" in body["errors"][0]
        status, body = await call(server, "POST", f"/jobs/{job}/savepoints", json={})
        assert status == 400 and "savepoint-dir" in body["errors"][0]
        status, body = await call(server, "POST", f"/jobs/{job}/savepoints", data="{not json")
        assert status == 400 and "not JSON" in body["errors"][0]
        status, body = await call(server, "POST", f"/jobs/{job}/stop", json={"targetDirectory": "/sp", "drain": "yes"})
        assert status == 400 and "drain" in body["errors"][0]
        status, body = await call(server, "GET", f"/jobs/{job}/savepoints/{'ab' * 16}")
        assert status == 404 and "no savepoint operation" in body["errors"][0]
        status, body = await call(server, "GET", f"/jobs/{job}/savepoints/xyz")
        assert status == 400 and "trigger id" in body["errors"][0]
        source.jobs[JOB].summary.status = cpb.FINISHED
        status, body = await call(server, "POST", f"/jobs/{job}/savepoints", json={"target-directory": "/sp"})
        assert status == 409 and "only a RUNNING job" in body["errors"][0]
        assert source.savepoints == []

    serve(source)(check)


def test_exceptions_take_max_exceptions() -> None:
    source = FakeSource()

    async def check(server: RestServer) -> None:
        status, body = await call(server, "GET", f"/jobs/{JOB.hex()}/exceptions?maxExceptions=3")
        assert status == 200 and body["exceptionHistory"] == {"entries": [], "truncated": False}
        status, body = await call(server, "GET", f"/jobs/{JOB.hex()}/exceptions?maxExceptions=-2")
        assert status == 400 and "maxExceptions" in body["errors"][0]

    serve(source)(check)


@pytest.mark.parametrize("body", [
    b"[" * 100_000,                      # nested arrays: json's decoder would raise RecursionError
    b'{"a":' * 50_000,
    b"[" * 33 + b"]" * 33,
    b"\xff\xfe\x00garbage",              # not UTF-8
    b"{",
    b'{"target-directory": "/sp",}',
    b"NaN",
    b"[1, 2]",
    b'"a string"',
    b'{"target-directory": 5}',
    b'{"target-directory": "/sp", "triggerId": "not-hex"}',
    b'{"target-directory": "/sp", "cancel-job": "yes"}',
    b"\x00" * 1000,
])
def test_every_malformed_body_is_a_400_never_a_500(body: bytes) -> None:
    source = FakeSource()

    async def check(server: RestServer) -> None:
        for path in (f"/jobs/{JOB.hex()}/savepoints", f"/jobs/{JOB.hex()}/stop"):
            status, answer = await call(server, "POST", path, data=body, headers={"Content-Type": "application/json"})
            assert status == 400, (path, answer)
            assert answer["errors"] and answer["errors"][0], answer
        assert source.savepoints == []

    serve(source)(check)
