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

import logging
import os
import signal
import ssl
import threading
import time
from collections import deque
from typing import Any, Callable, Deque, Dict, List, Optional, Tuple

from ._http import Abort, Backoff, Transport, format_seconds
from ._worker.common import _Inflight, _log, _Stopped
from ._worker.execute import _ExecuteRole
from ._worker.heartbeat import _HeartbeatRole
from ._worker.nodes import _NodesRole
from ._worker.report import _ReportRole
from ._worker.session import _SessionRole
from ._worker.slots import _SlotsRole
from .errors import OrbitError
from .task import TaskContext, TaskDefinition, define_task

__all__ = ["Worker", "TaskContext", "TaskDefinition"]  # the last two live in task.py

# The worker's roles, one module each under _worker/: session.py (register, the session id,
# registering again, unregister), slots.py (the producer: slot threads that long-poll and run
# one attempt at a time), execute.py (a handler's run), report.py (the completer: complete/fail
# with retries), heartbeat.py (heartbeats, leases, cancellations). The Worker below composes
# them and owns the life cycle (start, stop, signals, drain).


class Worker(_SessionRole, _SlotsRole, _ExecuteRole, _ReportRole, _HeartbeatRole, _NodesRole):
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
    :param spread_over_nodes: in a cluster in shared mode, spread the slots over the live
        servers at the addresses ``/v1/health`` advertises (each hands out the tasks of the
        executions it owns first, and the results go back to it, so nothing is forwarded
        between servers); a node that does not answer is left out for 10 s, one that leaves
        the cluster has its slots moved at once. Anything else: every slot uses ``server``.
    :param node_refresh_s: how often the live nodes are read again when spreading
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
        spread_over_nodes: bool = True,
        node_refresh_s: float = 5.0,
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
        self._init_nodes(spread_over_nodes, node_refresh_s)

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
        # In a shared cluster, the live nodes to spread the slots over (one health read).
        self._nodes_refresh()
        with self._lock:
            if self._stopping.is_set():
                return
            self._slots_alive = self.concurrency
        for i in range(self.concurrency):
            self._spawn(self._slot_loop, f"orbit-task-{i}", i)
        self._spawn(self._heartbeat_loop, "orbit-heartbeat")
        if self.spread_over_nodes:
            self._spawn(self._nodes_loop, "orbit-nodes")

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
                self._close_node_transports()
            self._state = "stopped"
            self.logger.info("worker stopped worker_id=%s", self.worker_id)
            self._done.set()
