"""The README's checkable claims hold for today's tree.

A newcomer reads the README and tries what it says; a sentence that no longer holds costs them
time. These tests keep the parts that can be checked mechanically honest:

- an option key the README names as existing is registered, and one it lists under "Not yet" /
  "Not there yet" / "Not covered" / "Not done" is not (so a "not yet" list rots loudly when the feature lands);
- no sentence points at an issue number (they rot when the issue closes: say what is missing);
- the Layout table names every source folder and example, and a row that names some of its
  folder's modules names all of them;
- the web UI's refresh interval the README states is the option's default.
"""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path

from millstream.runtime import config as cfg

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()

# Paragraphs (or list items) that list what is missing start like this.
MISSING_LIST = re.compile(r"\s*(?:- )?(?:\*\*)?Not (?:there yet|yet|covered|done)\b")
# A whole backticked token that names an option: `key`, `key=value`, `-Dkey=value`, `key: value`.
OPTION_TOKEN = re.compile(r"(?:-D\s?)?([a-z][a-z0-9-]*(?:\.[a-z0-9*-]+)+)(?:\s*[=:].*)?")
# Flink's option namespaces beyond the registered ones: a key in one of them is an option too.
FLINK_NAMESPACES = {"state", "python", "table", "cluster", "blob", "fs", "io", "job-result-store", "kubernetes",
                    "yarn", "classloader", "scheduler-mode", "akka", "pekko", "sql-client", "queryable-state"}
FILE_NAME = re.compile(r"\.(py|proto|txt|ya?ml|json|log|out|sh|js|html|css|jar|whl|zip|md|csv)$")
# Backticked names that share a prefix with option keys but are Python, not options.
NOT_OPTIONS = {"env.execute"}
COMPONENT_ROOTS = ("client", "runtime", "jobmanager", "taskmanager", "proto")


def _paragraphs(text: str) -> list[str]:
    return [p for p in re.split(r"\n\s*\n|\n(?=- )", text) if p.strip()]


def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


def named_options(text: str) -> list[tuple[str, bool]]:
    """Every option key the text names in backticks, with whether it sits in a missing-list."""
    keys = {option.key for option in cfg.registered_options()}
    namespaces = {key.split(".")[0] for key in keys} | FLINK_NAMESPACES
    found = []
    for paragraph in _paragraphs(text):
        missing = bool(MISSING_LIST.match(paragraph))
        for token in re.findall(r"`([^`\n]+)`", paragraph):
            match = OPTION_TOKEN.fullmatch(token)
            if not match:
                continue
            key = match.group(1)
            if (key.split(".")[0] not in namespaces or key in NOT_OPTIONS or _is_module(key)
                    or FILE_NAME.search(key)):
                continue
            found.append((key, missing))
    return found


def _registered(key: str) -> bool:
    keys = {option.key for option in cfg.registered_options()}
    if key.endswith("*"):
        return any(k.startswith(key[:-1]) for k in keys)
    return key in keys


def test_the_scanner_sees_option_keys_in_and_out_of_missing_lists() -> None:
    text = ("Set `heartbeat.timeout` or `-Drest.port=0`; see `millstream.runtime`.\n\n"
            "Not yet: `web.submit.enable`, `env.execute`.")
    assert named_options(text) == [("heartbeat.timeout", False), ("rest.port", False), ("web.submit.enable", True)]


def test_every_option_the_readme_names_as_existing_is_registered() -> None:
    unregistered = sorted({key for key, missing in named_options(README) if not missing and not _registered(key)})
    assert unregistered == [], "the README names these as options, but no option has the key"


def test_every_option_the_readme_lists_as_missing_is_not_registered() -> None:
    registered = sorted({key for key, missing in named_options(README) if missing and _registered(key)})
    assert registered == [], "the README lists these as not there yet, but they are registered options now"


def test_no_sentence_points_at_an_issue_number() -> None:
    """"(issue 11)" rots when the issue closes; a sentence says what is missing instead."""
    assert re.findall(r"[^\n]*\bissues? #?\d+[^\n]*", README, flags=re.IGNORECASE) == []


def _layout_rows() -> dict[str, str]:
    section = README.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        if line.startswith("| `"):
            first_cell = line.strip("|").split("|")[0]
            for folder in re.findall(r"`([^`]+)`", first_cell):
                rows[folder] = line
    return rows


def _ticked(row: str) -> set[str]:
    return set(re.findall(r"`([^`]+)`", row))


def _source_folders() -> list[Path]:
    folders = []
    for root in COMPONENT_ROOTS:
        for path in sorted((ROOT / root).rglob("*")):
            if path.is_dir() and "__pycache__" not in path.parts and (any(path.glob("*.py")) or path.name == "web"):
                folders.append(path.relative_to(ROOT))
    return folders


def test_the_layout_table_names_every_source_folder() -> None:
    """A folder has its own row, or its parent's row names it (``ha/``) or its import path."""
    rows = _layout_rows()
    unnamed = []
    for folder in _source_folders():
        own = f"{folder.as_posix()}/"
        parent_row = rows.get(f"{folder.parent.as_posix()}/", "")
        import_path = "millstream." + ".".join(folder.parts[2:] if folder.parts[:2] == ("client", "api") else folder.parts)
        if own in rows or f"{folder.name}/" in _ticked(parent_row) or any(
                import_path in _ticked(row) for row in rows.values()):
            continue
        unnamed.append(own)
    assert unnamed == []


def test_a_layout_row_that_names_modules_names_all_of_them() -> None:
    """Rows either describe their folder in words or list its modules; a list is complete."""
    incomplete = {}
    for folder, row in _layout_rows().items():
        path = ROOT / folder
        if not folder.endswith("/") or not path.is_dir():
            continue
        modules = {p.stem for p in path.glob("*.py") if not p.name.startswith("_")}
        named = modules & _ticked(row)
        if named and named != modules:
            incomplete[folder] = sorted(modules - named)
    assert incomplete == {}


def test_the_layout_table_names_every_example() -> None:
    row = _layout_rows()["examples/"]
    examples = ROOT / "examples"
    unnamed = [p.name + ("/" if p.is_dir() else "") for p in sorted(examples.iterdir())
               if not p.name.startswith(("_", ".")) and p.name != "__pycache__"
               and (p.name + "/" if p.is_dir() else p.name) not in _ticked(row)]
    assert unnamed == []


def test_the_web_ui_refresh_the_readme_states_is_the_options_default() -> None:
    stated = re.search(r"Pages refresh every `web\.refresh-interval` \((\d+) s", README)
    assert stated, "the README says how often the web UI refreshes"
    assert int(stated.group(1)) * 1000 == cfg.WEB_REFRESH_INTERVAL.default
