"""What a JDBC user writes, translated for PostgreSQL's Python driver (psycopg 3), and the JDBC
sink's batching and retry decisions. Pure: no driver import, no I/O.

Flink's JdbcSink takes a JDBC URL (``jdbc:postgresql://host:port/database?user=...``), SQL with
``?`` placeholders and a RowTypeInfo whose field types pick the ``PreparedStatement.setX`` call per
placeholder. Here the URL becomes libpq connection parameters, each ``?`` becomes PostgreSQL's own
``$n`` (sent as is by psycopg's raw cursor, so a ``%`` in the SQL needs no escaping), and each field
type becomes a PostgreSQL parameter type with a check of the Python value bound to it.
"""
from __future__ import annotations

import datetime
import decimal
import re
import urllib.parse
from dataclasses import dataclass
from typing import Any, Callable, Sequence

__all__ = [
    "POSTGRES_DRIVER", "BatchPolicy", "PostgresTarget", "bind_record", "field_kinds", "gids_to_roll_back",
    "is_transient", "make_gid", "parse_url", "retry_delay_s", "translate_placeholders",
]

POSTGRES_DRIVER = "org.postgresql.Driver"
_URL_PREFIX = "jdbc:postgresql:"
DEFAULT_PORT = 5432
DEFAULT_CONNECT_TIMEOUT_S = 10  # PgJDBC's connectTimeout default: an unreachable server fails in bounded time

# PgJDBC's URL parameters this sink understands, and the libpq parameter each one becomes.
_PARAMS = {
    "user": "user",
    "password": "password",
    "sslmode": "sslmode",
    "sslrootcert": "sslrootcert",
    "sslcert": "sslcert",
    "sslkey": "sslkey",
    "connectTimeout": "connect_timeout",
    "loginTimeout": "connect_timeout",
    "ApplicationName": "application_name",
    "options": "options",
}
_EXTRA_PARAMS = ("ssl", "currentSchema", "tcpKeepAlive")  # translated by hand below


@dataclass(frozen=True)
class PostgresTarget:
    """A parsed ``jdbc:postgresql:`` URL: hosts, database and libpq parameters (no credentials
    from the builder: those are added by :meth:`conninfo`)."""

    url: str
    hosts: tuple[tuple[str, int], ...]
    database: str | None
    params: tuple[tuple[str, str], ...]

    @property
    def address(self) -> str:
        """``host:port`` (comma-separated when several): what an error message names."""
        return ",".join(f"[{h}]:{p}" if ":" in h else f"{h}:{p}" for h, p in self.hosts)

    def conninfo(self, user: str | None = None, password: str | None = None) -> dict[str, str]:
        """libpq's keyword parameters (``psycopg.connect(**conninfo)``); a user or password given
        to the builder wins over the URL's."""
        out = {
            "host": ",".join(h for h, _ in self.hosts),
            "port": ",".join(str(p) for _, p in self.hosts),
            "connect_timeout": str(DEFAULT_CONNECT_TIMEOUT_S),
        }
        if self.database:
            out["dbname"] = self.database
        out.update(self.params)
        if user:
            out["user"] = user
        if password:
            out["password"] = password
        return out


def parse_url(url: str) -> PostgresTarget:
    """Parses PgJDBC's URL forms: ``jdbc:postgresql:database``, ``jdbc:postgresql://host[:port]/``,
    ``jdbc:postgresql://host1:port1,host2:port2/database?param=value&...``. Raises ValueError
    naming what is wrong (another database, a bad port, a parameter this sink does not know)."""
    if not isinstance(url, str) or not url.startswith(_URL_PREFIX):
        scheme = url.split("//", 1)[0] if isinstance(url, str) else type(url).__name__
        raise ValueError(
            f"JDBC URL {url!r} is not a PostgreSQL URL ({scheme!r}): the JDBC sink writes to PostgreSQL, "
            "expected jdbc:postgresql://host:port/database")
    rest, _, query = url[len(_URL_PREFIX):].partition("?")
    hosts: list[tuple[str, int]] = []
    if rest.startswith("//"):
        hostspec, slash, database = rest[2:].partition("/")
        for spec in hostspec.split(",") if hostspec else ["localhost"]:
            hosts.append(_host_port(url, spec))
        if not slash:
            database = ""
    else:
        hosts.append(("localhost", DEFAULT_PORT))
        database = rest.lstrip("/")
    database = urllib.parse.unquote(database)
    params: dict[str, str] = {}
    for pair in filter(None, query.split("&")):
        key, _, value = pair.partition("=")
        key, value = urllib.parse.unquote(key), urllib.parse.unquote(value)
        if key in _PARAMS:
            params[_PARAMS[key]] = value
        elif key == "ssl":
            if value.lower() in ("", "true"):
                params.setdefault("sslmode", "verify-full")  # PgJDBC: ssl=true verifies the server
        elif key == "currentSchema":
            params["options"] = (params.get("options", "") + f" -c search_path={value}").strip()
        elif key == "tcpKeepAlive":
            params["keepalives"] = "1" if value.lower() == "true" else "0"
        else:
            known = ", ".join(sorted([*_PARAMS, *_EXTRA_PARAMS]))
            raise ValueError(f"JDBC URL {url!r}: parameter {key!r} is not supported by the PostgreSQL sink "
                             f"(supported: {known})")
    return PostgresTarget(url, tuple(hosts), database or None, tuple(params.items()))


def _host_port(url: str, spec: str) -> tuple[str, int]:
    if spec.startswith("["):  # [IPv6]:port
        host, _, port = spec[1:].partition("]")
        port = port.lstrip(":")
    else:
        host, _, port = spec.rpartition(":") if ":" in spec else (spec, "", "")
    if not host:
        raise ValueError(f"JDBC URL {url!r}: no host in {spec!r}")
    if not port:
        return host, DEFAULT_PORT
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"JDBC URL {url!r}: port {port!r} of host {host!r} is not a port number")
    return host, int(port)


def check_driver(driver_name: str | None, url: str) -> None:
    """Only PostgreSQL's driver name (or none) goes with this sink."""
    if driver_name and driver_name != POSTGRES_DRIVER:
        raise ValueError(f"JDBC driver {driver_name!r} is not supported: the JDBC sink writes to PostgreSQL "
                         f"({POSTGRES_DRIVER}) through psycopg, for URL {url!r}")


# -- placeholders ------------------------------------------------------------------------------

_DOLLAR_TAG = re.compile(r"\$([A-Za-z_\u0080-\uffff][A-Za-z_0-9\u0080-\uffff]*)?\$")


def translate_placeholders(sql: str) -> tuple[str, int]:
    """``?`` → ``$1, $2, ...`` outside string literals, quoted identifiers, dollar-quoted strings
    and comments; ``??`` is a literal ``?`` (PgJDBC's escape for PostgreSQL's ``?`` operators).
    Returns the SQL and the number of placeholders. Raises ValueError on an unterminated literal."""
    out: list[str] = []
    count = 0
    i, n = 0, len(sql)
    while i < n:
        c = sql[i]
        if c == "?":
            if sql.startswith("??", i):
                out.append("?")
                i += 2
                continue
            count += 1
            out.append(f"${count}")
            i += 1
        elif c == "'" or c == '"':
            escapes = c == "'" and i > 0 and sql[i - 1] in "eE" and (i < 2 or not (sql[i - 2].isalnum() or sql[i - 2] == "_"))
            end = _quoted_end(sql, i, c, escapes)
            out.append(sql[i:end])
            i = end
        elif sql.startswith("--", i):
            end = sql.find("\n", i)
            end = n if end < 0 else end
            out.append(sql[i:end])
            i = end
        elif sql.startswith("/*", i):
            end = _block_comment_end(sql, i)
            out.append(sql[i:end])
            i = end
        elif c == "$" and (i == 0 or not (sql[i - 1].isalnum() or sql[i - 1] == "_")):
            tag = _DOLLAR_TAG.match(sql, i)
            if tag is None:
                out.append(c)
                i += 1
                continue
            close = sql.find(tag.group(0), tag.end())
            if close < 0:
                raise ValueError(f"unterminated dollar-quoted string {tag.group(0)} in SQL {sql!r}")
            end = close + len(tag.group(0))
            out.append(sql[i:end])
            i = end
        else:
            out.append(c)
            i += 1
    return "".join(out), count


def _quoted_end(sql: str, start: int, quote: str, backslash_escapes: bool) -> int:
    i = start + 1
    while i < len(sql):
        c = sql[i]
        if backslash_escapes and c == "\\":
            i += 2
            continue
        if c == quote:
            if sql.startswith(quote * 2, i):
                i += 2  # a doubled quote stands for itself
                continue
            return i + 1
        i += 1
    what = "string literal" if quote == "'" else "quoted identifier"
    raise ValueError(f"unterminated {what} starting at offset {start} in SQL {sql!r}")


def _block_comment_end(sql: str, start: int) -> int:
    depth, i = 0, start
    while i < len(sql):
        if sql.startswith("/*", i):
            depth += 1
            i += 2
        elif sql.startswith("*/", i):
            depth -= 1
            i += 2
            if depth == 0:
                return i
        else:
            i += 1
    raise ValueError(f"unterminated comment starting at offset {start} in SQL {sql!r}")


# -- field types -------------------------------------------------------------------------------

# RowTypeInfo field type → the PostgreSQL parameter type (what JdbcTypeUtil's java.sql.Types and
# the setX call amount to) and the check of the Python value bound to it.
_INT_RANGES = {"BYTE": 8, "SHORT": 16, "INT": 32, "LONG": 64}
_KIND = {
    "BYTE": "int2", "SHORT": "int2", "INT": "int4", "LONG": "int8", "BIG_INT": "numeric",
    "FLOAT": "float4", "DOUBLE": "float8", "BIG_DEC": "numeric", "BOOLEAN": "bool",
    "STRING": "text", "CHAR": "text", "SQL_DATE": "date", "SQL_TIME": "time",
    "SQL_TIMESTAMP": "timestamp", "INSTANT": "timestamptz", "BYTES": "bytea",
}


def _type_name(field_type: Any) -> str:
    name = getattr(field_type, "name", None)
    components: tuple[Any, ...] = tuple(getattr(field_type, "components", ()))
    if name in ("PRIMITIVE_ARRAY", "BASIC_ARRAY") and len(components) == 1 and getattr(components[0], "name", None) == "BYTE":
        return "BYTES"
    return str(name)


def field_kinds(sql: str, field_types: Sequence[Any]) -> tuple[str, ...]:
    """The PostgreSQL parameter type of each field; ValueError naming a type the sink cannot bind."""
    kinds = []
    for index, field_type in enumerate(field_types):
        kind = _KIND.get(_type_name(field_type))
        if kind is None:
            supported = ", ".join(sorted(k for k in _KIND if k != "BYTES")) + ", PRIMITIVE_ARRAY(BYTE)"
            raise ValueError(f"JdbcSink for {sql!r}: field {index} has type {field_type}, which a JDBC statement "
                             f"cannot bind (supported: {supported})")
        kinds.append(kind)
    return tuple(kinds)


def _check_int(bits: int) -> Callable[[Any], Any]:
    low, high = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1

    def check(value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"expected an int, got {type(value).__name__} {value!r}")
        if not low <= value <= high:
            raise TypeError(f"{value} does not fit a {bits}-bit integer")
        return value
    return check


def _check(types: tuple[type, ...], convert: Callable[[Any], Any] | None = None,
           refuse: tuple[type, ...] = ()) -> Callable[[Any], Any]:
    wanted = " or ".join(t.__name__ for t in types)

    def check(value: Any) -> Any:
        if not isinstance(value, types) or isinstance(value, refuse):
            raise TypeError(f"expected {wanted}, got {type(value).__name__} {value!r}")
        return convert(value) if convert else value
    return check


_CHECKS: dict[str, Callable[[Any], Any]] = {
    **{_KIND[name]: _check_int(bits) for name, bits in _INT_RANGES.items() if name != "BYTE"},
    "numeric": _check((int, decimal.Decimal), decimal.Decimal, refuse=(bool,)),
    "float4": _check((int, float), float, refuse=(bool,)),
    "float8": _check((int, float), float, refuse=(bool,)),
    "bool": _check((bool,)),
    "text": _check((str,)),
    "date": _check((datetime.date,), refuse=(datetime.datetime,)),
    "time": _check((datetime.time,)),
    "timestamp": _check((datetime.datetime,)),
    "timestamptz": _check((datetime.datetime,)),
    "bytea": _check((bytes, bytearray, memoryview), bytes),
}


def bind_record(record: Any, kinds: Sequence[str]) -> tuple[Any, ...]:
    """A Row, tuple or list → the checked values for the placeholders, positionally (None: NULL).
    Raises TypeError naming the field and the problem."""
    values = record._values if hasattr(record, "_values") and not isinstance(record, (tuple, list)) else record
    if not isinstance(values, (tuple, list)):
        raise TypeError(f"expected a Row or tuple of {len(kinds)} fields, got {type(record).__name__} {record!r}")
    if len(values) != len(kinds):
        raise TypeError(f"expected {len(kinds)} fields, got {len(values)} in {record!r}")
    out: list[Any] = []
    for index, (value, kind) in enumerate(zip(values, kinds)):
        if value is None:
            out.append(None)
            continue
        try:
            out.append(_CHECKS[kind](value))
        except TypeError as e:
            raise TypeError(f"field {index} ({kind}) of {record!r}: {e}") from None
    return tuple(out)


# -- batching and retries ----------------------------------------------------------------------


@dataclass(frozen=True)
class BatchPolicy:
    """When Flink's JdbcOutputFormat executes its batch: when ``size`` records are buffered
    (``size`` <= 0: never on size), every ``interval_ms`` of processing time while records are
    buffered (0: never; a size of 1 needs no timer), and at checkpoints and the end of input."""

    size: int
    interval_ms: int

    @property
    def timed(self) -> bool:
        return self.interval_ms > 0 and self.size != 1

    def full(self, buffered: int) -> bool:
        return self.size > 0 and buffered >= self.size

    def next_due_ms(self, buffered: int, last_execute_ms: int) -> int | None:
        """When the timer executes the batch next (None: nothing buffered, or no timer)."""
        if not self.timed or buffered == 0:
            return None
        return last_execute_ms + self.interval_ms


def retry_delay_s(attempt: int) -> float:
    """Flink's wait before retry ``attempt`` (1-based) of a failed batch: 0 s, 1 s, 2 s, ..."""
    return float(attempt - 1)


# SQLSTATE classes and codes worth another try: the connection broke, the server is going away or
# busy, or the transaction lost a race (serialization failure, deadlock). Anything else (a syntax
# error, a constraint violation, bad data) fails the same way again.
_TRANSIENT_CLASSES = ("08", "53", "57P")
_TRANSIENT_CODES = ("40001", "40P01", "55P03")


def is_transient(sqlstate: str | None, connection_broken: bool) -> bool:
    if connection_broken:
        return True
    if not sqlstate:
        return False
    return sqlstate.startswith(_TRANSIENT_CLASSES) or sqlstate in _TRANSIENT_CODES


# -- the exactly-once sink's prepared transactions ----------------------------------------------------

# millstream-<job and operator>-<subtask>-<writer>-<checkpoint>: a restored writer recognizes the
# prepared transactions of a subtask by the first two, and its own by the third.
GID_PATTERN = re.compile(r"millstream-([0-9a-f]{16})-(\d+)-([0-9a-f]{16})-(\d+)")


def make_gid(family: str, subtask: int, writer: str, checkpoint_id: int) -> str:
    """The global id of checkpoint ``checkpoint_id``'s transaction (``family``: 16 hex digits of the
    job and operator; ``writer``: 16 hex digits of this writer instance)."""
    gid = f"millstream-{family}-{subtask}-{writer}-{checkpoint_id}"
    if GID_PATTERN.fullmatch(gid) is None:
        raise ValueError(f"not a gid this sink makes: {gid!r}")
    return gid


def gids_to_roll_back(prepared: Sequence[str], owned: set[tuple[str, int]], writer: str) -> list[str]:
    """Of the server's prepared transactions, those a writer must roll back: made by this sink for a
    subtask it owns (``(family, subtask)``: its own, and those whose restored state it was handed),
    by another writer (a failed or stale attempt). Called after the restored ones were committed, so
    none of these is in a completed checkpoint. Other jobs', operators', subtasks' and strangers'
    transactions are left alone."""
    out = []
    for gid in prepared:
        match = GID_PATTERN.fullmatch(gid)
        if match is None or match.group(3) == writer:
            continue
        if (match.group(1), int(match.group(2))) in owned:
            out.append(gid)
    return out
