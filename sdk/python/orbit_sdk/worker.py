"""The ORBIT worker (SPEC §4): registers the tasks it serves, runs attempts in at most
``concurrency`` slots (threads), heartbeats, reports each result, and survives server restarts
and failovers.

Threads: ``concurrency`` slots and one heartbeater (keeps the session alive, surfaces
cancellations and passed deadlines to the tasks). Each slot runs its own loop on its own
keep-alive connection: long-poll for one attempt (``max_tasks: 1``), run it, report its result
asking for the next attempt in the same request (eager dispatch), run that one if the answer
carries it, otherwise poll again. So ``concurrency`` long polls are held at once when the worker
is idle, and an attempt is reported on the connection it was polled on: behind a load balancer
that spreads connections over the servers of a cluster, the result reaches the server that
handed the attempt out (the owner of its execution), and the next step of that execution
follows on the same connection, with no forwarding between servers. All slots share one
session; the first slot that needs one registers (and registers again after 404
UNKNOWN_SESSION) while the others wait for it. Connection errors and every 5xx (503
NOT_LEADER included) are retried with exponential backoff and jitter, and logged::

    WARNING orbit poll failed: cannot reach ORBIT runtime at http://…: Remote end closed connection without response; retrying in 0.2s

Example::

    worker = Worker("http://127.0.0.1:7233", "orders-python", concurrency=8)

    @worker.task("payments.charge", contract="1")
    def charge(order: ChargeInput, ctx: TaskContext) -> ChargeOutput:
        return ChargeOutput(charge_id=f"ch-{ctx.idempotency_key}", amount=order.amount)

    worker.run()   # until SIGTERM/SIGINT: stop polling, finish running tasks, report them
"""

from __future__ import annotations

import json
import logging
import os
import signal
import ssl
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Deque, Dict, List, Optional, Tuple

from ._http import Abort, Backoff, RequestAborted, Transport, format_seconds
from .contracts import from_json
from .errors import (
    OrbitApiError,
    OrbitConnectionError,
    OrbitError,
    OrbitValidationError,
    is_retryable,
    is_unknown_session,
)
from .task import Outcome, TaskContext, TaskDefinition, define_task, fail_outcome, run_attempt

__all__ = ["Worker", "TaskContext", "TaskDefinition"]  # the last two live in task.py

_log = logging.getLogger("orbit")


@dataclass
class _Inflight:
    task: Dict[str, Any]
    ctx: Optional[TaskContext] = None
    handler_done: bool = False
    # A cancellation that arrived before a thread took the attempt up.
    cancel_reason: Optional[str] = None


class _Stopped(Exception):
    pass


class Worker:
    """Serves tasks to an ORBIT runtime. See the module documentation.

    :param server: base URL of the runtime, or of the load balancer in front of a cluster
    :param worker_id: this worker's identity (``worker_id`` of registration and workers file)
    :param token: bearer token (a worker's own token when the server has a workers file)
    :param concurrency: attempts run at once: slots (threads), each polling and reporting on
        its own connection
    :param runtime: reported at registration; tasks pinned ``language: python`` go to it
    :param poll_wait_s: long-poll wait, at most 60
    :param heartbeat_s: interval between heartbeats
    :param request_timeout_s: timeout of every request but the long poll
    :param ca_file: PEM file of the CA (or self-signed certificate) to trust for https
    """

    def __init__(
        self,
        server: str,
        worker_id: str,
        *,
        token: Optional[str] = None,
        concurrency: int = 8,
        runtime: str = "python",
        poll_wait_s: float = 30.0,
        heartbeat_s: float = 2.0,
        request_timeout_s: float = 30.0,
        ca_file: Optional[str] = None,
        ssl_context: Optional[ssl.SSLContext] = None,
        backoff: Optional[Callable[[], Backoff]] = None,
        logger: Optional[logging.Logger] = None,
    ) -> None:
        if not worker_id:
            raise ValueError("Worker: `worker_id` is required")
        self.worker_id = worker_id
        self.runtime = runtime
        self.concurrency = max(1, int(concurrency))
        self.poll_wait_s = min(60.0, max(0.0, float(poll_wait_s)))
        self.heartbeat_s = max(0.01, float(heartbeat_s))
        self.request_timeout_s = request_timeout_s
        self.logger = logger or _log
        self._transport = Transport(server, token=token, ca_file=ca_file, ssl_context=ssl_context)
        self._new_backoff = backoff or Backoff
        self._tasks: Dict[Tuple[str, str], TaskDefinition] = {}

        self._lock = threading.Condition()
        # Held by the one slot (or start()) that registers; the others wait for its session.
        self._register_lock = threading.Lock()
        self._state = "new"
        self._session: Optional[str] = None
        self._registered_once = False
        # Attempts taken and not yet reported: running, being reported, or in the backlog.
        self._running = 0
        self._inflight: Dict[str, _Inflight] = {}
        # Attempts handed out beyond the one a slot asked for; free slots take them first.
        self._backlog: Deque[Dict[str, Any]] = deque()
        # The long poll each slot has in progress (its session and its Abort), by slot.
        self._polls: Dict[int, Tuple[str, Abort]] = {}
        self._slots_alive = 0
        self._stopping = threading.Event()
        # Bumped to cut every backoff sleep short: stop(), or a heartbeat that found the session
        # unknown (the runtime is back and a slot should register now).
        self._wakes = 0
        self._hb_stop = threading.Event()
        self._abandon = threading.Event()
        self._done = threading.Event()
        self._threads: List[threading.Thread] = []
        self._shutdown_thread: Optional[threading.Thread] = None
        self._hb_lock = threading.Lock()
        self._signals = 0

    # ---- tasks ----------------------------------------------------------------------------

    def task(
        self,
        name: str,
        contract: str = "1",
        *,
        language: Optional[str] = None,
        input: Any = None,
        output: Any = None,
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Decorator: serve ``name`` at ``contract`` with the decorated function.

        The handler is ``fn(input)`` or ``fn(input, ctx: TaskContext)``. Its first parameter's
        annotation (a dataclass, TypedDict, …) is the input contract and its return annotation
        the output contract, unless ``input=`` / ``output=`` name them. An input that does not
        fit fails the attempt with ``INVALID_INPUT`` (not retryable); an output that does not
        fit with ``INVALID_OUTPUT``.
        """

        def register(fn: Callable[..., Any]) -> Callable[..., Any]:
            self.add_task(name, fn, contract=contract, language=language, input=input, output=output)
            return fn

        return register

    def add_task(
        self,
        name: str,
        handler: Callable[..., Any],
        *,
        contract: str = "1",
        language: Optional[str] = None,
        input: Any = None,
        output: Any = None,
    ) -> TaskDefinition:
        """Serve ``name`` at ``contract`` with ``handler`` (see :meth:`task`)."""
        if self._state != "new":
            raise OrbitError("Worker.add_task: tasks are added before the worker starts")
        key = (name, str(contract))
        if key in self._tasks:
            raise ValueError(f"Worker: task {name} contract {contract} is registered twice")
        definition = define_task(
            name, handler, contract=contract, language=language, input=input, output=output
        )
        self._tasks[key] = definition
        return definition

    @property
    def tasks(self) -> List[TaskDefinition]:
        return list(self._tasks.values())

    @property
    def server(self) -> str:
        return self._transport.server

    @property
    def session_id(self) -> Optional[str]:
        return self._session

    @property
    def state(self) -> str:
        """``new``, ``running``, ``stopping`` or ``stopped``."""
        return self._state

    @property
    def running_tokens(self) -> List[str]:
        with self._lock:
            return list(self._inflight)

    # ---- life cycle -----------------------------------------------------------------------

    def start(self) -> None:
        """Registers (retrying connection errors and 5xx until it succeeds) and starts the
        threads. Raises :class:`OrbitApiError` when the runtime refuses the registration (401,
        403 TASK_NOT_ALLOWED, 422 …)."""
        if self._state != "new":
            raise OrbitError(f"Worker.start: the worker is {self._state}")
        if not self._tasks:
            raise OrbitError("Worker.start: no tasks registered (use @worker.task)")
        self._state = "running"
        try:
            self._ensure_session()
        except _Stopped:
            return
        except BaseException:
            self._state = "stopped"
            self._transport.close_all()
            self._done.set()
            raise
        with self._lock:
            if self._stopping.is_set():
                return
            self._slots_alive = self.concurrency
        for i in range(self.concurrency):
            self._spawn(self._slot_loop, f"orbit-task-{i}", i)
        self._spawn(self._heartbeat_loop, "orbit-heartbeat")

    def _spawn(self, target: Callable[..., None], name: str, *args: Any) -> None:
        t = threading.Thread(target=target, name=name, args=args, daemon=True)
        self._threads.append(t)
        t.start()

    def run(self, *, install_signal_handlers: bool = True, grace_s: Optional[float] = 30.0) -> None:
        """Starts the worker (if needed) and blocks until it has stopped.

        With ``install_signal_handlers`` (in the main thread), SIGTERM and SIGINT stop it
        gracefully: polling stops, running tasks get ``grace_s`` seconds to finish and have
        their results reported; a second signal exits the process at once (status 130).
        """
        if install_signal_handlers and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, lambda signum, _frame: self._on_signal(signum, grace_s))
        if self._state == "new":
            self.start()
        while not self._done.wait(0.5):
            pass

    def _on_signal(self, signum: int, grace_s: Optional[float]) -> None:
        self._signals += 1
        name = signal.Signals(signum).name
        if self._signals > 1:
            self.logger.warning("received %s again: exiting now", name)
            os._exit(130)
        self.logger.info(
            "received %s: stopping (finishing %d running task(s); a second signal exits at once)",
            name,
            len(self._inflight),
        )
        self.stop(grace_s=grace_s)

    def stop(self, grace_s: Optional[float] = 30.0) -> None:
        """Begins a graceful stop and returns at once: polling stops, running tasks finish and
        their results are reported (for at most ``grace_s`` seconds; None waits as long as it
        takes), then the heartbeats stop and the session is unregistered. Attempts still
        running after the grace period see ``ctx.cancelled`` set, their results are given up,
        and the runtime redelivers them. :meth:`wait` waits for the end."""
        with self._lock:
            if self._shutdown_thread is not None or self._state in ("stopped", "new"):
                if self._state == "new":
                    self._state = "stopped"
                    self._done.set()
                return
            self._state = "stopping"
            self._stopping.set()
            self._wakes += 1
            self._lock.notify_all()
            polls = [abort for _session, abort in self._polls.values()]
        for abort in polls:  # every slot's long poll ends now
            abort.abort()
        t = threading.Thread(target=self._shutdown, args=(grace_s,), name="orbit-stop", daemon=True)
        self._shutdown_thread = t
        t.start()

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Waits until the worker has stopped; answers whether it has."""
        return self._done.wait(timeout)

    def shutdown(self, grace_s: Optional[float] = 30.0) -> None:
        """:meth:`stop`, then :meth:`wait`."""
        self.stop(grace_s)
        self.wait()

    def __enter__(self) -> "Worker":
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()

    def _shutdown(self, grace_s: Optional[float]) -> None:
        try:
            deadline = None if grace_s is None else time.monotonic() + grace_s
            with self._lock:
                if self._running:
                    self.logger.info("stopping: waiting for %d running task(s)", self._running)
                # The slots end once their attempts are reported (their polls were cut).
                while self._running > 0 or self._slots_alive > 0:
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        break
                    self._lock.wait(left if left is not None else 1.0)
                left_over = self._running
            if left_over:
                self.logger.warning(
                    "stopping: %d task(s) still running after %s; abandoning them (the runtime "
                    "redelivers them)",
                    left_over,
                    format_seconds(grace_s or 0),
                )
                with self._lock:
                    for entry in self._inflight.values():
                        if entry.ctx is not None:
                            entry.ctx._cancel("shutdown")
                self._abandon.set()
                with self._lock:
                    end = time.monotonic() + 0.2
                    while self._running > 0 and time.monotonic() < end:
                        self._lock.wait(0.05)
            self._hb_stop.set()
            self._unregister()
        finally:
            if self._running == 0:
                self._transport.close_all()
            self._state = "stopped"
            self.logger.info("worker stopped worker_id=%s", self.worker_id)
            self._done.set()

    # ---- session --------------------------------------------------------------------------

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

    # ---- slots --------------------------------------------------------------------------

    def _pause(self, seconds: float, wakes: int) -> None:
        """A backoff sleep, cut short by stop() and by a forgotten session (also when that
        happened since ``wakes`` was read, before the sleep began)."""
        end = time.monotonic() + seconds
        with self._lock:
            while self._wakes == wakes and not self._stopping.is_set():
                left = end - time.monotonic()
                if left <= 0:
                    return
                self._lock.wait(left)

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
                    self._run_chain(task)
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
        with self._lock:
            if self._stopping.is_set():
                return None
            self._polls[slot] = (session, abort)
        try:
            res = self._transport.post(
                "/v1/workers/poll",
                {"session_id": session, "max_tasks": 1, "wait_s": self.poll_wait_s},
                timeout=self.poll_wait_s + 15,
                abort=abort,
            )
        except RequestAborted:
            return None  # stopping, or the session was found unknown elsewhere
        except Exception as err:
            if is_unknown_session(err):
                self._forget_session(session, "poll")
                return None
            if self._stopping.is_set():
                return None
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

    # ---- running tasks --------------------------------------------------------------------

    def _run_chain(self, task: Dict[str, Any]) -> None:
        """Runs an attempt and reports it on this slot's connection; when the report hands out
        the next attempt, runs that one in the same slot."""
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
                following = self._deliver(current, outcome, take)
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

    def _execute(self, task: Dict[str, Any]) -> Outcome:
        name, contract = str(task.get("task")), str(task.get("contract"))
        self.logger.info(
            "executing %s",
            json.dumps(
                {
                    "execution_id": task.get("execution_id"),
                    "step": task.get("step"),
                    "attempt": task.get("attempt"),
                    "task": name,
                    "redelivery": bool(task.get("redelivery")),
                }
            ),
        )
        definition = self._tasks.get((name, contract))
        if definition is None:
            self.logger.error(
                "the runtime handed out task %s contract %s, which this worker does not serve",
                name,
                contract,
            )
            return fail_outcome(
                "UNKNOWN_TASK",
                f"worker {self.worker_id} does not serve task {name} contract {contract}",
                True,
                {},
            )
        try:
            value = from_json(definition.input_type, task.get("input"), f"input for {name}")
        except OrbitValidationError as err:
            return fail_outcome("INVALID_INPUT", str(err), False, {"issues": err.issues})
        ctx = TaskContext(task, heartbeat=self._heartbeat_once, logger=self.logger)
        with self._lock:
            entry = self._inflight.get(ctx.token)
            if entry is not None:
                entry.ctx = ctx
                if entry.cancel_reason is not None:
                    ctx._cancel(entry.cancel_reason)
        return run_attempt(definition, value, ctx)

    def _deliver(self, task: Dict[str, Any], outcome: Outcome, take: bool) -> List[Any]:
        """Reports a result until it is delivered or the worker gives up on it; with ``take``
        the first request asks for one next attempt. Answers the attempts the answer carried."""
        backoff = self._new_backoff()
        token = task["token"]
        substituted = False  # the result was already replaced by a small failure
        while True:
            path = "/v1/tasks/complete" if outcome.kind == "complete" else "/v1/tasks/fail"
            body: Dict[str, Any] = {"token": token}
            if outcome.kind == "complete":
                body["output"] = outcome.output
            else:
                body["error"] = outcome.error
            session = self._session
            asked = bool(take and session and not self._stopping.is_set())
            if asked:
                body["session_id"] = session
                body["max_tasks"] = 1
            try:
                # NaN and Infinity are not JSON (the runtime answers 400 BAD_JSON).
                payload = json.dumps(body, separators=(",", ":"), allow_nan=False).encode()
            except (TypeError, ValueError, RecursionError) as err:
                if substituted:  # cannot happen: the substitute is plain strings
                    self.logger.error("dropping the result of %s: %s", token, err)
                    return []
                self.logger.error(
                    "the %s of %s is not JSON (%s: %s); reporting a failure instead",
                    _what(outcome),
                    token,
                    type(err).__name__,
                    err,
                )
                outcome = fail_outcome(
                    "RESULT_NOT_JSON",
                    _clip(f"the {_what(outcome)} is not JSON ({type(err).__name__}: {err})"),
                    False,
                    {},
                )
                substituted = True
                continue
            try:
                res = self._transport.post(path, payload, timeout=self.request_timeout_s)
            except OrbitError as err:
                take = False  # retries do not ask for more work
                if self._abandon.is_set():
                    self.logger.warning("giving up reporting the result of %s (worker stopped)", token)
                    return []
                if is_retryable(err):
                    delay = backoff.next()
                    self.logger.warning(
                        "report result failed: %s; retrying in %s",
                        self._describe(err),
                        format_seconds(delay),
                    )
                    if self._abandon.wait(delay):
                        self.logger.warning("giving up reporting the result of %s (worker stopped)", token)
                        return []
                    continue
                if (
                    not substituted
                    and isinstance(err, OrbitApiError)
                    and err.status in (400, 413, 422)
                ):
                    self.logger.error(
                        "the runtime refused the %s of %s: %s; reporting a failure instead",
                        _what(outcome),
                        token,
                        self._describe(err),
                    )
                    outcome = fail_outcome(
                        "OUTPUT_REJECTED" if outcome.kind == "complete" else "RESULT_REJECTED",
                        _clip(f"the runtime refused the {_what(outcome)}: {err.code}: {err.message}"),
                        False,
                        {},
                    )
                    substituted = True
                    continue
                self.logger.error(
                    "report result failed: %s; dropping the result of %s", self._describe(err), token
                )
                return []
            if isinstance(res, dict) and res.get("accepted") is False:
                self.logger.debug("result not accepted (the step already has one) token=%s", token)
            elif outcome.kind == "fail":
                self.logger.info(
                    "task failed %s",
                    json.dumps(
                        {
                            "execution_id": task.get("execution_id"),
                            "step": task.get("step"),
                            "attempt": task.get("attempt"),
                            "code": outcome.error.get("code"),
                        }
                    ),
                )
            following = res.get("tasks") if asked and isinstance(res, dict) else None
            return following if isinstance(following, list) else []

    # ---- heartbeats -----------------------------------------------------------------------

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

    # ---- helpers --------------------------------------------------------------------------

    def _describe(self, err: BaseException) -> str:
        if isinstance(err, OrbitConnectionError):
            return str(err)
        if isinstance(err, OrbitApiError):
            return f"ORBIT runtime at {self.server} answered {err.status} {err.code}: {err.message}"
        return f"{type(err).__name__}: {err}"


def _what(outcome: Outcome) -> str:
    """``output``, or ``failure <code>: <message>`` (shortened), for messages about a result."""
    if outcome.kind == "complete":
        return "output"
    error = outcome.error if isinstance(outcome.error, dict) else {}
    return f"failure {str(error.get('code'))[:200]!r}: {_clip(str(error.get('message')), 500)}"


def _clip(text: str, limit: int = 2000) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _snippet(value: Any) -> str:
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 200 else text[:200] + "…"
