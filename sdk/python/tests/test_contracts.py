"""Typed contracts: JSON in, dataclasses and TypedDicts out, every problem with its path."""

from __future__ import annotations

import enum
import os
import sys
import unittest
from dataclasses import dataclass, field
from typing import Any, Dict, List, Literal, Optional, Tuple, Union

if sys.version_info >= (3, 11):
    from typing import NotRequired, TypedDict
else:  # pragma: no cover
    from typing import TypedDict

    NotRequired = None

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from orbit_sdk import OrbitValidationError, from_json, to_json  # noqa: E402
from orbit_sdk.contracts import contract_types  # noqa: E402


class Tier(enum.Enum):
    GOLD = "gold"
    STANDARD = "standard"


@dataclass
class Item:
    sku: str
    qty: int
    price: float = 0.0

    def __post_init__(self) -> None:
        if self.qty < 1:
            raise ValueError("qty must be at least 1")


@dataclass
class Order:
    order_id: str
    items: List[Item]
    tier: Tier = Tier.STANDARD
    note: Optional[str] = None
    tags: Dict[str, int] = field(default_factory=dict)
    kind: Literal["web", "shop"] = "web"


class Address(TypedDict, total=False):
    street: str
    zip: str


class Customer(TypedDict):
    name: str
    address: Address


class ContractsTest(unittest.TestCase):
    def test_builds_nested_dataclasses(self) -> None:
        order = from_json(
            Order,
            {
                "order_id": "o-1",
                "items": [{"sku": "a", "qty": 2, "price": 3}, {"sku": "b", "qty": 1.0}],
                "tier": "gold",
                "tags": {"x": 1},
                "unknown": "ignored",
            },
        )
        self.assertEqual(order.items[0], Item("a", 2, 3.0))
        self.assertIsInstance(order.items[0].price, float)
        self.assertEqual(order.items[1].qty, 1)
        self.assertIs(order.tier, Tier.GOLD)
        self.assertIsNone(order.note)

    def test_collects_every_problem_with_its_path(self) -> None:
        with self.assertRaises(OrbitValidationError) as caught:
            from_json(
                Order,
                {"items": [{"sku": 1, "qty": "2"}, "x", {"sku": "c", "qty": 0}], "tier": "platinum", "kind": "fax"},
                "input for orders.validate",
            )
        issues = caught.exception.issues
        self.assertEqual(
            [i["path"] for i in issues],
            ["$.order_id", "$.items[0].sku", "$.items[0].qty", "$.items[1]", "$.items[2]", "$.tier", "$.kind"],
        )
        self.assertIn("expected integer, got string", str(caught.exception))
        self.assertIn("qty must be at least 1", str(caught.exception))
        self.assertTrue(str(caught.exception).startswith("invalid input for orders.validate: $.order_id: required"))

    def test_typeddict_required_and_optional_keys(self) -> None:
        self.assertEqual(
            from_json(Customer, {"name": "ada", "address": {}}), {"name": "ada", "address": {}}
        )
        with self.assertRaises(OrbitValidationError) as caught:
            from_json(Customer, {"address": {"zip": 1}})
        self.assertEqual([i["path"] for i in caught.exception.issues], ["$.name", "$.address.zip"])

    def test_scalars_unions_and_any(self) -> None:
        self.assertIs(from_json(bool, True), True)
        with self.assertRaises(OrbitValidationError):
            from_json(int, True)  # a boolean is no integer
        with self.assertRaises(OrbitValidationError):
            from_json(float, "1.5")
        self.assertEqual(from_json(Union[int, str], "x"), "x")
        self.assertEqual(from_json(Optional[int], None), None)
        self.assertEqual(from_json(Tuple[int, str], [1, "a"]), (1, "a"))
        self.assertEqual(from_json(Any, {"a": [1]}), {"a": [1]})
        self.assertEqual(from_json(Literal[1, "one"], 1), 1)
        with self.assertRaises(OrbitValidationError):
            from_json(Literal[1], True)

    def test_to_json_turns_dataclasses_and_enums_into_json_and_checks_them(self) -> None:
        order = Order("o", [Item("a", 1)], tier=Tier.GOLD)
        self.assertEqual(
            to_json(Order, order),
            {
                "order_id": "o",
                "items": [{"sku": "a", "qty": 1, "price": 0.0}],
                "tier": "gold",
                "note": None,
                "tags": {},
                "kind": "web",
            },
        )
        with self.assertRaises(OrbitValidationError):
            to_json(Item, {"sku": "a"})
        self.assertEqual(to_json(Any, (1, 2)), [1, 2])

    def test_contract_types_come_from_the_annotations(self) -> None:
        def handler(order: Order, ctx: object) -> Item:
            raise NotImplementedError

        def untyped(x, ctx):
            raise NotImplementedError

        self.assertEqual(contract_types(handler), (Order, Item))
        self.assertEqual(contract_types(untyped), (Any, Any))


if __name__ == "__main__":
    unittest.main()
