"""Worker, shared ground of the roles: the state they share, the attempt record, helpers."""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Deque, Dict, List, Optional, Tuple

from .._http import Abort, Backoff, Transport
from ..errors import OrbitApiError, OrbitConnectionError
from ..task import Outcome, TaskContext, TaskDefinition


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


class _WorkerBase:
    """The state the roles share, set up by ``Worker.__init__`` (``orbit_sdk/worker.py``); the
    roles (``session``, ``slots``, ``execute``, ``report``, ``heartbeat``) are its subclasses and
    ``Worker`` composes them."""

    worker_id: str
    runtime: str
    concurrency: int
    poll_wait_s: float
    heartbeat_s: float
    request_timeout_s: float
    logger: logging.Logger
    _transport: Transport
    _new_backoff: Callable[[], Backoff]
    _tasks: Dict[Tuple[str, str], TaskDefinition]
    _lock: threading.Condition
    _register_lock: threading.Lock
    _state: str
    _session: Optional[str]
    _registered_once: bool
    _running: int
    _inflight: Dict[str, _Inflight]
    _backlog: Deque[Dict[str, Any]]
    _polls: Dict[int, Tuple[str, Abort]]
    _slots_alive: int
    _stopping: threading.Event
    _wakes: int
    _hb_stop: threading.Event
    _abandon: threading.Event
    _hb_lock: threading.Lock

    # What one role calls of another (defined by the role named).
    _ensure_session: Callable[[], str]  # session
    _forget_session: Callable[[str, str], None]  # session
    _execute: Callable[[Dict[str, Any]], Outcome]  # execute
    _deliver: Callable[..., List[Any]]  # report
    _slot_transport: Callable[[int], Transport]  # nodes
    _node_unreachable_now: Callable[[int, str], bool]  # nodes
    _slot_targets: Dict[int, Optional[str]]  # nodes
    _node_transports: Dict[str, Transport]  # nodes
    _deliveries: Dict[int, Abort]  # nodes
    _heartbeat_once: Callable[[], Optional[BaseException]]  # heartbeat

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

    def _describe(self, err: BaseException) -> str:
        if isinstance(err, OrbitConnectionError):
            return str(err)
        if isinstance(err, OrbitApiError):
            server = self._transport.server
            return f"ORBIT runtime at {server} answered {err.status} {err.code}: {err.message}"
        return f"{type(err).__name__}: {err}"


def _snippet(value: Any) -> str:
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 200 else text[:200] + "…"
