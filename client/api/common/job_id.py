"""``JobID``: the identifier of a submitted job, at PyFlink's ``pyflink.common.JobID`` path."""
from __future__ import annotations


class JobID:
    """A job's 16-byte id; ``str()`` gives the 32 hex digits the CLI, REST API and web UI show."""

    def __init__(self, job_id: bytes | str) -> None:
        if isinstance(job_id, str):
            try:
                job_id = bytes.fromhex(job_id)
            except ValueError:
                raise ValueError(f"a JobID is 32 hex digits, got {job_id!r}") from None
        if not isinstance(job_id, (bytes, bytearray)) or len(job_id) != 16:
            raise ValueError(f"a JobID is 16 bytes (32 hex digits), got {job_id!r}")
        self._bytes = bytes(job_id)

    def to_bytes(self) -> bytes:
        return self._bytes

    def to_hex_string(self) -> str:
        return self._bytes.hex()

    def __str__(self) -> str:
        return self._bytes.hex()

    def __repr__(self) -> str:
        return f"JobID({self._bytes.hex()})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, JobID) and other._bytes == self._bytes

    def __hash__(self) -> int:
        return hash(self._bytes)
