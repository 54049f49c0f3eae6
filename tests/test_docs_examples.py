"""The README's Python examples and docs/cli.md's `sh` examples run as written (in a scratch
directory), so they cannot drift from the code."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

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


CLI_BLOCKS = re.findall(r"```sh\n(.*?)```", (ROOT / "docs" / "cli.md").read_text(encoding="utf-8"), re.S)


def test_cli_md_sh_examples_run_in_order(tmp_path):
    """Every `sh` block of docs/cli.md, in order, in one scratch directory (later blocks use what
    earlier ones made), each command exiting 0."""
    assert len(CLI_BLOCKS) >= 3
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "data").symlink_to(ROOT / "tests" / "data")
    (tmp_path / "docs" / "img").mkdir(parents=True)
    bin_dir = pathlib.Path(sys.executable).parent
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    for block in CLI_BLOCKS:
        r = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=tmp_path, capture_output=True, text=True, env=env, timeout=300)
        assert r.returncode == 0, f"{block}\n{r.stdout}\n{r.stderr}"
    assert (tmp_path / "docs" / "img" / "stats.png").exists()


def test_one_default_answer_everywhere(tmp_path):
    """The API, `create`, `ingest`, `demo` and the docs give a new store the same answers: verified
    similarity at the default threshold, candidates within the default candidate radius, with
    ``Pipeline()`` and its sketch; and `-k` without a threshold the same bit-radius store without a
    sketch in the API and on the command line (they disagreed once: 3 in the API and `create`, 5
    in `demo` and the docs, so a store made with the defaults refused the k the docs recommend)."""
    import fpstore
    from fpstore.admin.cli import build_parser
    from fpstore.fingerprint.pipeline import DEFAULT_K
    from fpstore.store.sketches import CANDIDATE_K, DEFAULT_THRESHOLD
    from tests.test_cli import cli

    with fpstore.open(tmp_path / "api") as store:
        assert (store.k, store.threshold, store.pipeline) == (CANDIDATE_K, DEFAULT_THRESHOLD, fpstore.Pipeline())
        assert store.pipeline.sketch_bits == 512 and store.design.k >= CANDIDATE_K
    with fpstore.open(tmp_path / "api-k", k=DEFAULT_K) as store:
        assert (store.k, store.threshold, store.pipeline) == (DEFAULT_K, None, fpstore.Pipeline(sketch_bits=0))
    assert cli("create", tmp_path / "cli").code == 0
    info = cli("info", tmp_path / "cli", "--json").json()
    assert (info["k"], info["threshold"], info["pipeline_id"]) == (CANDIDATE_K, DEFAULT_THRESHOLD, fpstore.Pipeline().id)
    assert cli("create", tmp_path / "cli-k", "-k", str(DEFAULT_K)).code == 0
    info = cli("info", tmp_path / "cli-k", "--json").json()
    assert (info["k"], info["threshold"], info["pipeline_id"]) == (DEFAULT_K, None, fpstore.Pipeline(sketch_bits=0).id)
    parser = build_parser()
    for command in (["ingest", "x"], ["demo"]):
        args = parser.parse_args(command)
        assert args.k is None and getattr(args, "threshold", None) is None  # the store's defaults
    tuning = (ROOT / "docs" / "tuning.md").read_text(encoding="utf-8")
    assert f"**threshold {DEFAULT_THRESHOLD}**" in tuning and f"**k = {DEFAULT_K}**" in tuning
    cli_md = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    assert f"the candidate radius (default {CANDIDATE_K})" in cli_md and f"({DEFAULT_K} is the calibrated radius of the pipeline without a sketch)" in cli_md