"""``CompletableFuture``: the answer of a :class:`JobClient` call, PyFlink's
``pyflink.common.CompletableFuture``."""
from __future__ import annotations

import concurrent.futures
import threading
from typing import Any, Callable


class CompletableFuture(concurrent.futures.Future):
    """A future completed by whoever holds it (``set_result`` / ``set_exception``) or cancelled.

    As Java's CompletableFuture (and so PyFlink's): ``cancel()`` succeeds on any future that is not
    done yet, even while its work is under way; that work's late answer is then dropped. The first
    of ``set_result``, ``set_exception`` and ``cancel`` wins; the others return False. (The
    future never enters concurrent.futures' RUNNING state, which is what keeps ``cancel()`` open.)
    """

    def set_result(self, result: Any) -> bool:  # type: ignore[override]
        try:
            super().set_result(result)
            return True
        except concurrent.futures.InvalidStateError:
            return False

    def set_exception(self, exception: BaseException | None) -> bool:  # type: ignore[override]
        try:
            super().set_exception(exception)
            return True
        except concurrent.futures.InvalidStateError:
            return False

    @staticmethod
    def _supply_async(work: Callable[[], Any], name: str) -> "CompletableFuture":
        """A future completed by ``work()`` run on a daemon thread (a call must not keep the
        program alive at its exit, as a pool's worker thread would)."""
        future = CompletableFuture()

        def run() -> None:
            try:
                value = work()
            except BaseException as exc:  # handed to the future's holder, who decides
                future.set_exception(exc)
            else:
                future.set_result(value)

        threading.Thread(target=run, name=name, daemon=True).start()
        return future

    def __str__(self) -> str:
        if not self.done():
            return "CompletableFuture[Incomplete]"
        if self.cancelled():
            return "CompletableFuture[Cancelled]"
        error = self.exception()
        return f"CompletableFuture[Completed exceptionally: {error!r}]" if error else "CompletableFuture[Completed normally]"
