"""The secure variant of the compose cluster (docker-compose.secure.yml, issue 12): mutual TLS
between every process and role tokens, with the secrets deploy/make-secrets.sh makes. From the
host, a client with the client certificate and token runs word count to the exact result; a
plaintext client, a client with a wrong token and one with the cluster's token are refused with
a message naming the problem, and nothing runs.
"""
from __future__ import annotations

import collections
import os
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

from .cluster import ROOT, ComposeProject, run

pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
def secure_cluster(image: str, tmp_path_factory: pytest.TempPathFactory,
                   request: pytest.FixtureRequest) -> Iterator[ComposeProject]:
    data = tmp_path_factory.mktemp("compose-secure-data")
    data.chmod(0o777)  # the containers run as root
    secrets = tmp_path_factory.mktemp("compose-secrets")
    run([str(ROOT / "deploy" / "make-secrets.sh"), str(secrets)])
    project = ComposeProject(["docker-compose.yml", "docker-compose.secure.yml"], data, {"MILLSTREAM_SECRETS": str(secrets)})
    project.secrets = secrets  # type: ignore[attr-defined]
    yield from project.session(request, [("jobmanager", 1), ("taskmanager", 2)])


def cli(project: ComposeProject, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MILLSTREAM_JOBMANAGER": project.address}
    return subprocess.run([sys.executable, "-m", "millstream.client.cli", *args], env=env, capture_output=True,
                          text=True, timeout=300)


def test_a_client_with_the_certificate_and_the_client_token_runs_word_count_exactly(
        secure_cluster: ComposeProject) -> None:
    config = str(secure_cluster.secrets / "client.yaml")  # type: ignore[attr-defined]
    words = [f"w{i % 17}" for i in range(5_000)]
    (secure_cluster.data / "words.txt").write_text("\n".join(" ".join(words[i:i + 10]) for i in range(0, len(words), 10)))
    done = cli(secure_cluster, "run", "--config", config, str(ROOT / "examples" / "word_count.py"),
               "--input", "/data/words.txt", "--output", "/data/counts")
    assert done.returncode == 0, done.stdout + done.stderr
    counted = [line for path in (secure_cluster.data / "counts").rglob("*") if path.is_file() and not path.name.startswith(".")
               for line in path.read_text().splitlines()]
    assert sorted(counted) == sorted(f"({w},{n})" for w, n in collections.Counter(words).items())
    status = cli(secure_cluster, "cluster", "status", "--config", config)
    assert "TaskManagers: 2  slots: 4/4 free" in status.stdout, status.stdout + status.stderr


def test_clients_without_tls_or_with_a_wrong_or_the_clusters_token_are_refused_and_nothing_runs(
        secure_cluster: ComposeProject) -> None:
    secrets: Path = secure_cluster.secrets  # type: ignore[attr-defined]
    config = str(secrets / "client.yaml")
    plaintext = cli(secure_cluster, "list")
    assert plaintext.returncode != 0 and "if the cluster uses TLS, set security.ssl.enabled" in plaintext.stderr, plaintext.stderr
    wrong = cli(secure_cluster, "list", "--config", config, "-D", "security.auth.client-token=wrong")
    assert "UNAUTHENTICATED" in wrong.stderr and "client token" in wrong.stderr, wrong.stderr
    cluster_token = (secrets / "cluster-token").read_text().strip()
    as_cluster = cli(secure_cluster, "run", "--config", config, "-D", f"security.auth.client-token={cluster_token}",
                     str(ROOT / "examples" / "word_count.py"), "--input", "/data/words.txt", "--output", "/data/refused")
    assert as_cluster.returncode != 0 and "PERMISSION_DENIED" in as_cluster.stderr, as_cluster.stdout + as_cluster.stderr
    listed = cli(secure_cluster, "list", "--config", config)
    assert listed.returncode == 0 and listed.stdout.count("word count") <= 1, listed.stdout  # the first test's job only
    assert not (secure_cluster.data / "refused").exists()
