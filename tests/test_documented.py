"""The manual's numbers (tests/documented.py) are what the docs print and what the code holds:
each page says the words with the documented number, and each place in the code has it. The
behaviour at each number is tested where its rule is (the table names the tests)."""

from __future__ import annotations

import re

import pytest

from tests import manual
from tests.documented import TABLE, Promise


def _flat(text: str) -> str:
    return re.sub(r"\s+", " ", text)


@pytest.mark.parametrize("p", TABLE, ids=lambda p: p.name)
def test_the_docs_print_the_documented_number(p: Promise):
    page = _flat(manual.read(p.page))
    missing = [w for w in p.says if _flat(w) not in page]
    assert not missing, f"{p.page} no longer says {missing} ({p.name} = {p.value!r} in tests/documented.py)"


@pytest.mark.parametrize("p", [p for p in TABLE if p.code], ids=lambda p: p.name)
def test_the_code_holds_the_documented_number(p: Promise):
    held = [read() for read in p.code]
    assert all(
        v == pytest.approx(p.value) if isinstance(p.value, (int, float)) else v == p.value for v in held
    ), f"{p.name}: the docs ({p.page}) say {p.value!r}, the code has {held}"


def test_each_number_has_its_code_or_a_behaviour_test_that_holds_it():
    assert all(p.code or p.behaviour for p in TABLE)
    assert len({p.name for p in TABLE}) == len(TABLE)


def test_the_behaviour_tests_named_exist():
    """Each test the table names for a number's behaviour is there (a renamed one would leave the
    number held by the words alone)."""
    for p in TABLE:
        for ref in p.behaviour:
            path, _, name = ref.partition("::")
            text = (manual.ROOT / path).read_text()
            assert re.search(rf"^(async )?def {re.escape(name)}\(", text, re.M), f"{p.name}: {ref} is missing"
