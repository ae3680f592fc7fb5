"""Flink's JdbcSink on PostgreSQL (psycopg 3): one subtask's writer.

At-least-once (``JdbcSink.sink``): records are bound and buffered; the buffer is executed as one
batch (``executemany`` in one transaction, committed) when ``batch_size`` records are buffered,
every ``batch_interval_ms`` of processing time, at every checkpoint barrier (the snapshot returns
only once the batch is committed, so a completed checkpoint never misses a record before it) and
at the end of input. A batch that fails on a transient error (the connection broke, the server is
restarting, a serialization failure or deadlock) is retried up to ``max_retries`` times after
Flink's waits (0 s, 1 s, 2 s, ...), reconnecting when the connection is gone; any other error, or
the last retry's, fails the task naming the statement and PostgreSQL's message. Replays after a
failover write records again: an idempotent statement (``INSERT ... ON CONFLICT DO UPDATE``) makes
them harmless.

Exactly-once (``JdbcSink.exactly_once_sink``): PostgreSQL's two-phase commit in place of XA. The
records between two barriers go into one transaction of the writer connection; at barrier ``n``
it is ``PREPARE TRANSACTION``-ed under a global id recorded in the snapshot, and when checkpoint
``n`` completes a second connection runs ``COMMIT PREPARED``. A restored writer first commits the
prepared transactions its state names (one already committed is fine), then rolls back every
other prepared transaction of this job, operator and subtask (``pg_prepared_xacts``): those hold
records the sources replay. The same sweep runs after each commit, for transactions a stale
attempt of this subtask prepared after the restore's sweep.
"""
from __future__ import annotations

import hashlib
import logging
import time
import uuid
from typing import Any, Callable

from millstream.runtime import jdbc_postgres as pg
from millstream.runtime import operator_factories
from millstream.runtime.operators.base import OperatorContext, StreamOperator

__all__ = ["JdbcSinkOperator"]

log = logging.getLogger(__name__)

_STATE_VERSION = 1
_UNDEFINED_OBJECT = "42704"  # COMMIT/ROLLBACK PREPARED of a gid that is not (any more) prepared


class DatabaseError(RuntimeError):
    """A driver error in one line (a task's failure message is its traceback's last line), with
    the driver's class name (``UndefinedTable``, ``OperationalError``...) in front."""

    @classmethod
    def of(cls, e: BaseException) -> "DatabaseError":
        lines = [line.strip() for line in str(e).splitlines()]
        text = "; ".join(line for line in lines if line and set(line) != {"^"})
        return cls(f"{type(e).__name__}: {text}")


class JdbcSinkOperator(StreamOperator):
    """One subtask of the JDBC sink. Its checkpoint state, exactly-once only (plain builtins)::

        {"version": 1, "family": str, "subtask": int, "writer": str, "pending": {checkpoint_id: gid}}

    ``pending``: the prepared transactions of checkpoints not yet known complete at the snapshot.
    """

    def __init__(self, factory: operator_factories.JdbcSinkFactory, ctx: OperatorContext) -> None:
        super().__init__(factory, ctx)
        self.f = factory
        self._target = pg.parse_url(factory.url)
        self._sql, _ = pg.translate_placeholders(factory.sql)
        self._kinds = pg.field_kinds(factory.sql, factory.field_types)
        self._policy = pg.BatchPolicy(factory.batch_size, factory.batch_interval_ms)
        # Always: the timer executes the batch on the interval, and raises a snapshot's failure
        # (see snapshot_state) even when no record comes.
        self.uses_processing_time = True
        self._buffer: list[tuple[Any, ...]] = []
        self._last_execute_ms = 0
        self._deferred: BaseException | None = None  # a snapshot's failure, raised on the next record
        self._conn: Any = None
        self._committer: Any = None
        self._wrap: list[Callable[[Any], Any] | None] = []
        # exactly-once
        self._subtask = ctx.env.subtask_index
        self._family = hashlib.sha256(f"{getattr(ctx.env, 'job_id', '')}/{ctx.operator_id}".encode()).hexdigest()[:16]
        self._writer = uuid.uuid4().hex[:16]
        self._in_transaction = False
        self._pending: dict[int, str] = {}
        self._restored: dict[int, str] = {}
        self._owned: set[tuple[str, int]] = {(self._family, self._subtask)}

    # -- connections -------------------------------------------------------------------------------

    def _describe(self) -> str:
        return f"PostgreSQL at {self._target.address}"

    def _connect(self) -> Any:
        import psycopg  # lazy: the driver loads only in tasks that write to a database
        from psycopg.conninfo import make_conninfo

        try:
            conninfo = make_conninfo(**self._target.conninfo(self.f.user_name, self.f.password))
            return psycopg.connect(conninfo, autocommit=True, cursor_factory=psycopg.RawCursor)
        except psycopg.Error as e:
            raise ConnectionError(f"cannot connect to {self._describe()} ({self.f.url}): {DatabaseError.of(e)}") from e

    def open(self) -> None:
        import psycopg
        from psycopg.types import numeric

        wrappers = {"int2": numeric.Int2, "int4": numeric.Int4, "int8": numeric.Int8,
                    "float4": numeric.Float4, "float8": numeric.Float8}
        self._wrap = [wrappers.get(kind) for kind in self._kinds]
        try:
            if self.f.exactly_once and not self.ctx.env.checkpointing_enabled:
                raise ValueError("JdbcSink.exactly_once_sink commits on completed checkpoints: enable "
                                 "checkpointing (env.enable_checkpointing(interval))")
            self._conn = self._connect()
            if self.f.exactly_once:
                self._open_exactly_once()
        except Exception as e:
            self.fail(DatabaseError.of(e) if isinstance(e, psycopg.Error) else e, "opening its connection")
        self._last_execute_ms = self.ctx.env.now_ms()
        super().open()

    def _open_exactly_once(self) -> None:
        row = self._conn.execute("SHOW max_prepared_transactions").fetchone()
        if int(row[0]) <= 0:
            raise RuntimeError(
                f"{self._describe()} has max_prepared_transactions = {row[0]}: JdbcSink.exactly_once_sink needs "
                "prepared transactions (set max_prepared_transactions > 0 in postgresql.conf and restart the server)")
        if self.f.timeout_sec is not None:
            if self._conn.info.server_version < 170000:
                raise RuntimeError(f"{self._describe()} (version {self._conn.info.server_version}) has no transaction "
                                   "timeout (transaction_timeout needs PostgreSQL 17): leave the timeout unset")
            self._conn.execute(f"SET transaction_timeout = {int(self.f.timeout_sec) * 1000}")  # ms; an int, no quoting
        self._committer = self._connect()
        for checkpoint_id in sorted(self._restored):
            self._finish(self._restored[checkpoint_id], commit=True)
        self._restored = {}
        self._sweep()

    def _reconnect(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:  # closing a broken connection: nothing more to lose
                log.debug("closing a broken connection failed", exc_info=True)
        self._conn = None
        self._conn = self._connect()

    # -- records -----------------------------------------------------------------------------------

    def _raise_deferred(self) -> None:
        if self._deferred is not None:
            failure, self._deferred = self._deferred, None
            raise failure

    def process_batch(self, records: list[Any]) -> None:
        self._raise_deferred()
        kinds, wrap = self._kinds, self._wrap
        try:
            for record in records:
                values = pg.bind_record(record, kinds)
                self._buffer.append(tuple(v if w is None or v is None else w(v) for v, w in zip(values, wrap)))
        except TypeError as e:
            self.fail(e, f"binding a record to {self.f.sql!r}")
        size = self._policy.size
        while self._policy.full(len(self._buffer)):
            batch, self._buffer = self._buffer[:size], self._buffer[size:]
            self._execute(batch)

    def on_processing_time(self, now_ms: int) -> None:
        self._raise_deferred()
        due = self._policy.next_due_ms(len(self._buffer), self._last_execute_ms)
        if due is not None and now_ms >= due:
            self._execute_buffer()

    def next_timer_ms(self) -> int | None:
        if self._deferred is not None:
            return self._last_execute_ms
        return self._policy.next_due_ms(len(self._buffer), self._last_execute_ms)

    def end_input(self) -> None:
        self._raise_deferred()
        self._execute_buffer()
        super().end_input()

    def _execute_buffer(self) -> None:
        batch, self._buffer = self._buffer, []
        if batch:
            self._execute(batch)
        self._last_execute_ms = self.ctx.env.now_ms()

    def _execute(self, batch: list[tuple[Any, ...]]) -> None:
        self._last_execute_ms = self.ctx.env.now_ms()
        if self.f.exactly_once:
            self._execute_in_transaction(batch)
        else:
            self._execute_with_retries(batch)

    def _what(self, batch: list[Any]) -> str:
        return f"executing a batch of {len(batch)} records with {self.f.sql!r} on {self._describe()}"

    def _execute_with_retries(self, batch: list[tuple[Any, ...]]) -> None:
        import psycopg

        attempt = 0
        while True:
            try:
                if self._conn is None or self._conn.closed:
                    self._reconnect()
                with self._conn.transaction():
                    self._conn.cursor().executemany(self._sql, batch)
                return
            except (psycopg.Error, ConnectionError) as e:
                broken = isinstance(e, ConnectionError) or self._conn is None or self._conn.closed or self._conn.broken
                transient = pg.is_transient(getattr(e, "sqlstate", None), broken)
                if not transient or attempt >= self.f.max_retries:
                    tries = f" (after {attempt} retries)" if attempt else ""
                    self.fail(DatabaseError.of(e) if isinstance(e, psycopg.Error) else e, self._what(batch) + tries)
                attempt += 1
                log.warning("%s failed (%s); retry %d of %d", self._what(batch), e, attempt, self.f.max_retries)
                if broken and self._conn is not None:
                    self._conn.close()
                time.sleep(pg.retry_delay_s(attempt))

    def _execute_in_transaction(self, batch: list[tuple[Any, ...]]) -> None:
        try:
            if not self._in_transaction:
                self._conn.execute("BEGIN")
                self._in_transaction = True
            self._conn.cursor().executemany(self._sql, batch)
        except Exception as e:  # no retries: a retried batch of an open transaction could duplicate (FLINK-22311)
            self.fail(DatabaseError.of(e), self._what(batch) + " in the checkpoint's transaction")

    # -- checkpoints -------------------------------------------------------------------------------

    def snapshot_state(self, checkpoint_id: int) -> Any:
        """Executes (and, at-least-once, commits) the buffer before the barrier's snapshot is taken;
        exactly-once, prepares the checkpoint's transaction and records its global id."""
        try:
            self._execute_buffer()
            if not self.f.exactly_once:
                return None
            if self._in_transaction:
                gid = pg.make_gid(self._family, self._subtask, self._writer, checkpoint_id)
                try:
                    self._conn.execute(f"PREPARE TRANSACTION '{gid}'")
                except Exception as e:
                    self.fail(DatabaseError.of(e), f"preparing transaction {gid!r} for checkpoint {checkpoint_id} on {self._describe()}")
                self._in_transaction = False
                self._pending[checkpoint_id] = gid
        except BaseException as e:
            self._deferred = e  # the checkpoint is declined; the task fails on its next step
            raise
        return {"version": _STATE_VERSION, "family": self._family, "subtask": self._subtask,
                "writer": self._writer, "pending": dict(self._pending)}

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """Commits the prepared transactions of checkpoints <= ``checkpoint_id`` in order."""
        if not self.f.exactly_once:
            return
        for cid in sorted(c for c in self._pending if c <= checkpoint_id):
            self._finish(self._pending.pop(cid), commit=True)
        self._sweep()

    def has_uncommitted_output(self) -> bool:
        return self.f.exactly_once and bool(self._buffer or self._in_transaction or self._pending)

    def initialize_state(self, state: Any) -> None:
        """Keeps the restored state's prepared transactions for ``open()`` to commit, and the
        subtask whose leftovers this writer now owns (several states after a rescale)."""
        if not self.f.exactly_once:
            return
        ok = (isinstance(state, dict) and state.get("version") == _STATE_VERSION
              and isinstance(state.get("family"), str) and isinstance(state.get("subtask"), int)
              and isinstance(state.get("pending"), dict))
        if not ok:
            self.fail(ValueError(f"unreadable JdbcSink state: expected a dict with version {_STATE_VERSION}, "
                                 f"family, subtask and pending, got {state!r}"), "restoring its state")
        self._restored.update(state["pending"])
        self._owned.add((state["family"], state["subtask"]))

    def _finish(self, gid: str, commit: bool) -> None:
        """``COMMIT PREPARED`` (or ``ROLLBACK PREPARED``) ``gid`` on the committer connection, up
        to ``max_commit_attempts`` times on transient errors; a gid no longer prepared was
        finished before (by an earlier notification or restore)."""
        import psycopg

        verb = "COMMIT PREPARED" if commit else "ROLLBACK PREPARED"
        attempts = max(1, self.f.max_commit_attempts) if commit else 1
        for attempt in range(1, attempts + 1):
            try:
                if self._committer is None or self._committer.closed:
                    self._committer = self._connect()
                self._committer.execute(f"{verb} '{gid}'")
                return
            except psycopg.Error as e:
                if getattr(e, "sqlstate", None) == _UNDEFINED_OBJECT:
                    return
                broken = self._committer.closed or self._committer.broken
                if attempt < attempts and pg.is_transient(getattr(e, "sqlstate", None), broken):
                    log.warning("%s '%s' failed (%s); attempt %d of %d", verb, gid, e, attempt + 1, attempts)
                    if broken:
                        self._committer.close()
                    time.sleep(pg.retry_delay_s(attempt))
                    continue
                if commit and self.f.allow_out_of_order_commits:
                    log.error("%s '%s' on %s failed, going on (allow_out_of_order_commits): %s",
                              verb, gid, self._describe(), e)
                    return
                self.fail(DatabaseError.of(e), f"{verb} '{gid}' on {self._describe()}")
            except ConnectionError as e:
                if attempt < attempts:
                    time.sleep(pg.retry_delay_s(attempt))
                    continue
                self.fail(e, f"{verb} '{gid}'")

    def _sweep(self) -> None:
        """Rolls back the prepared transactions of the subtasks this writer owns that no completed
        checkpoint holds: another writer's (a failed or stale attempt), never this writer's own."""
        if not self.f.recovered_and_rollback:
            return
        try:
            rows = self._committer.execute(
                "SELECT gid FROM pg_prepared_xacts WHERE database = current_database() AND gid LIKE 'millstream-%'"
            ).fetchall()
        except Exception as e:
            self.fail(DatabaseError.of(e), f"listing prepared transactions (pg_prepared_xacts) on {self._describe()}")
        for gid in pg.gids_to_roll_back([gid for (gid,) in rows], self._owned, self._writer):
            log.info("rolling back prepared transaction %s of a failed attempt", gid)
            self._finish(gid, commit=False)

    def close(self) -> None:
        """Closes the connections; an open transaction is rolled back by the server, prepared ones
        stay for the next attempt's restore."""
        for conn in (self._conn, self._committer):
            if conn is not None:
                try:
                    conn.close()
                except Exception:  # closing: nothing more to lose
                    log.debug("closing a JDBC sink connection failed", exc_info=True)
        self._conn = self._committer = None
        super().close()
