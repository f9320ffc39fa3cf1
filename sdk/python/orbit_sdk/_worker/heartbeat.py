"""Worker role, heartbeats: keep the session and its attempts' leases alive, apply cancellations."""

from __future__ import annotations

import logging
import time
from typing import Optional

from .._http import format_seconds
from ..errors import OrbitError, is_retryable, is_unknown_session
from .common import _Stopped, _WorkerBase


class _HeartbeatRole(_WorkerBase):
    """The heartbeater thread: heartbeats the session with the running attempts' tokens (which
    extends their leases), cancels the attempts the answer names or whose deadline passed, and
    registers again when the session is gone while attempts run."""

    def _heartbeat_loop(self) -> None:
        backoff = self._new_backoff()
        delay = self.heartbeat_s
        while not self._hb_stop.wait(delay):
            delay = self.heartbeat_s
            err = self._heartbeat_tick()
            if err is not None:
                delay = backoff.next()
                level = logging.WARNING if is_retryable(err) else logging.ERROR
                self.logger.log(
                    level,
                    "heartbeat failed: %s; retrying in %s",
                    self._describe(err),
                    format_seconds(delay),
                )
            else:
                backoff.reset()

    def _heartbeat_tick(self) -> Optional[BaseException]:
        """A heartbeat of the loop. When the session is gone (UNKNOWN_SESSION: the runtime
        restarted or expired it) and attempts run here, registers again first: the slots only
        register when they poll, and a busy slot does not poll, so without this nothing would
        keep the running attempts (the runtime adopts the tokens a new session lists)."""
        for _ in range(2):  # once more right after a 404 of this heartbeat
            if self._session is None and not self._register_for_inflight():
                return None
            err = self._heartbeat_once()
            if err is not None or self._session is not None:
                return err
        return None

    def _register_for_inflight(self) -> bool:
        """Registers again (single flight with the slots) when attempts run here and the
        worker is not stopping; answers whether there is a session now."""
        with self._lock:
            if not self._inflight or self._stopping.is_set():
                return False
        try:
            self._ensure_session()
        except _Stopped:
            return False
        except Exception as err:  # defensive: never let the heartbeat thread die
            self.logger.error("register failed: %s", self._describe(err))
            return False
        return self._session is not None

    def _heartbeat_once(self) -> Optional[BaseException]:
        """One heartbeat of the session with every running attempt; applies the cancellations
        it answers and the deadlines that passed. Answers the error of a failed one."""
        with self._hb_lock:
            now_ms = time.time() * 1000
            with self._lock:
                session = self._session
                tokens = list(self._inflight)
                for held in self._inflight.values():
                    ctx = held.ctx
                    if ctx is not None and ctx.deadline_ms is not None and ctx.deadline_ms <= now_ms:
                        if not held.handler_done and not ctx.cancelled.is_set():
                            self.logger.info("deadline passed token=%s step=%s", ctx.token, ctx.step)
                            ctx._cancel("deadline")
            if not session:
                return None  # the heartbeat loop (or a polling slot) registers again
            try:
                res = self._transport.post(
                    "/v1/workers/heartbeat",
                    {"session_id": session, "tokens": tokens},
                    timeout=self.request_timeout_s,
                )
            except OrbitError as err:
                if is_unknown_session(err):
                    self._forget_session(session, "heartbeat")
                    return None
                return err
            cancel = res.get("cancel") if isinstance(res, dict) else None
            for token in cancel if isinstance(cancel, list) else []:
                with self._lock:
                    entry = self._inflight.get(token) if isinstance(token, str) else None
                if entry is None or entry.handler_done:
                    continue
                self.logger.info(
                    "task cancelled by the runtime token=%s step=%s", token, entry.task.get("step")
                )
                with self._lock:
                    if entry.ctx is not None:
                        entry.ctx._cancel("cancel")
                    elif entry.cancel_reason is None:
                        entry.cancel_reason = "cancel"
            return None
