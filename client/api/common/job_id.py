"""``JobID``: the identifier of a submitted job, at PyFlink's ``pyflink.common.JobID`` path."""
from __future__ import annotations


class JobID(str):
    """A job's 16-byte id. It is the 32 hex digits the CLI, REST API and web UI show (a ``str``,
    so code that treats a job id as its hex text keeps working), with :meth:`to_bytes` for the
    cluster's wire form."""

    def __new__(cls, job_id: bytes | str) -> "JobID":
        if isinstance(job_id, (bytes, bytearray)):
            if len(job_id) != 16:
                raise ValueError(f"a JobID is 16 bytes (32 hex digits), got {job_id!r}")
            return super().__new__(cls, bytes(job_id).hex())
        text = str(job_id).lower()
        try:
            raw = bytes.fromhex(text)
        except ValueError:
            raise ValueError(f"a JobID is 32 hex digits, got {job_id!r}") from None
        if len(raw) != 16:
            raise ValueError(f"a JobID is 16 bytes (32 hex digits), got {job_id!r}")
        return super().__new__(cls, text)

    def to_bytes(self) -> bytes:
        return bytes.fromhex(self)

    def to_hex_string(self) -> str:
        return str.__str__(self)

    def __str__(self) -> str:
        return str.__str__(self)

    def __repr__(self) -> str:
        return f"JobID({str.__str__(self)})"
