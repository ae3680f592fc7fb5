"""Application mode in containers (docker-compose.application.yml): the JobManager container runs
the program's main itself (`millstream run-application`), the TaskManager containers join it, and
`up --exit-code-from jobmanager` ends with the application's exit code."""
from __future__ import annotations

from pathlib import Path

import pytest

from .cluster import ComposeProject

pytestmark = pytest.mark.timeout(900)

FAILING = """\
from millstream.datastream import StreamExecutionEnvironment

def check(x):
    if x == 3:
        raise ValueError(f"record {x} is not wanted here")
    return x

env = StreamExecutionEnvironment.get_execution_environment()
env.from_collection([1, 2, 3, 4]).map(check).print()
env.execute("failing application")
"""


def _run(tmp_path: Path, application: str) -> tuple[int, str, ComposeProject]:
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    data.chmod(0o777)  # the containers run as root
    (data / "words.txt").write_text("to be or not to be\nthat is the question\n")
    (data / "failing.py").write_text(FAILING)
    project = ComposeProject(["docker-compose.yml", "docker-compose.application.yml"], data,
                             {"APPLICATION": application, "MILLSTREAM_CONF_HEARTBEAT_INTERVAL": "1 s",
                              "MILLSTREAM_CONF_HEARTBEAT_TIMEOUT": "6 s"})
    try:
        done = project.compose("up", "--no-build", "--exit-code-from", "jobmanager", check=False, timeout=600)
        return done.returncode, project.logs("jobmanager"), project
    finally:
        project.down()
        assert not project.leftovers()


def test_the_jobmanager_container_runs_the_application_and_exits_0(image: str, tmp_path: Path) -> None:
    code, logs, project = _run(tmp_path, "word_count.py --input /data/words.txt --output /data/counts")
    assert code == 0, logs
    counted = sorted(line for p in (project.data / "counts").rglob("*") if p.is_file() and not p.name.startswith(".")
                     for line in p.read_text().splitlines())
    assert counted == ["(be,2)", "(is,1)", "(not,1)", "(or,1)", "(question,1)", "(that,1)", "(the,1)", "(to,2)"]
    assert "Job word count" in logs and "FINISHED" in logs, logs


def test_a_failing_application_ends_compose_with_exit_1_and_the_cause(image: str, tmp_path: Path) -> None:
    code, logs, _ = _run(tmp_path, "/data/failing.py")
    assert code == 1, logs
    assert "FAILED" in logs and "ValueError: record 3 is not wanted here" in logs, logs
