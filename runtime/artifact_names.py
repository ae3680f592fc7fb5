"""Names a job's artifacts may carry, checked where they are added and where they are stored."""
from __future__ import annotations

import re

__all__ = ["InvalidArtifactError", "check_archive_target", "check_artifact_name"]

_PLAIN_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,254}$")


class InvalidArtifactError(ValueError):
    pass


def check_archive_target(target: str) -> str:
    """The directory an archive is extracted to, inside the task's working directory: one plain
    name (no separators, not '.' or '..'), so it can never point outside that directory."""
    if not isinstance(target, str) or not _PLAIN_NAME.match(target) or target in (".", ".."):
        raise InvalidArtifactError(
            f"Archive target directory {target!r} is not allowed: use a plain directory name "
            "(letters, digits, '_', '-', '.'; no '/')"
        )
    return target


def check_artifact_name(name: str) -> str:
    """A bare file name that a TaskManager may materialize: no directories, no dot-files."""
    if not _PLAIN_NAME.match(name) or name in (".", "..") or not name.endswith((".py", ".zip", ".egg", ".whl")):
        raise InvalidArtifactError(
            f"Artifact name {name!r} is not allowed: use a plain file name ending in .py, .zip, .egg or .whl"
        )
    return name
