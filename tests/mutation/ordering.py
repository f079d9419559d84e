"""A pytest plugin the mutation tool loads into the contract suite (``-p tests.mutation.ordering``).

With ``-x`` a mutant's run stops at its first failure, so the quick, targeted checks go first and the
generated Schemathesis tests (most of the suite's wall time) last. Only the order changes; every test
still runs against a mutant that nothing else kills.
"""

from __future__ import annotations

from typing import Any

import pytest

SLOW_MODULES = ("test_stateful", "test_stateless")  # in this order: the state machine is quicker


def _rank(item: Any) -> int:
    module = getattr(getattr(item, "module", None), "__name__", "") or ""
    name = module.rsplit(".", 1)[-1]
    return SLOW_MODULES.index(name) + 1 if name in SLOW_MODULES else 0


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[Any]) -> None:
    items.sort(key=_rank)  # stable: the order within each group is the collection order
