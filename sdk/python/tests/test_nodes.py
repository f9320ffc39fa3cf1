"""The worker's router (orbit_sdk/_worker/nodes.py) without a server: which addresses of a health
answer the slots spread over, how evenly, and how a node that does not answer or leaves is
handled. Against real shared servers: tests/cluster_shared_spread_test.ts."""

from __future__ import annotations

import os
import sys
import unittest
from unittest import mock

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from orbit_sdk import Worker  # noqa: E402
from orbit_sdk._http import Abort  # noqa: E402
from orbit_sdk._worker import nodes  # noqa: E402
from orbit_sdk._worker.nodes import UNREACHABLE_S, live_addresses  # noqa: E402


def node(addr, live=True):
    return {"node_id": str(addr), "addr": addr, "live": live}


class LiveAddressesTest(unittest.TestCase):
    def test_the_live_shared_nodes_http_addresses_sorted_once_each(self) -> None:
        health = {
            "role": "shared",
            "nodes": [
                node("http://b:7233/"),
                node("http://a:7233"),
                node("http://c:7233", live=False),
                node(None),
                node("not a url"),
                node("ftp://d:21"),
                node("https://a:7233"),
                node("http://a:7233"),
            ],
        }
        self.assertEqual(
            live_addresses(health), ["http://a:7233", "http://b:7233", "https://a:7233"]
        )
        for role in ("single", "leader", "standby", None):
            self.assertEqual(live_addresses({**health, "role": role}), [], role)
        self.assertEqual(live_addresses({"role": "shared"}), [])
        self.assertEqual(live_addresses(None), [])
        self.assertEqual(live_addresses("ok"), [])


def worker() -> Worker:
    w = Worker("http://lb:7233", "w", concurrency=8)
    w._node_offset = 0
    return w


class RouterTest(unittest.TestCase):
    def test_slots_spread_evenly_and_none_known_is_the_configured_address(self) -> None:
        w = worker()
        self.assertIsNone(w._target_for(0))
        self.assertIs(w._slot_transport(0), w._transport)
        w._nodes_update(["http://a", "http://b", "http://c"])
        counts: dict = {}
        for i in range(8):
            t = w._target_for(i)
            counts[t] = counts.get(t, 0) + 1
        self.assertEqual(sorted(counts.values()), [2, 3, 3])
        self.assertNotIn(None, counts)
        t = w._slot_transport(1)
        self.assertEqual(t.server, "http://b")
        self.assertIs(w._slot_transport(4), t)  # one transport per node

    def test_a_node_that_did_not_answer_is_left_out_for_a_while(self) -> None:
        w = worker()
        w._nodes_update(["http://a", "http://b"])
        now = [1000.0]
        with mock.patch.object(nodes.time, "monotonic", lambda: now[0]):
            w._slot_transport(1)
            with self.assertLogs("orbit", "WARNING") as logs:
                self.assertTrue(w._node_unreachable_now(1, "connection refused"))
                self.assertTrue(w._node_unreachable_now(1, "connection refused"))
            self.assertEqual(len([m for m in logs.output if "node http://b did not answer" in m]), 1)
            self.assertIsNone(w._target_for(1))
            self.assertEqual(w._target_for(0), "http://a")
            self.assertIs(w._slot_transport(1), w._transport)
            self.assertFalse(w._node_unreachable_now(1, "refused"))  # the configured address
            now[0] += UNREACHABLE_S - 0.001
            self.assertIsNone(w._target_for(1))
            now[0] += 0.001
            self.assertEqual(w._target_for(1), "http://b")

    def test_the_polls_and_deliveries_of_a_node_that_left_end_at_once(self) -> None:
        w = worker()
        w._nodes_update(["http://a", "http://b"])
        w._slot_transport(0)
        w._slot_transport(1)
        aborts = [Abort(), Abort()]
        w._polls = {0: ("s", aborts[0]), 1: ("s", aborts[1])}
        # A result on its way to the node that leaves is cut too (then sent to the given address).
        deliveries = [Abort(), Abort()]
        w._deliveries = {0: deliveries[0], 1: deliveries[1]}
        with self.assertLogs("orbit", "INFO") as logs:
            w._nodes_update(["http://a", "http://c"])
        self.assertFalse(aborts[0].aborted)
        self.assertTrue(aborts[1].aborted)
        self.assertFalse(deliveries[0].aborted)
        self.assertTrue(deliveries[1].aborted)
        self.assertIn("slots spread over 2 node(s): http://a, http://c", "\n".join(logs.output))

    def test_no_spreading_reads_no_health(self) -> None:
        w = Worker("http://lb:7233", "w", spread_over_nodes=False)
        with mock.patch.object(w._transport, "get", side_effect=AssertionError("read")):
            w._nodes_refresh()
        self.assertEqual(w.node_addresses, [])


if __name__ == "__main__":
    unittest.main()
