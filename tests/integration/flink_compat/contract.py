"""Flink's REST contract, read from the installed Flink distribution's own classes (see
FlinkRestContract.java): every REST path of Flink 2.3 with the JSON Schema of its response, and
a check that Flink's RestClient parses a response. Nothing is downloaded or vendored: the
contract is that of the Flink whose CLI and dashboard the tests run (``make flink-tools``), and
the tests skip, saying why, without it or without a JDK."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import pytest

from ..flink_tools import FLINK_HOME, INSTALL_HINT

SOURCE = Path(__file__).with_name("FlinkRestContract.java")


@dataclass(frozen=True)
class Endpoint:
    method: str
    url: str  # Flink's template: /jobs/:jobid/vertices/:vertexid
    status: int
    response: str  # the Java response type
    schema: dict[str, Any]

    def matches(self, method: str, path: str) -> bool:
        return self.method == method and re.fullmatch(_pattern(self.url), path) is not None

    @property
    def literal_segments(self) -> int:
        return sum(1 for s in self.url.split("/") if s and not s.startswith(":"))


def _pattern(template: str) -> str:
    return "".join("/[^/]+" if s.startswith(":") else "/" + re.escape(s) for s in template.split("/") if s)


class FlinkContract:
    """Compiles and runs FlinkRestContract.java against ``flink-dist-*.jar`` in ``workdir``."""

    def __init__(self, workdir: Path) -> None:
        jars = sorted((FLINK_HOME / "lib").glob("flink-dist*.jar"))
        if not jars:
            pytest.skip(INSTALL_HINT)
        javac, java = shutil.which("javac"), shutil.which("java")
        if javac is None or java is None:
            pytest.skip("the REST contract is read from Flink's classes with a JDK (17): no javac/java on PATH")
        self.classpath = f"{jars[-1]}:{workdir}"
        self.java = java
        self.workdir = workdir
        compiled = subprocess.run([javac, "-nowarn", "-d", str(workdir), "-cp", str(jars[-1]), str(SOURCE)],
                                  capture_output=True, text=True, timeout=120)
        assert compiled.returncode == 0, compiled.stderr
        document = json.loads(self._run("schema").stdout)
        self.defs: dict[str, Any] = document["$defs"]
        self.endpoints = [Endpoint(e["method"], e["url"], e["status"], e["response"], e["schema"])
                          for e in document["endpoints"]]

    def _run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([self.java, "-cp", self.classpath, "FlinkRestContract", *args], capture_output=True,
                              text=True, timeout=120)

    def endpoint(self, method: str, path: str) -> Endpoint | None:
        """Flink's endpoint serving ``path`` (the most specific template: /jobs/overview before
        /jobs/:jobid), or None when Flink has no such path."""
        matching = [e for e in self.endpoints if e.matches(method, path)]
        return max(matching, key=lambda e: e.literal_segments) if matching else None

    def schema(self, endpoint: Endpoint) -> dict[str, Any]:
        return {"$schema": "https://json-schema.org/draft/2020-12/schema", "$defs": self.defs, **endpoint.schema}

    def unparsable(self, responses: Iterable[tuple[Endpoint, str, Any]]) -> list[str]:
        """Each (endpoint, path, body) that Flink's RestClient fails to parse, with Jackson's reason."""
        listed = [{"method": e.method, "url": e.url, "path": path, "body": body} for e, path, body in responses]
        file = self.workdir / "responses.json"
        file.write_text(json.dumps(listed))
        done = self._run("parse", str(file))
        assert done.returncode in (0, 1), done.stderr[-3000:]
        return done.stdout.splitlines()
