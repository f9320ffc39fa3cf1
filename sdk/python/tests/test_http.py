"""The transport's Abort: an abort that races the end of its request never reaches the socket
after the request let go of it (the thread reuses that kept-alive connection next)."""

from __future__ import annotations

import os
import sys
import threading
import unittest
from typing import List

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from orbit_sdk._http import Abort  # noqa: E402


class SlowSocket:
    """A socket whose shutdown takes as long as the test says; records what happened."""

    def __init__(self, log: List[str]) -> None:
        self.log = log
        self.entered = threading.Event()
        self.release = threading.Event()

    def shutdown(self, _how: int) -> None:
        self.log.append("shutdown begins")
        self.entered.set()
        self.release.wait(5)
        self.log.append("shutdown ends")


class AbortTest(unittest.TestCase):
    def test_a_request_that_lets_go_of_its_socket_waits_for_an_abort_in_progress(self) -> None:
        log: List[str] = []
        sock = SlowSocket(log)
        abort = Abort()
        abort._attach(sock)  # type: ignore[arg-type]
        aborter = threading.Thread(target=abort.abort)
        aborter.start()
        self.assertTrue(sock.entered.wait(5), "the abort reached the socket")

        def detach() -> None:
            abort._attach(None)
            log.append("detached")

        detacher = threading.Thread(target=detach)
        detacher.start()
        # While the shutdown runs, the request cannot let go of the socket (and then reuse its
        # connection for its next request under an abort that is still landing).
        detacher.join(0.2)
        self.assertTrue(detacher.is_alive(), f"detached during the shutdown: {log}")
        sock.release.set()
        aborter.join(5)
        detacher.join(5)
        self.assertEqual(log, ["shutdown begins", "shutdown ends", "detached"])

    def test_an_abort_after_the_request_let_go_touches_nothing(self) -> None:
        log: List[str] = []
        sock = SlowSocket(log)
        sock.release.set()
        abort = Abort()
        abort._attach(sock)  # type: ignore[arg-type]
        abort._attach(None)
        abort.abort()
        self.assertTrue(abort.aborted)
        self.assertEqual(log, [])

    def test_a_request_attached_after_the_abort_is_cut_at_once(self) -> None:
        log: List[str] = []
        sock = SlowSocket(log)
        sock.release.set()
        abort = Abort()
        abort.abort()
        abort._attach(sock)  # type: ignore[arg-type]
        self.assertEqual(log, ["shutdown begins", "shutdown ends"])


if __name__ == "__main__":
    unittest.main()
