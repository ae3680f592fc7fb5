"""The folders show the architecture: the import graph between the user API and the engine.

The user API (``client/api``) records what a program asks for; it may use what every process
shares (``millstream.runtime``'s factories, partitioners, key groups, output tags) but never the
engine's internals (the task, operators, state backend) or the cluster components. The engine
(``runtime/``, ``jobmanager/``, ``taskmanager/``) calls the user's functions and state
descriptors but never imports the API's stream classes or the client.
"""
from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

API_MAY_NOT_IMPORT = (
    "millstream.runtime.task",
    "millstream.runtime.operators",
    "millstream.runtime.state",
    "millstream.runtime.rpc.service",
    "millstream.runtime.entrypoint.process",
    "millstream.jobmanager",
    "millstream.taskmanager",
)
ENGINE_MAY_NOT_IMPORT = (
    "millstream.client",
    "millstream.datastream.data_stream",
    "millstream.datastream.stream_execution_environment",
    "millstream.datastream.transformations",
    "millstream.datastream.connectors",
    "millstream.datastream.checkpoint_config",
)


def imported_modules(path: Path) -> set[str]:
    """Every module a file imports, including ``from package import module`` forms."""
    tree = ast.parse(path.read_text(), str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def violations(folders: list[str], forbidden: tuple[str, ...]) -> list[str]:
    found = []
    for folder in folders:
        for path in sorted((ROOT / folder).rglob("*.py")):
            for name in sorted(imported_modules(path)):
                if any(name == f or name.startswith(f + ".") for f in forbidden):
                    found.append(f"{path.relative_to(ROOT)} imports {name}")
    return found


def test_user_api_does_not_import_engine_internals() -> None:
    assert violations(["client/api"], API_MAY_NOT_IMPORT) == []


def test_engine_does_not_import_the_user_apis_stream_classes_or_the_client() -> None:
    assert violations(["runtime", "jobmanager", "taskmanager"], ENGINE_MAY_NOT_IMPORT) == []


def test_the_checker_sees_forbidden_imports(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("from millstream.runtime import task\nimport millstream.jobmanager.dispatcher.dispatcher\n")
    assert imported_modules(bad) >= {"millstream.runtime.task", "millstream.jobmanager.dispatcher.dispatcher"}


@pytest.mark.parametrize(
    ("package", "folder"),
    [
        ("millstream.client", "client"),
        ("millstream.runtime", "runtime"),
        ("millstream.runtime.task", "runtime/task"),
        ("millstream.runtime.operators", "runtime/operators"),
        ("millstream.runtime.state", "runtime/state"),
        ("millstream.jobmanager", "jobmanager"),
        ("millstream.taskmanager", "taskmanager"),
        ("millstream.proto", "proto"),
        ("millstream.datastream", "client/api/datastream"),
        ("millstream.metrics", "client/api/metrics"),
        ("millstream.runtime.metrics", "runtime/metrics"),
    ],
)
def test_every_import_path_names_its_folder(package: str, folder: str) -> None:
    module = importlib.import_module(package)
    assert Path(module.__file__).resolve().parent == ROOT / folder


def test_client_api_holds_only_the_user_api() -> None:
    assert {p.name for p in (ROOT / "client/api").iterdir() if p.is_dir() and p.name != "__pycache__"} == {
        "common",
        "datastream",
        "metrics",  # pyflink.metrics: the MetricGroup user functions register metrics in
    }


def test_output_tag_is_one_class_for_api_and_engine() -> None:
    from millstream.datastream import OutputTag
    from millstream.runtime.operators import process

    assert process.OutputTag is OutputTag
