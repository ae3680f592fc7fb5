"""The folders show the architecture: the import graph between the user API and the engine.

Every import of every module, at module level and inside functions, is checked against one table
(``MAY_IMPORT``: which component may import which). The engine (``runtime/``, ``jobmanager/``,
``taskmanager/``) imports none of the client and, of the user API, only the value modules it runs
(``API_VALUES``: the user's function base classes, state descriptors, window assigners, Row, type
information; Flink's engine likewise builds on flink-core's ``api.common`` classes), and importing
those loads no stream class. The user API (``client/api``) uses what every process shares in
``runtime`` but not the engine's internals, and reaches the client only through ``env.execute``'s
entry points; the client starts the JobManager and TaskManager in process only for the embedded
mini-cluster (``ALSO_MAY_IMPORT``). The import graph has no cycles: none among module-level
imports, and no import inside a function closes one (such an import may only be there for start-up
speed, said by a ``# lazy:`` comment on it, above it, or once for the whole module).
"""
from __future__ import annotations

import ast
import functools
import importlib
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
COMPONENTS = ("client", "runtime", "jobmanager", "taskmanager", "proto")  # client/api is the "api" component

# The user API's modules the engine may import: the classes of what a user hands the engine.
API_VALUES = (
    "millstream.common.restart_strategy",
    "millstream.common.row",
    "millstream.common.serialization",
    "millstream.common.typeinfo",
    "millstream.common.watermark_strategy",
    "millstream.datastream.evictors",
    "millstream.datastream.functions",
    "millstream.datastream.state",
    "millstream.datastream.time_domain",
    "millstream.datastream.window",
)
# What the user API may use of runtime: shared pieces, never the task, operators, state or RPC.
RUNTIME_SHARED_WITH_API = (
    "millstream.runtime.artifact_names",
    "millstream.runtime.checkpoint_storage",
    "millstream.runtime.checkpointing_mode",
    "millstream.runtime.config",
    "millstream.runtime.execution_state",
    "millstream.runtime.jdbc_postgres",
    "millstream.runtime.keygroups",
    "millstream.runtime.metrics.groups",
    "millstream.runtime.metrics.types",
    "millstream.runtime.narrowing",
    "millstream.runtime.operator_factories",
    "millstream.runtime.output_tag",
    "millstream.runtime.partitioners",
    "millstream.runtime.state.options_factory",
    "millstream.runtime.python_requirements",
)
MAY_IMPORT: dict[str, tuple[str, ...]] = {
    "proto": ("proto",),
    "runtime": ("runtime", "proto", *API_VALUES),
    "jobmanager": ("jobmanager", "runtime", "proto", *API_VALUES),
    "taskmanager": ("taskmanager", "runtime", "proto", *API_VALUES),
    "client": ("client", "api", "runtime", "proto"),
    "api": ("api", *RUNTIME_SHARED_WITH_API),
}
# The few modules that may import more than their component: the entry points of the layer above.
ALSO_MAY_IMPORT: dict[str, tuple[str, ...]] = {
    # env.execute() and get_job_graph(): the user API's way into the client
    "millstream.datastream.stream_execution_environment": (
        "millstream.client.execution", "millstream.client.job_graph", "millstream.client.stream_graph"),
    # `millstream run-application`: the client's process is the application's JobManager
    "millstream.client.application": ("millstream.jobmanager.jobmanager",),
    # the embedded mini-cluster starts a JobManager and a TaskManager in the client's process
    "millstream.client.minicluster": (
        "millstream.jobmanager.jobmanager",
        "millstream.taskmanager.taskmanager",
        "millstream.taskmanager.spark.host_config",  # forks Spark's JVM before the TaskManager is imported
    ),
}
# Loading these is what the engine must never do.
STREAM_CLASSES = (
    "millstream.datastream.data_stream",
    "millstream.datastream.stream_execution_environment",
    "millstream.datastream.transformations",
    "millstream.client",
)
LAZY = "# lazy:"


@dataclass(frozen=True)
class Import:
    importer: str
    target: str  # the module imported (``from pkg import name``: ``pkg.name`` when a module, else ``pkg``)
    line: int
    in_function: bool
    lazy_reason: bool  # a ``# lazy:`` comment on the import, above it, or for the whole module


def module_files(root: Path = ROOT) -> dict[str, Path]:
    """Every module by its import name (``millstream.X``), from the component folders."""
    found = {}
    for folder in COMPONENTS:
        for path in sorted((root / folder).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if parts[:2] == ("client", "api"):
                parts = parts[2:]
            name = ".".join(["millstream", *parts])
            found[name.removesuffix(".__init__")] = path
    return found


def component(path: Path, root: Path = ROOT) -> str:
    parts = path.relative_to(root).parts
    return "api" if parts[:2] == ("client", "api") else parts[0]


def _covered(module: str, entries: tuple[str, ...], modules: dict[str, Path], root: Path) -> bool:
    if module == "millstream":  # the package every module lives in (__version__): always loaded first
        return True
    return any(component(modules[module], root) == e if e in MAY_IMPORT else module == e or module.startswith(e + ".")
               for e in entries)


def imports_of(name: str, modules: dict[str, Path]) -> list[Import]:
    """The millstream modules ``name`` imports, outside ``if TYPE_CHECKING:`` blocks."""
    path = modules[name]
    text = path.read_text()
    lines = text.splitlines()
    tree = ast.parse(text, str(path))
    module_lazy = any(line.startswith(LAZY) for line in lines)
    import_lines = {i for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))
                    for i in range(node.lineno, (node.end_lineno or node.lineno) + 1)}
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[Import] = []

    def marked(node: ast.stmt) -> bool:
        if module_lazy or any(LAZY in lines[i - 1] for i in range(node.lineno, (node.end_lineno or node.lineno) + 1)):
            return True
        above = node.lineno - 1  # 1-based: the line above; a comment above a block of imports covers the block
        while above >= 1 and (lines[above - 1].strip().startswith("#") or above in import_lines):
            if LAZY in lines[above - 1]:
                return True
            above -= 1
        return False

    def resolve(target: str) -> str | None:
        while target and target not in modules:
            target = target.rpartition(".")[0]
        return target or None

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            targets: list[str] = []
            if isinstance(child, ast.Import):
                targets = [alias.name for alias in child.names]
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    up = package.split(".")[: len(package.split(".")) - (child.level - 1)]
                    base = ".".join(up + ([base] if base else []))
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in child.names]
            for target in targets:
                resolved = resolve(target) if target.startswith("millstream") else None
                if resolved is not None:
                    found.append(Import(name, resolved, child.lineno, in_function, in_function and marked(child)))
            visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    visit(tree, False)
    return found


@functools.lru_cache(maxsize=None)
def all_imports(root: Path = ROOT) -> tuple[dict[str, Path], list[Import]]:
    modules = module_files(root)
    return modules, [imp for name in modules for imp in imports_of(name, modules)]


def layering_violations(root: Path = ROOT) -> list[str]:
    modules, imports = all_imports(root)
    found = []
    for imp in imports:
        side = component(modules[imp.importer], root)
        if not _covered(imp.target, MAY_IMPORT[side] + ALSO_MAY_IMPORT.get(imp.importer, ()), modules, root):
            where = "inside a function" if imp.in_function else "at module level"
            found.append(f"{modules[imp.importer].relative_to(root)}:{imp.line} ({side}) imports {imp.target} {where}")
    return found


def module_graph(imports: list[Import]) -> dict[str, set[str]]:
    """Module-level imports; importing ``a.b.c`` from outside package ``a.b`` also runs ``a.b``'s
    ``__init__`` (a package importing its own modules is how a package is built, not a cycle)."""
    graph: dict[str, set[str]] = {}
    for imp in imports:
        if not imp.in_function:
            graph.setdefault(imp.importer, set()).update(loaded_by(imp))
    return graph


def loaded_by(imp: Import) -> set[str]:
    """The modules an import runs: its target and the packages above it that the importer is not in."""
    parts = imp.target.split(".")
    packages = (".".join(parts[:i]) for i in range(2, len(parts)))
    return {imp.target, *(p for p in packages if not (imp.importer == p or imp.importer.startswith(p + ".")))}


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = {start}, [start]
    while todo:
        for nxt in graph.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component_ = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component_.append(member)
                    if member == node:
                        break
                if len(component_) > 1:
                    found.append(sorted(component_))
    return found


def cycle_dodges(root: Path = ROOT) -> list[str]:
    """Imports inside functions that would close a cycle if made at module level."""
    modules, imports = all_imports(root)
    graph = module_graph(imports)
    dodges = []
    for imp in imports:
        if imp.in_function and any(imp.importer in reachable(graph, loaded) for loaded in loaded_by(imp)):
            dodges.append(f"{modules[imp.importer].relative_to(root)}:{imp.line} imports {imp.target} inside a function "
                          "to dodge a cycle")
    return dodges


def unexplained_function_imports(root: Path = ROOT) -> list[str]:
    modules, imports = all_imports(root)
    return [f"{modules[imp.importer].relative_to(root)}:{imp.line} imports {imp.target} inside a function without a "
            f"'{LAZY} <reason>' comment" for imp in imports if imp.in_function and not imp.lazy_reason]


def test_every_import_follows_the_layering_table() -> None:
    assert layering_violations() == []


def test_module_level_imports_have_no_cycles() -> None:
    _, imports = all_imports(ROOT)
    assert cycles(module_graph(imports)) == []


def test_no_function_level_import_dodges_a_cycle() -> None:
    assert cycle_dodges() == []


def test_every_function_level_import_says_why_it_is_lazy() -> None:
    assert unexplained_function_imports() == []


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for folder in COMPONENTS:
        (tmp_path / folder).mkdir(exist_ok=True)
    return tmp_path


def test_the_checker_sees_forbidden_imports_at_module_level_and_in_functions(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "runtime/__init__.py": "",
        "runtime/a.py": "from millstream.datastream import data_stream\n",
        "taskmanager/__init__.py": "",
        "taskmanager/t.py": "def f():\n    # lazy: start-up\n    from millstream.jobmanager import j\n",
        "jobmanager/__init__.py": "",
        "jobmanager/j.py": "from millstream.runtime import a\n",
        "client/api/datastream/__init__.py": "",
        "client/api/datastream/data_stream.py": "",
        "client/api/datastream/functions.py": "",
        "runtime/b.py": "from millstream.datastream import functions\n",  # a value module: allowed
        "jobmanager/jobmanager.py": "",
        "client/minicluster.py": "def start():\n    from millstream.jobmanager.jobmanager import JobManager\n",
        "client/cli.py": "def run():\n    from millstream.jobmanager.jobmanager import JobManager\n",
    })
    assert layering_violations(root) == [
        "client/cli.py:2 (client) imports millstream.jobmanager.jobmanager inside a function",
        "runtime/a.py:1 (runtime) imports millstream.datastream.data_stream at module level",
        "taskmanager/t.py:3 (taskmanager) imports millstream.jobmanager.j inside a function",
    ]


def test_the_checker_sees_a_cycle_and_a_dodged_one(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "runtime/__init__.py": "",
        "runtime/a.py": "from millstream.runtime import b\n",
        "runtime/b.py": "import millstream.runtime.a\n",
        "runtime/c.py": "from millstream.runtime.d import x\n",
        "runtime/d.py": "def f():\n    from millstream.runtime import c\n",
    })
    _, imports = all_imports(root)
    assert cycles(module_graph(imports)) == [["millstream.runtime.a", "millstream.runtime.b"]]
    assert cycle_dodges(root) == ["runtime/d.py:2 imports millstream.runtime.c inside a function to dodge a cycle"]
    assert unexplained_function_imports(root) == [
        "runtime/d.py:2 imports millstream.runtime.c inside a function without a '# lazy: <reason>' comment"]


def test_a_lazy_comment_on_the_import_above_it_or_for_the_module_explains_it(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "runtime/__init__.py": "",
        "runtime/x.py": "",
        "runtime/a.py": "def f():\n    from millstream.runtime import x  # lazy: speed\n",
        "runtime/b.py": "def f():\n    # lazy: speed\n    # (more words)\n    from millstream.runtime import x\n",
        "runtime/c.py": "# lazy: the CLI starts sooner\ndef f():\n    from millstream.runtime import x\n",
        "runtime/d.py": ("def f():\n    # lazy: both\n    from millstream.runtime import x\n"
                         "    from millstream.runtime import (\n        c)\n"),
        "runtime/e.py": "def f():\n    # lazy: f only\n    import os\n\ndef g():\n    from millstream.runtime import x\n",
    })
    assert unexplained_function_imports(root) == [
        "runtime/e.py:6 imports millstream.runtime.x inside a function without a '# lazy: <reason>' comment"]


def test_importing_a_package_module_from_outside_runs_the_packages_init(tmp_path: Path) -> None:
    """An engine module importing ``millstream.datastream.functions`` runs the package's __init__:
    a cycle through it counts."""
    root = _tree(tmp_path, {
        "runtime/__init__.py": "",
        "runtime/ops.py": "from millstream.datastream.functions import F\n",
        "client/api/datastream/__init__.py": "from millstream.datastream.data_stream import DataStream\n",
        "client/api/datastream/functions.py": "",
        "client/api/datastream/data_stream.py": "from millstream.runtime import ops\n",
    })
    _, imports = all_imports(root)
    assert cycles(module_graph(imports)) == [
        ["millstream.datastream", "millstream.datastream.data_stream", "millstream.runtime.ops"]]


def test_a_function_level_import_dodging_a_cycle_through_a_package_init_is_seen(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "runtime/__init__.py": "",
        "runtime/factories.py": "def f():\n    from millstream.datastream.functions import F\n",
        "client/api/datastream/__init__.py": "from millstream.datastream.data_stream import DataStream\n",
        "client/api/datastream/functions.py": "",
        "client/api/datastream/data_stream.py": "from millstream.runtime import factories\n",
    })
    assert cycle_dodges(root) == [
        "runtime/factories.py:2 imports millstream.datastream.functions inside a function to dodge a cycle"]


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
        ("millstream.table", "client/api/table"),
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
        "table",  # pyflink.table: the Table API and SQL over the DataStream API
    }


def test_output_tag_is_one_class_for_api_and_engine() -> None:
    from millstream.datastream import OutputTag
    from millstream.runtime.operators import process

    assert process.OutputTag is OutputTag


# The services a TaskManager calls on the JobManager, and the gateway that is the one way to each.
GATEWAYS = {"ResourceManagerStub": "GrpcResourceManagerGateway", "JobMasterServiceStub": "GrpcJobMasterGateway"}


def _raw_stubs(folder: Path) -> list[str]:
    """Each place under ``folder`` naming a stub that has a gateway (its import, a call, an alias)."""
    found = []
    for path in sorted(folder.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            name = (node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name)
                    else node.name.rsplit(".", 1)[-1] if isinstance(node, ast.alias) else None)
            if name in GATEWAYS:
                found.append(f"{path.relative_to(folder)}:{node.lineno} uses {name}, not {GATEWAYS[name]}")
    return found


def test_the_taskmanager_calls_the_resource_manager_and_job_masters_only_through_gateways() -> None:
    assert _raw_stubs(ROOT / "taskmanager") == []


def test_the_gateway_check_sees_a_raw_stub_called_or_aliased(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "taskmanager/a.py": "from p import cluster_pb2_grpc as g\n\ng.JobMasterServiceStub(None).OfferSlots(1)\n",
        "taskmanager/b.py": "from p.cluster_pb2_grpc import ResourceManagerStub as S\n\nStub = S\n",
        "taskmanager/c.py": "from p import cluster_pb2_grpc as g\n\ng.BlobServerStub(None)\n",
    })
    assert _raw_stubs(root / "taskmanager") == ["a.py:3 uses JobMasterServiceStub, not GrpcJobMasterGateway",
                                                "b.py:1 uses ResourceManagerStub, not GrpcResourceManagerGateway"]
