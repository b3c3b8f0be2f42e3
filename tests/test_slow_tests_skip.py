"""The suite skips tests marked slow unless asked for them (conftest's
``pytest_collection_modifyitems``): the README's test command keeps to its
time budget, ``--slow`` adds them, ``-m`` chooses by marks itself."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from conftest import pytest_collection_modifyitems


class _Item:
    def __init__(self, name: str, slow: bool):
        self.name = name
        self.keywords = {name: True, **({"slow": True} if slow else {})}
        self.markers = []

    def add_marker(self, marker) -> None:
        self.markers.append(marker)


def _config(slow_flag: bool, markexpr: str):
    return SimpleNamespace(getoption=lambda name: {"--slow": slow_flag}[name],
                           option=SimpleNamespace(markexpr=markexpr))


def _skips(slow_flag: bool, markexpr: str):
    """{test name: the reason of its skip mark} for a fast and a slow test."""
    items = [_Item("test_fast", slow=False), _Item("test_long", slow=True)]
    pytest_collection_modifyitems(_config(slow_flag, markexpr), items)
    return {item.name: marker.mark.kwargs["reason"] for item in items
            for marker in item.markers if marker.mark.name == "skip"}


def test_slow_tests_are_skipped_by_default_with_how_to_run_them():
    skips = _skips(False, "")
    assert list(skips) == ["test_long"]
    assert "--slow" in skips["test_long"]


@pytest.mark.parametrize("slow_flag, markexpr", [(True, ""), (False, "slow"),
                                                 (False, "not slow")])
def test_slow_flag_or_a_mark_expression_skips_nothing(slow_flag, markexpr):
    assert _skips(slow_flag, markexpr) == {}


def test_the_slow_mark_is_declared():
    """pytest.ini declares the mark (an undeclared one would only warn)."""
    import configparser
    import os

    from conftest import REPO_ROOT

    ini = configparser.ConfigParser()
    ini.read(os.path.join(REPO_ROOT, "pytest.ini"))
    assert any(line.strip().startswith("slow:")
               for line in ini["pytest"]["markers"].splitlines())
