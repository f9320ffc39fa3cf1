"""Worker role, the completer: reports an attempt's result (complete/fail), retrying delivery."""

from __future__ import annotations

import json
from typing import Any, Dict, List, Optional

from .._http import Abort, RequestAborted, Transport, format_seconds
from ..errors import OrbitApiError, OrbitConnectionError, OrbitError, is_retryable
from ..task import Outcome, fail_outcome
from .common import _WorkerBase


class _ReportRole(_WorkerBase):
    """Delivers each result exactly once (or gives it up when the worker stops), substituting a
    small failure for a result the runtime refuses or that is not JSON."""

    def _deliver(
        self,
        task: Dict[str, Any],
        outcome: Outcome,
        take: bool,
        via: Optional[Transport] = None,
        cut: Optional[Abort] = None,
    ) -> List[Any]:
        """Reports a result until it is delivered or the worker gives up on it; with ``take``
        the first request asks for one next attempt. Answers the attempts the answer carried.
        The first request goes on ``via`` (the slot's node, which handed the attempt out) when
        given; retries go to the configured address, which reaches a live server. ``cut`` ends
        that first request when the node leaves the cluster's live list while it waits."""
        transport = via or self._transport
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
                direct = transport is not self._transport
                res = transport.post(
                    path,
                    payload,
                    timeout=self.request_timeout_s,
                    abort=cut if direct else None,
                )
            except RequestAborted:
                # The node left while it held the result: the configured address, at once.
                take = False
                transport = self._transport
                continue
            except OrbitError as err:
                take = False  # retries do not ask for more work
                transport = self._transport
                if direct and isinstance(err, OrbitConnectionError):
                    # A node's own address did not answer (it left or died): the configured
                    # address reaches a live server at once, which hands the result to the
                    # execution's new owner before that owner redelivers the attempt.
                    continue
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


def _what(outcome: Outcome) -> str:
    """``output``, or ``failure <code>: <message>`` (shortened), for messages about a result."""
    if outcome.kind == "complete":
        return "output"
    error = outcome.error if isinstance(outcome.error, dict) else {}
    return f"failure {str(error.get('code'))[:200]!r}: {_clip(str(error.get('message')), 500)}"


def _clip(text: str, limit: int = 2000) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
