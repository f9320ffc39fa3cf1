"""Worker role, the producer: slots (threads), each long-polling for and running one attempt."""

from __future__ import annotations

import logging
from typing import Any, Dict, List, Optional

from .._http import Abort, Backoff, RequestAborted, format_seconds
from ..errors import OrbitConnectionError, is_retryable, is_unknown_session
from ..task import fail_outcome
from .common import _Inflight, _snippet, _Stopped, _WorkerBase


class _SlotsRole(_WorkerBase):
    """The slots' loops: take an attempt (from the backlog, else by a long poll on the slot's
    own connection), run it, report it asking for the next one (eager dispatch), and so on."""

    def _slot_loop(self, slot: int) -> None:
        """One slot: takes an attempt (from the backlog, else by a long poll of its own), runs
        it and the attempts its reports hand out, then polls again; ends when stopping."""
        backoff = self._new_backoff()
        try:
            while True:
                with self._lock:
                    task = self._backlog.popleft() if self._backlog else None
                if task is None:
                    if self._stopping.is_set():
                        return
                    task = self._poll(slot, backoff)
                    if task is None:
                        continue
                try:
                    self._run_chain(task, slot)
                except Exception:  # a bug here must not kill the slot
                    self.logger.exception("internal error running %s", task.get("token"))
        finally:
            with self._lock:
                self._slots_alive -= 1
                self._lock.notify_all()

    def _poll(self, slot: int, backoff: Backoff) -> Optional[Dict[str, Any]]:
        """One long poll for one attempt on this slot's connection. Answers the attempt it
        took (counted in ``_running``), or None: nothing handed out, a failure (after its
        backoff sleep), stopping."""
        wakes = self._wakes
        try:
            session = self._ensure_session()
        except _Stopped:
            return None
        except Exception as err:  # defensive: never let a slot die
            self.logger.error("register failed: %s", self._describe(err))
            self._pause(backoff.next(), wakes)
            return None
        abort = Abort()
        transport = self._slot_transport(slot)
        with self._lock:
            if self._stopping.is_set():
                return None
            self._polls[slot] = (session, abort)
        try:
            res = transport.post(
                "/v1/workers/poll",
                {"session_id": session, "max_tasks": 1, "wait_s": self.poll_wait_s},
                timeout=self.poll_wait_s + 15,
                abort=abort,
            )
        except RequestAborted:
            return None  # stopping, the session was found unknown elsewhere, or the node left
        except Exception as err:
            if is_unknown_session(err):
                self._forget_session(session, "poll")
                return None
            if self._stopping.is_set():
                return None
            if isinstance(err, OrbitConnectionError) and self._node_unreachable_now(slot, str(err)):
                return None  # the node's address does not answer: the configured one, at once
            delay = backoff.next()
            level = logging.WARNING if is_retryable(err) else logging.ERROR
            self.logger.log(
                level, "poll failed: %s; retrying in %s", self._describe(err), format_seconds(delay)
            )
            self._pause(delay, wakes)
            return None
        finally:
            with self._lock:
                self._polls.pop(slot, None)
        tasks = res.get("tasks") if isinstance(res, dict) else None
        if not isinstance(tasks, list):
            delay = backoff.next()
            self.logger.error(
                "poll answered %s, not {\"tasks\": [...]}; retrying in %s",
                _snippet(res),
                format_seconds(delay),
            )
            self._pause(delay, wakes)
            return None
        backoff.reset()
        if len(tasks) > 1:
            self.logger.warning("poll answered %d tasks for max_tasks=%d", len(tasks), 1)
        with self._lock:
            return self._take(tasks)

    def _take(self, tasks: List[Any]) -> Optional[Dict[str, Any]]:
        """Takes the attempts of a poll's or a report's answer (``_lock`` held): answers the
        first for the calling slot to run; more than one (more than asked for) go to the
        backlog. An attempt handed out again while it runs here is ignored."""
        first: Optional[Dict[str, Any]] = None
        for task in tasks:
            if not isinstance(task, dict) or not isinstance(task.get("token"), str) or not task["token"]:
                self.logger.error(
                    "the runtime handed out a task without a token; ignoring it: %s", _snippet(task)
                )
                continue
            if task["token"] in self._inflight:
                self.logger.debug("task %s handed out again while it runs here; ignoring", task["token"])
                continue
            self._inflight[task["token"]] = _Inflight(task=task)
            self._running += 1
            if first is None:
                first = task
            else:
                self._backlog.append(task)
        return first

    def _run_chain(self, task: Dict[str, Any], slot: int) -> None:
        """Runs an attempt and reports it on this slot's connection (to the node that handed it
        out); when the report hands out the next attempt, runs that one in the same slot."""
        current: Optional[Dict[str, Any]] = task
        try:
            while current is not None:
                token = current["token"]
                try:
                    outcome = self._execute(current)
                except Exception as err:  # a bug of the SDK, not of the task: still one result
                    self.logger.exception("internal error running %s", token)
                    outcome = fail_outcome("WORKER_ERROR", f"{type(err).__name__}: {err}", True, {})
                with self._lock:
                    entry = self._inflight.get(token)
                    if entry is not None:
                        entry.handler_done = True
                take = not self._stopping.is_set()
                cut = Abort()
                with self._lock:
                    target = self._slot_targets.get(slot)
                    via = self._node_transports.get(target) if target else None
                    self._deliveries[slot] = cut
                try:
                    following = self._deliver(current, outcome, take, via, cut)
                finally:
                    with self._lock:
                        self._deliveries.pop(slot, None)
                with self._lock:
                    self._inflight.pop(token, None)
                    self._running -= 1
                    current = None
                    current = self._take(following)
                    self._lock.notify_all()
        finally:
            if current is not None:  # left by an error: no result will come from here
                with self._lock:
                    self._inflight.pop(current["token"], None)
                    self._running -= 1
                    self._lock.notify_all()
