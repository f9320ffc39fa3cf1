"""Worker role, the session: register (retried), the session id, registering again, unregister."""

from __future__ import annotations

import logging
import time
from typing import Any, Dict

from .._http import format_seconds
from ..errors import OrbitApiError, OrbitError, is_retryable, is_unknown_session
from .common import _Stopped, _WorkerBase


class _SessionRole(_WorkerBase):
    """The worker's one session, shared by its slots and its heartbeater: registered on demand
    (one registration at a time), forgotten after UNKNOWN_SESSION, unregistered at the end."""

    def _register_body(self) -> Dict[str, Any]:
        tasks = []
        for t in self._tasks.values():
            item: Dict[str, Any] = {"name": t.name, "contract": t.contract}
            if t.language:
                item["language"] = t.language
            tasks.append(item)
        return {
            "worker_id": self.worker_id,
            "runtime": self.runtime,
            "tasks": tasks,
            "concurrency": self.concurrency,
        }

    def _ensure_session(self) -> str:
        """The current session, registering (with retries) when there is none. Registrations
        never overlap: one caller registers, and the others (slots that saw the same
        UNKNOWN_SESSION) wait for it and take its session."""
        session = self._session
        if session:
            return session
        with self._register_lock:
            session = self._session
            if session:
                return session
            return self._register()

    def _register(self) -> str:
        backoff = self._new_backoff()
        body = self._register_body()
        while True:
            if self._stopping.is_set():
                raise _Stopped()
            wakes = self._wakes
            try:
                res = self._transport.post(
                    "/v1/workers/register", body, timeout=self.request_timeout_s
                )
                session = res.get("session_id") if isinstance(res, dict) else None
                if not isinstance(session, str) or not session:
                    raise OrbitApiError(
                        200, "INVALID_RESPONSE", "register answered without a session_id", body=res
                    )
                break
            except OrbitError as err:
                retryable = is_retryable(err)
                # Before the first success a refusal (401, 403, 422) is the caller's to see.
                if not retryable and not self._registered_once:
                    raise
                delay = backoff.next()
                level = logging.WARNING if retryable else logging.ERROR
                self.logger.log(
                    level,
                    "register failed: %s; retrying in %s",
                    self._describe(err),
                    format_seconds(delay),
                )
                self._pause(delay, wakes)
                if self._stopping.is_set():
                    raise _Stopped()
        self._session = session
        self._registered_once = True
        self.logger.info(
            "worker registered worker_id=%s runtime=%s tasks=%d session_id=%s",
            self.worker_id,
            self.runtime,
            len(self._tasks),
            session,
        )
        return session

    def _forget_session(self, session: str, op: str) -> None:
        """Drops ``session`` after 404 UNKNOWN_SESSION (once: a slot that sees it after another
        already dropped it, or after a new registration, does nothing). Cuts the backoff sleeps
        and the long polls of that session short so that a slot registers at once."""
        with self._lock:
            if self._session != session:
                return
            self._session = None
            self._wakes += 1
            self._lock.notify_all()
            polls = [abort for s, abort in self._polls.values() if s == session]
        self.logger.warning(
            "%s: the runtime does not know session %s (UNKNOWN_SESSION); registering again",
            op,
            session,
        )
        for abort in polls:
            abort.abort()

    def _unregister(self) -> None:
        session = self._session
        if not session:
            return
        backoff = self._new_backoff()
        for attempt in range(1, 5):
            try:
                self._transport.post(
                    "/v1/workers/unregister", {"session_id": session}, timeout=self.request_timeout_s
                )
                self._session = None
                return
            except OrbitError as err:
                if is_unknown_session(err):
                    return
                if is_retryable(err) and attempt < 4:
                    delay = backoff.next()
                    self.logger.warning(
                        "unregister failed: %s; retrying in %s",
                        self._describe(err),
                        format_seconds(delay),
                    )
                    time.sleep(delay)
                    continue
                self.logger.warning("unregister failed: %s; giving up", self._describe(err))
                return
