"""Errors raised by the ORBIT SDK.

Every error the SDK raises itself is an :class:`OrbitError`. An answer of the runtime that is
not 2xx is an :class:`OrbitApiError` carrying the API error ``code``; a runtime that cannot be
reached is an :class:`OrbitConnectionError`. A task handler raises :class:`TaskError` to fail
its attempt with a code of its choosing.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional


class OrbitError(Exception):
    """Base class of every error the SDK raises itself."""


class OrbitApiError(OrbitError):
    """The runtime answered with a non-2xx status.

    ``code`` and ``message`` come from the ``{"error": {"code", "message", …}}`` body (or are
    ``HTTP_<status>`` and the body's text when it is not one); ``details`` holds the other
    members of the error object (``leader_addr`` of a 503 NOT_LEADER, ``problems`` of a 422),
    ``body`` the whole parsed body.
    """

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        body: Any = None,
        details: Optional[Dict[str, Any]] = None,
        method: str = "",
        path: str = "",
    ) -> None:
        super().__init__(f"{code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.body = body
        self.details: Dict[str, Any] = details or {}
        self.method = method
        self.path = path

    @property
    def retryable(self) -> bool:
        """True for a 5xx answer (503 NOT_LEADER included): repeating the request may help."""
        return self.status >= 500

    @property
    def leader_addr(self) -> Optional[str]:
        """The leader's address named by a 503 NOT_LEADER answer, if any."""
        addr = self.details.get("leader_addr")
        return addr if isinstance(addr, str) and addr else None


class OrbitConnectionError(OrbitError):
    """The runtime could not be reached, the answer could not be read, or the request timed out.

    Reads ``cannot reach ORBIT runtime at <url>: <reason>``.
    """

    def __init__(self, server: str, reason: str) -> None:
        super().__init__(f"cannot reach ORBIT runtime at {server}: {reason}")
        self.server = server
        self.reason = reason


class OrbitExecutionError(OrbitError):
    """:meth:`Client.result` found the execution failed, cancelled, timed out or still running."""

    def __init__(self, message: str, execution: Dict[str, Any]) -> None:
        super().__init__(message)
        self.execution = execution
        self.status = execution.get("status")


class ValidationIssue(dict):  # type: ignore[type-arg]
    """One problem found by a contract: ``{"path": "$.amount", "message": "…"}``."""


class OrbitValidationError(OrbitError):
    """A value does not fit a task contract (a dataclass or TypedDict)."""

    def __init__(self, message: str, issues: List[Dict[str, str]]) -> None:
        super().__init__(message)
        self.issues = issues


class TaskError(Exception):
    """Raised by a task handler to fail the attempt with a chosen error code::

        raise TaskError("CARD_DECLINED", "the card was declined", retryable=False)

    ``retryable`` (default True) lets the runtime retry the step under its retry policy;
    ``details`` is any JSON value reported with the failure.
    """

    def __init__(
        self, code: str, message: str = "", *, retryable: bool = True, details: Any = None
    ) -> None:
        super().__init__(message or code)
        self.code = code
        self.message = message or code
        self.retryable = retryable
        self.details = details


def is_retryable(err: BaseException) -> bool:
    """True when repeating the request may help: a connection error or a 5xx answer."""
    return isinstance(err, OrbitConnectionError) or (
        isinstance(err, OrbitApiError) and err.status >= 500
    )


def is_unknown_session(err: BaseException) -> bool:
    """True for a 404 UNKNOWN_SESSION answer."""
    return isinstance(err, OrbitApiError) and err.status == 404 and err.code == "UNKNOWN_SESSION"
