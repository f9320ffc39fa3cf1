"""One task and one attempt of it: the definition a worker serves (name, contract version,
language pin, handler, input and output contracts), the context a handler gets, and running
an attempt to its outcome (``complete`` with a JSON output, or ``fail`` with ``code``,
``message``, ``retryable``, ``details``). The worker (``worker.py``) does the rest: polling,
threads, heartbeats, reporting.
"""

from __future__ import annotations

import inspect
import json
import logging
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Optional

from .contracts import contract_types, to_json
from .errors import OrbitValidationError, TaskError

__all__ = ["TaskContext", "TaskDefinition", "define_task", "run_attempt", "Outcome", "fail_outcome"]

_log = logging.getLogger("orbit")


class TaskContext:
    """What a handler learns about the attempt it runs.

    ``cancelled`` is a :class:`threading.Event` set when the runtime cancels the attempt (the
    step timed out, the execution was cancelled or failed), when its deadline passes, or when
    the worker gives up on it at shutdown; ``cancel_reason`` says which (``cancel``,
    ``deadline``, ``shutdown``). Long tasks should wait on it instead of ``time.sleep``
    (``ctx.sleep(5)``) or check it between pieces of work; :meth:`heartbeat` asks the runtime
    right now.
    """

    def __init__(
        self,
        task: Dict[str, Any],
        heartbeat: Optional[Callable[[], Any]] = None,
        logger: Optional[logging.Logger] = None,
    ) -> None:
        self._heartbeat = heartbeat
        #: The attempt's task token (``<execution id>/<uuid>``).
        self.token: str = task["token"]
        self.execution_id: str = str(task.get("execution_id", ""))
        #: The step id in the workflow definition.
        self.step: str = str(task.get("step", ""))
        #: Attempt number, from 1.
        self.attempt: int = int(task.get("attempt") or 1)
        self.task: str = str(task.get("task", ""))
        self.contract: str = str(task.get("contract", ""))
        #: The same for every attempt and redelivery of one step execution: deduplicate on it.
        self.idempotency_key: str = str(task.get("idempotency_key", ""))
        #: True when the attempt was handed out again after its worker went silent.
        self.redelivery: bool = bool(task.get("redelivery"))
        #: When the runtime stops waiting for this attempt (epoch milliseconds), if it said.
        self.deadline_ms: Optional[float] = deadline_of(task.get("deadline_ms"))
        self.cancelled = threading.Event()
        self.cancel_reason: Optional[str] = None
        self.logger = logger or _log

    def _cancel(self, reason: str) -> None:
        if not self.cancelled.is_set():
            self.cancel_reason = reason
            self.cancelled.set()

    def heartbeat(self) -> bool:
        """Heartbeats the session now (with every running attempt) and answers whether this
        attempt is cancelled. Never raises: a failed heartbeat is logged and retried by the
        worker's own heartbeat loop."""
        if self._heartbeat is not None:
            self._heartbeat()
        return self.cancelled.is_set()

    def sleep(self, seconds: float) -> bool:
        """Waits ``seconds`` or until the attempt is cancelled; answers True when cancelled."""
        return self.cancelled.wait(max(0.0, seconds))

    def time_left(self) -> Optional[float]:
        """Seconds until the attempt's deadline, if the runtime gave one."""
        if self.deadline_ms is None:
            return None
        return self.deadline_ms / 1000 - time.time()


@dataclass
class TaskDefinition:
    """A task a worker serves: its name, contract version, optional language pin, handler and
    the input and output types the handler is checked against (``Any``: not checked)."""

    name: str
    contract: str
    handler: Callable[..., Any]
    language: Optional[str] = None
    input_type: Any = Any
    output_type: Any = Any
    takes_context: bool = True


def define_task(
    name: str,
    handler: Callable[..., Any],
    *,
    contract: str = "1",
    language: Optional[str] = None,
    input: Any = None,
    output: Any = None,
) -> TaskDefinition:
    """A definition for ``handler``: ``fn(input)`` or ``fn(input, ctx)``; the contracts are
    ``input``/``output`` when given, else the handler's annotations."""
    in_tp, out_tp = contract_types(handler)
    try:
        positional = [
            p
            for p in inspect.signature(handler).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
        ]
        takes_context = len(positional) >= 2 or any(p.kind == p.VAR_POSITIONAL for p in positional)
    except (TypeError, ValueError):
        takes_context = True
    return TaskDefinition(
        name=name,
        contract=str(contract),
        handler=handler,
        language=language,
        input_type=input if input is not None else in_tp,
        output_type=output if output is not None else out_tp,
        takes_context=takes_context,
    )


@dataclass
class Outcome:
    """An attempt's result: ``kind`` is ``complete`` (with ``output``) or ``fail`` (with the
    ``error`` object of ``POST /v1/tasks/fail``)."""

    kind: str
    output: Any = None
    error: Dict[str, Any] = field(default_factory=dict)


def fail_outcome(code: str, message: str, retryable: bool, details: Any) -> Outcome:
    return Outcome(
        "fail", error={"code": code, "message": message, "retryable": retryable, "details": details}
    )


def run_attempt(definition: TaskDefinition, value: Any, ctx: TaskContext) -> Outcome:
    """Runs the handler on the (checked) input and turns what happens into one outcome:
    its answer checked against the output contract, a :class:`TaskError` as given, any other
    exception as a retryable failure named after its type (``CANCELLED`` or
    ``DEADLINE_EXCEEDED`` when the attempt had been cancelled)."""
    if ctx.deadline_ms is not None and ctx.deadline_ms <= time.time() * 1000:
        ctx._cancel("deadline")
    try:
        raw = definition.handler(value, ctx) if definition.takes_context else definition.handler(value)
    except TaskError as err:
        details = err.details if err.details is not None else {}
        return fail_outcome(err.code, err.message, err.retryable, details)
    except BaseException as err:  # noqa: BLE001 - any failure of the handler is the attempt's
        if ctx.cancel_reason == "cancel":
            return fail_outcome("CANCELLED", f"task cancelled by the ORBIT runtime: {err}", True, {})
        if ctx.cancel_reason == "deadline":
            return fail_outcome("DEADLINE_EXCEEDED", f"the attempt's deadline passed: {err}", True, {})
        tb = traceback.format_exception(type(err), err, err.__traceback__)
        return fail_outcome(
            type(err).__name__,
            str(err) or type(err).__name__,
            True,
            {"type": type(err).__name__, "traceback": "".join(tb[-12:])},
        )
    try:
        output = to_json(definition.output_type, raw, f"output of {definition.name}")
        json.dumps(output)
    except OrbitValidationError as err:
        return fail_outcome("INVALID_OUTPUT", str(err), False, {"issues": err.issues})
    except (TypeError, ValueError) as err:
        return fail_outcome("INVALID_OUTPUT", f"output of {definition.name} is not JSON: {err}", False, {})
    return Outcome("complete", output=output)


def deadline_of(value: Any) -> Optional[float]:
    """``deadline_ms`` is epoch milliseconds; small values are read as a duration from now."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        return None
    return float(value) if value > 1e11 else time.time() * 1000 + float(value)
