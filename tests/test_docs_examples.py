"""The README's Python examples run as written (in a scratch directory), so they cannot drift
from the code."""

from __future__ import annotations

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
BLOCKS = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(encoding="utf-8"), re.S)


def test_the_readme_has_python_examples():
    assert BLOCKS


@pytest.mark.parametrize("number", range(len(BLOCKS)))
def test_readme_python_example_runs(number, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    exec(compile(BLOCKS[number], f"README.md python block {number + 1}", "exec"), {"__name__": "readme"})
    assert capsys.readouterr().out  # each example prints what it shows
