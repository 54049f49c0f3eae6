"""fpstore-admin, run as the installed command in a subprocess (in process only where noted)."""

from __future__ import annotations

import csv
import io
import json
import os
import pathlib
import re
import shutil
import signal
import stat
import subprocess
import sys
import time
from dataclasses import dataclass

import msgpack
import numpy as np
import pytest
import zstandard

import fpstore
from fpstore.admin.cli import build_parser, main
from fpstore.admin.exchange import export_store, import_stream
from fpstore.errors import FormatError
from fpstore.store.sketches import CANDIDATE_K, DEFAULT_THRESHOLD
from tools import make_test_warc as mtw

REPO = pathlib.Path(__file__).resolve().parent.parent
DATA = REPO / "tests" / "data"
DOCS = REPO / "docs" / "cli.md"


def admin() -> list[str]:
    """The installed ``fpstore-admin`` of this interpreter, else ``python -m fpstore`` (the same entry point)."""
    exe = shutil.which("fpstore-admin")
    if exe and os.path.dirname(os.path.realpath(exe)) == os.path.dirname(os.path.realpath(sys.executable)):
        return [exe]
    return [sys.executable, "-m", "fpstore"]


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = str(REPO) + (os.pathsep + e["PYTHONPATH"] if e.get("PYTHONPATH") else "")
    return e


@dataclass
class Run:
    code: int
    out: str
    err: str
    raw: bytes

    def json(self):
        return json.loads(self.out)


def run(*args: object, stdin: bytes | None = None, timeout: float = 120) -> Run:
    """Run fpstore-admin; every run must end without a traceback."""
    p = subprocess.run(admin() + [str(a) for a in args], input=stdin, capture_output=True, timeout=timeout, env=env())
    err = p.stderr.decode("utf-8", "replace")
    assert "Traceback" not in err, err
    return Run(p.returncode, p.stdout.decode("utf-8", "replace"), err, p.stdout)


def cli(*args: object, stdin: bytes = b"") -> Run:
    """Run the same ``main()`` in this process (fast; for the many small checks around each command)."""
    out, err = io.BytesIO(), io.BytesIO()
    streams = {
        "stdout": io.TextIOWrapper(out, encoding="utf-8", write_through=True),
        "stderr": io.TextIOWrapper(err, encoding="utf-8", write_through=True),
        "stdin": io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8"),
    }
    saved = {name: getattr(sys, name) for name in streams}
    try:
        for name, stream in streams.items():
            setattr(sys, name, stream)
        try:
            code = main([str(a) for a in args])
        except SystemExit as exc:  # argparse usage errors and --help
            code = exc.code if isinstance(exc.code, int) else 2
    finally:
        for name, stream in saved.items():
            setattr(sys, name, stream)
    text = err.getvalue().decode("utf-8", "replace")
    assert "Traceback" not in text, text
    return Run(code, out.getvalue().decode("utf-8", "replace"), text, out.getvalue())


def popen(*args: object) -> subprocess.Popen:
    return subprocess.Popen(admin() + [str(a) for a in args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env())


WORDS = [f"{w}{i}" for i in range(40) for w in ("river", "stone", "cloud", "ember", "frost")]


def synthetic(i: int, n: int = 80) -> str:
    return " ".join(WORDS[(i * 131 + j * 17 + (j * j) % 7) % len(WORDS)] for j in range(n))


def corpus() -> list[dict[str, str]]:
    """Documents with known near duplicates, an exact duplicate and short texts."""
    docs = [{"id": f"syn{i}", "text": synthetic(i)} for i in range(40)]
    docs += [
        {"id": "keeper", "text": mtw.ARTICLE_A},
        {"id": "keeper-edit", "text": mtw.ARTICLE_A.replace("brown ledger", "green ledger")},
        {"id": "keeper-copy", "text": mtw.ARTICLE_A},
        {"id": "bread", "text": mtw.ARTICLE_B},
        {"id": "bread-tail", "text": mtw.ARTICLE_B + " Enjoy it warm."},
        {"id": "notes", "text": mtw.PLAIN},
        {"id": "short-a", "text": "tiny note about bread"},
        {"id": "short-b", "text": "Tiny note, about BREAD!"},
        {"id": "short-c", "text": "something else entirely"},
    ]
    return docs


def write_jsonl(path: pathlib.Path, docs: list[dict]) -> pathlib.Path:
    path.write_text("".join(json.dumps(d) + "\n" for d in docs))
    return path


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A store built by the command (k=8: one edited word moves 7 bits): the corpus as JSONL plus the sample WARC."""
    tmp = tmp_path_factory.mktemp("cli")
    src = write_jsonl(tmp / "corpus.jsonl", corpus())
    store = tmp / "store.fps"
    r = run("ingest", store, src, DATA / "sample.warc.gz", "-k", "8", "--json")
    assert r.code == 0, r.err
    assert r.json()["added"] == len(corpus()) + len(mtw.TEXT_URIS)
    return store


def copy_store(src: pathlib.Path, dst: pathlib.Path) -> pathlib.Path:
    shutil.copytree(src, dst)
    return dst


# -- help and docs ------------------------------------------------------------------------------------


def commands() -> dict[str, object]:
    parser = build_parser()
    (sub,) = [a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"]
    return dict(sub.choices)


def doc_sections() -> dict[str, str]:
    text = DOCS.read_text()
    parts = re.split(r"^## `fpstore-admin (\w+)`\s*$", text, flags=re.M)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts), 2)}


@pytest.mark.slow
def test_every_command_has_help_and_is_documented_with_every_option(capsys):
    """Each command answers --help (exit 0) and has a section in docs/cli.md naming each of its
    options (the options every command shares are named once, under Conventions); the docs
    describe no command that does not exist."""
    cmds = commands()
    sections = doc_sections()
    assert set(sections) == set(cmds)
    conventions = DOCS.read_text().split("## Conventions", 1)[1].split("\n## ", 1)[0]
    shared = {"-v", "--verbose", "-q", "--quiet", "--progress", "--no-progress"}
    for opt in shared:
        assert re.search(rf"(?<![\w-]){re.escape(opt)}(?![\w-])", conventions), opt
    for name, sub in cmds.items():
        with pytest.raises(SystemExit) as exc:
            main([name, "--help"])
        assert exc.value.code == 0
        assert f"usage: fpstore-admin {name}" in capsys.readouterr().out
        for action in sub._actions:
            for opt in action.option_strings:
                if opt in ("-h", "--help") or opt in shared:
                    continue
                assert re.search(rf"(?<![\w-]){re.escape(opt)}(?![\w-])", sections[name]), (name, opt)
    r = run("--help")
    assert r.code == 0 and all(name in r.out for name in cmds)
    r = run("ingest", "--help")
    assert r.code == 0 and "--on-error" in r.out


def test_usage_errors_exit_2():
    """Unknown commands and bad options are usage errors (exit 2)."""
    assert run("frobnicate").code == 2
    assert cli("query").code == 2
    assert cli("ingest", "x.fps", "--on-error", "ignore").code == 2


def test_demo_stores_the_sample_and_prints_clusters(tmp_path):
    """The demo stores the sample corpus, recognises an edited copy and prints clusters from the store."""
    path = tmp_path / "demo.fps"
    r = cli("demo", "-k", "3", "--store", str(path))
    assert r.code == 0, r.err
    assert "near-duplicate clusters within k=3" in r.out
    assert "add('demo/edited-copy'): near-duplicate of None" not in r.out
    with fpstore.open(path, readonly=True) as store:
        assert "demo/edited-copy" in store and store.checkpoint("demo") == len(store) - 1
        assert store["demo/edited-copy"].canonical is not None


# -- the main job ----------------------------------------------------------------------------------------


@pytest.mark.slow
def test_main_job_ingest_sample_then_clusters(tmp_path):
    """README's main job: ingest the sample corpus of real text, print near-duplicate clusters."""
    store = tmp_path / "sample.fps"
    r = run("ingest", store, "--sample")
    assert r.code == 0, r.err
    r = run("dedup", store, "--clusters")
    assert r.code == 0
    clusters = [json.loads(line) for line in r.out.splitlines()]
    assert clusters and all(c["size"] == len(c["keys"]) >= 2 and c["keys"][0] == c["canonical"] for c in clusters)
    # A new store verifies: the rule is the candidate radius and the threshold.
    assert re.search(rf"\d+ clusters of \d+ documents within k={CANDIDATE_K} and of estimated similarity >= {DEFAULT_THRESHOLD}", r.err)


# -- commands on a built store -----------------------------------------------------------------------------


def test_create_then_info(tmp_path):
    """create takes pipeline and design options and refuses an existing store."""
    store = tmp_path / "new.fps"
    r = run("create", store, "--shingle", "2", "--seed", "7", "--min-tokens", "5", "-k", "4", "--expected-size", "1000", "--json")
    assert r.code == 0, r.err
    d = r.json()
    assert d["pipeline"]["shingle"] == 2 and d["pipeline"]["seed"] == 7 and d["pipeline"]["min_tokens"] == 5 and d["k"] == 4
    assert cli("create", store).code == 2
    r = run("info", store)
    assert r.code == 0 and "shingle=2" in r.out and "documents    0" in r.out


def test_info(built):
    """info reports header, pipeline, design, counts, sizes, map use and readers."""
    r = run("info", built, "--json")
    assert r.code == 0
    d = r.json()
    assert d["documents"] == len(corpus()) + len(mtw.TEXT_URIS)
    assert d["bytes_per_fingerprint"] > 0 and 0 < d["lmdb"]["map_used"] < 1
    assert isinstance(d["lmdb"]["readers"], list) and d["lmdb"]["databases"]["docs"]["entries"] == d["documents"]
    r = cli("info", built)
    assert r.code == 0, r.err
    text = r.out
    for word in ("pipeline", "design", "documents", "bytes per fingerprint", "readers", "free"):
        assert word in text
    # The tiers line agrees with the JSON figures.
    runs = d["runs"]
    assert f"tiers        {d['incremental_entries']:,} incremental (flushed at {d['flush_entries']:,}), {len(runs)} run" in text
    assert d["incremental_entries"] == d["incremental_entries_per_table"] == d["lmdb"]["databases"]["t00"]["entries"]


def test_stats(built):
    """stats gives per-table candidates per probe and distance histograms over a sample."""
    r = run("stats", built, "--sample", "30", "--json")
    assert r.code == 0
    d = r.json()
    info = cli("info", built, "--json").json()
    assert len(d["tables"]) == info["tables"] and d["sample"] == 30
    for t in d["tables"]:
        c, q = t["candidates_per_probe"], t["candidates_per_query"]
        assert c["p50"] <= c["p99"] <= c["max"]
        assert q["p50"] >= 1  # a stored fingerprint's probes find at least itself
    assert sum(d["distance_random_pairs"].values()) > 0
    assert d["distance_nearest_neighbour"].get("0", 0) >= 1  # keeper and keeper-copy are identical
    assert "candidates/probe" in cli("stats", built, "--sample", "10").out


def test_verify_ok_and_after_compaction(built, tmp_path):
    """A healthy store verifies (exit 0); compaction keeps it healthy and its answers the same."""
    store = copy_store(built, tmp_path / "c.fps")
    r = run("verify", store)
    assert r.code == 0 and ": ok (" in r.out and "LMDB verifier ok" in r.out
    before = cli("query", store, mtw.ARTICLE_A, "--json").json()
    r = run("compact", store, "--json")
    assert r.code == 0, r.err
    assert cli("verify", store, "--json").json()["ok"] is True
    assert cli("query", store, mtw.ARTICLE_A, "--json").json() == before


def test_verify_finds_a_missing_table_entry(built, tmp_path):
    """Damage (an entry removed from one table) is found: exit 1 and a problem naming the table."""
    import lmdb

    store = copy_store(built, tmp_path / "d.fps")
    with fpstore.open(store, readonly=True) as s:
        last = len(s.design.tables) - 1
    # Tamper below the API, with LMDB itself, as a bad disk or a bug would.
    with lmdb.open(str(store), max_dbs=64) as env:
        table = env.open_db(f"t{last:02d}".encode())
        with env.begin(write=True, db=table) as txn:
            victim = next(iter(txn.cursor().iternext(keys=True, values=False)))
            txn.delete(victim)
    r = run("verify", store, "--no-copy")
    assert r.code == 1 and f"problem: table {last}" in r.out


@pytest.mark.slow
def test_query_modes(built, tmp_path):
    """query takes a text argument, stdin, a file or a hex fingerprint; exit 1 when nothing matches."""
    r = run("query", built, mtw.ARTICLE_A, "--json")
    assert r.code == 0
    d = r.json()
    got = {m["key"]: m["distance"] for m in d["matches"]}
    assert got["keeper"] == 0 and got["keeper-copy"] == 0 and "keeper-edit" in got
    assert run("query", built, "-", "--json", stdin=mtw.ARTICLE_A.encode()).json() == d  # the subprocess reads stdin
    f = tmp_path / "q.txt"
    f.write_text(mtw.ARTICLE_A)
    assert cli("query", built, "--file", f, "--json").json() == d
    r = cli("query", built, "--fingerprint", d["fingerprint"], "--json")
    assert {m["key"] for m in r.json()["matches"]} == set(got)
    assert cli("query", built, "--fingerprint", d["fingerprint"], "--limit", "1").out.count("d=") == 1
    r = run("query", built, synthetic(999))
    assert r.code == 1 and "0 matches" in r.out
    r = cli("query", built, synthetic(999), "-k", "40")
    assert r.code == 2 and "exhaustive" in r.err
    assert cli("query", built, synthetic(999), "-k", "40", "--exhaustive").code == 0
    r = cli("query", built, "tiny note about bread", "--json")
    assert r.json()["short"] is True and {m["key"] for m in r.json()["matches"]} == {"short-a", "short-b"}
    assert cli("query", built, "--fingerprint", "xyz").code == 2
    assert cli("query", built, "text", "--file", f).code == 2


@pytest.mark.slow
def test_dedup_pairs_and_clusters(built, tmp_path):
    """dedup prints each pair once and clusters with the canonical first, as JSONL or CSV."""
    r = run("dedup", built)
    assert r.code == 0
    pairs = [json.loads(line) for line in r.out.splitlines()]
    keyset = {frozenset((p["a"], p["b"])): p["distance"] for p in pairs}
    assert len(keyset) == len(pairs)
    assert keyset[frozenset(("keeper", "keeper-copy"))] == 0
    assert frozenset(("bread", "bread-tail")) in keyset
    # Short texts pair only as exact duplicates (one content hash), never by fingerprint.
    assert {k for k in keyset if "short-a" in k or "short-b" in k} == {frozenset(("short-a", "short-b"))}
    rows = list(csv.reader(io.StringIO(cli("dedup", built, "--format", "csv").out)))
    assert rows[0] == ["a", "b", "distance"] and len(rows) == len(pairs) + 1
    out = tmp_path / "clusters.jsonl"
    assert run("dedup", built, "--clusters", "-o", out).code == 0
    clusters = [json.loads(line) for line in out.read_text().splitlines()]
    keeper = [c for c in clusters if "keeper" in c["keys"]][0]
    assert keeper["canonical"] == keeper["keys"][0] and {"keeper", "keeper-copy", "keeper-edit"} <= set(keeper["keys"])
    rows = list(csv.reader(io.StringIO(cli("dedup", built, "--clusters", "--format", "csv").out)))
    assert rows[0] == ["cluster", "canonical", "key"] and len(rows) == 1 + sum(c["size"] for c in clusters)


# -- ingest: bad input, resuming, interrupting -----------------------------------------------------------------


def test_ingest_bad_jsonl_skip_reports_line_numbers(tmp_path):
    """Skip mode: malformed lines, missing fields and invalid UTF-8 are reported with line numbers;
    the good lines are stored; exit 1."""
    p = tmp_path / "bad.jsonl"
    p.write_bytes(
        b'{"url": "a", "body": "' + mtw.PLAIN.encode() + b'"}\n'
        b'{"url": "b", "body": "two"}\n'
        b'{"url": "c", "body": \n'
        b'{"url": "d", "body": "four"}\n'
        b'{"url": "e"}\n'
        b'{"url": "f", "body": "caf\xff"}\n'
    )
    store = tmp_path / "s.fps"
    r = run("ingest", store, p, "--key-field", "url", "--text-field", "body")
    assert r.code == 1
    assert f"{p}:3: malformed JSON" in r.err
    assert f"{p}:5: missing field 'body'" in r.err
    assert f"{p}:6: invalid UTF-8 replaced" in r.err
    assert "malformed 1" in r.out and "missing-field 1" in r.out
    with fpstore.open(store, readonly=True) as s:
        assert sorted(s) == ["a", "b", "d", "f"]


def test_ingest_html_off_into_a_store_created_with_html_off(tmp_path):
    """--html off names the stored pipeline's setting even though its config omits html when off."""
    src = write_jsonl(tmp_path / "a.jsonl", corpus()[:3])
    store = tmp_path / "s.fps"
    assert cli("ingest", store, src, "--html", "off").code == 0
    r = cli("ingest", store, src, "--html", "off", "--restart")
    assert r.code == 0, r.err
    r = cli("ingest", store, src, "--html", "main-v1")
    assert r.code == 2 and "html='off', not 'main-v1'" in r.err


@pytest.mark.slow
def test_ingest_bad_jsonl_stop_keeps_what_came_before(tmp_path):
    """Stop mode: exit 2 at the bad line, the lines before it stored; after the fix a rerun resumes."""
    docs = [{"id": f"k{i}", "text": synthetic(i)} for i in range(6)]
    p = tmp_path / "stop.jsonl"
    lines = [json.dumps(d) for d in docs]
    lines[3] = lines[3][:-5]
    p.write_text("\n".join(lines) + "\n")
    store = tmp_path / "s.fps"
    r = run("ingest", store, p, "--on-error", "stop", "--batch-size", "2")
    assert r.code == 2 and f"stopped at {p}:4" in r.err
    with fpstore.open(store, readonly=True) as s:
        assert sorted(s) == ["k0", "k1", "k2"]
    p.write_text("\n".join(json.dumps(d) for d in docs) + "\n")
    r = run("ingest", store, p, "--json")
    assert r.code == 0 and r.json()["sources"][0]["resumed_from"] == "line 3" and r.json()["added"] == 3
    with fpstore.open(store, readonly=True) as s:
        assert len(s) == 6


def test_ingest_pipeline_options_must_match_an_existing_store(tmp_path):
    """Pipeline options create a new store's pipeline; for an existing store each must match."""
    src = write_jsonl(tmp_path / "a.jsonl", corpus()[:3])
    store = tmp_path / "s.fps"
    assert cli("ingest", store, src, "--shingle", "2", "--kind", "simhash64").code == 0
    r = cli("ingest", store, src, "--shingle", "3")
    assert r.code == 2 and "shingle=2, not 3" in r.err and "kind" not in r.err
    assert cli("ingest", store, src, "--shingle", "2").code == 0


def test_progress_bars(tmp_path):
    """--progress draws a bar (tqdm: percent, rate, ETA) on stderr for ingest, export, import and
    dedup, ending at 100 %; not a terminal, or --quiet: no bar."""
    src = write_jsonl(tmp_path / "p.jsonl", corpus())
    r = cli("ingest", tmp_path / "s.fps", src, "--progress", "--batch-size", "5")
    assert r.code == 0
    last = r.err.split("\r")[-1]
    assert "ingest: 100%" in last and "B/s" in last
    assert "ingest:" not in cli("ingest", tmp_path / "t.fps", src).err  # not a terminal: no bar
    assert "ingest:" not in cli("ingest", tmp_path / "q.fps", src, "--progress", "--quiet").err
    r = cli("export", tmp_path / "s.fps", "-o", tmp_path / "s.fpx", "--progress")
    assert r.code == 0 and "export:" in r.err
    r = cli("import", tmp_path / "i.fps", tmp_path / "s.fpx", "--progress")
    assert r.code == 0 and "import:" in r.err.split("\r")[-1] and "100%" in r.err
    r = cli("dedup", tmp_path / "s.fps", "--progress", "-o", tmp_path / "pairs.jsonl")
    assert r.code == 0 and "join: 100%" in r.err


def test_ingest_directory_notes_binary_files(tmp_path):
    """A directory of files: keys are relative paths, binary files are skipped with a note (exit 0)."""
    root = tmp_path / "site"
    (root / "sub").mkdir(parents=True)
    (root / "index.html").write_text(mtw.page("Home", mtw.ARTICLE_B, "nav").decode())
    (root / "sub" / "notes.txt").write_text(mtw.PLAIN)
    (root / "image.jpg").write_bytes(b"\xff\xd8\xff\xe0\x00\x10JFIF\x00")
    store = tmp_path / "s.fps"
    r = run("ingest", store, root, "--key-prefix", "site/")
    assert r.code == 0, r.err
    assert "image.jpg: binary file (NUL bytes); skipped" in r.err
    with fpstore.open(store, readonly=True) as s:
        assert sorted(s) == ["site/index.html", "site/sub/notes.txt"]


@pytest.mark.slow
def test_ingest_truncated_warc_then_complete(tmp_path):
    """A truncated WARC record is reported (exit 1), the records before it are kept, and once the
    file is whole a rerun stores the rest: each record exactly once."""
    whole = (DATA / "sample.warc.gz").read_bytes()
    path = tmp_path / "crawl.warc.gz"
    path.write_bytes(whole[: int(len(whole) * 0.6)])
    store = tmp_path / "s.fps"
    r = run("ingest", store, path, "--batch-size", "2")
    assert r.code == 1 and "truncated WARC record" in r.err
    with fpstore.open(store, readonly=True) as s:
        first = sorted(s)
    assert first and set(first) < set(mtw.TEXT_URIS)
    path.write_bytes(whole)
    r = run("ingest", store, path, "--json")
    assert r.code == 0 and r.json()["added"] == len(mtw.TEXT_URIS) - len(first)
    with fpstore.open(store, readonly=True) as s:
        assert sorted(s) == sorted(mtw.TEXT_URIS)


def test_paths_that_are_not_stores(tmp_path):
    """A missing path, a file and an empty directory are not stores: exit 2, one line, nothing created."""
    missing = tmp_path / "missing.fps"
    r = run("info", missing)
    assert r.code == 2 and "no fpstore store" in r.err and r.err.count("\n") == 1, r.err
    for cmd in ("stats", "verify", "compact", "dedup", "export"):
        r = cli(cmd, missing)
        assert r.code == 2 and "no fpstore store" in r.err and r.err.count("\n") == 1, (cmd, r.err)
    assert not missing.exists()
    f = tmp_path / "file"
    f.write_text("x")
    assert cli("info", f).code == 2
    (tmp_path / "empty").mkdir()
    assert cli("query", tmp_path / "empty", "text").code == 2
    r = cli("ingest", tmp_path / "s.fps", tmp_path / "nope.jsonl")
    assert r.code == 2 and "no such file" in r.err


def corpus_file(tmp_path: pathlib.Path, n: int) -> pathlib.Path:
    return write_jsonl(tmp_path / "big.jsonl", [{"id": f"doc{i}", "text": synthetic(i, 30)} for i in range(n)])


def wait_for_checkpoint(store: pathlib.Path, name: str, line: int, proc: subprocess.Popen, timeout: float = 60) -> None:
    """Poll the store (read-only, as another process would) until its checkpoint passes ``line``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if (store / "data.mdb").exists():
            try:
                with fpstore.open(store, readonly=True) as s:
                    pos = s.checkpoint(name)
                if pos and pos["line"] >= line:
                    return
            except fpstore.FpstoreError:
                pass  # the writer is still creating the store
        time.sleep(0.01)


def ingest_in_background(store, n, until_line):
    """Start an ingest of `n` documents in batches of 20; return once `until_line` lines are
    checkpointed, with the source, the store, the checkpoint's name and the running process."""
    src = corpus_file(store.parent, n)
    name = f"ingest:jsonl:{os.path.realpath(src)}"
    proc = popen("ingest", store, src, "--batch-size", "20", "--no-progress")
    wait_for_checkpoint(store, name, until_line, proc)
    return src, store, name, proc


@pytest.mark.slow
def test_ingest_killed_midway_then_rerun_stores_each_document_once(tmp_path):
    """SIGKILL an ingest after some batches; the rerun resumes at the last checkpoint and ends with
    every document stored exactly once; the store verifies."""
    n = 3000
    src, store, name, proc = ingest_in_background(tmp_path / "k.fps", n, until_line=200)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL, "the ingest ended before it could be killed"
    with fpstore.open(store, readonly=True) as s:
        done = s.checkpoint(name)["line"]
        assert len(s) == done and 200 <= done < n
    r = run("ingest", store, src, "--json")
    assert r.code == 0, r.err
    d = r.json()
    assert d["sources"][0]["resumed_from"] == f"line {done}" and d["added"] == n - done
    with fpstore.open(store, readonly=True) as s:
        assert len(s) == n
        assert sorted(s) == sorted(f"doc{i}" for i in range(n))
    assert run("verify", store, "--no-copy").code == 0


@pytest.mark.slow
def test_ingest_ctrl_c_stops_after_the_current_batch(tmp_path):
    """SIGINT: the ingest commits its current batch and exits 130 with a resume hint; a rerun completes."""
    n = 3000
    src, store, name, proc = ingest_in_background(tmp_path / "i.fps", n, until_line=100)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    err = err.decode()
    assert proc.returncode == 130 and "Traceback" not in err, err
    assert "stopping after the current batch" in err and "rerun the same command to resume" in err
    with fpstore.open(store, readonly=True) as s:
        assert len(s) == s.checkpoint(name)["line"] < n
    assert run("ingest", store, src).code == 0
    with fpstore.open(store, readonly=True) as s:
        assert len(s) == n


# -- export / import ----------------------------------------------------------------------------------------------


def answers(store: pathlib.Path, texts: list[str]) -> list[list[tuple]]:
    with fpstore.open(store, readonly=True) as s:
        return [[(m.key, m.distance, m.fingerprint) for m in s.query(text=t)] for t in texts]


@pytest.mark.slow
def test_export_import_round_trip_answers_identically(built, tmp_path):
    """Export then import into a new store: same pipeline and design, the same answers to every
    stored text and the same near-duplicate pairs; stdout to stdin works as well as files."""
    stream = tmp_path / "dump.fpx"
    r = run("export", built, "-o", stream)
    assert r.code == 0 and "exported" in r.err
    new = tmp_path / "copy.fps"
    r = run("import", new, stream, "--json")
    assert r.code == 0 and r.json()["created"] is True
    a, b = cli("info", built, "--json").json(), cli("info", new, "--json").json()
    assert (a["pipeline_id"], a["design"], a["k"], a["documents"]) == (b["pipeline_id"], b["design"], b["k"], b["documents"])
    texts = [d["text"] for d in corpus() if not d["id"].startswith("short")] + [synthetic(500), mtw.ARTICLE_B[:300]]
    assert answers(built, texts) == answers(new, texts)
    assert cli("dedup", built).out == cli("dedup", new).out
    piped = run("export", built)
    assert piped.code == 0 and piped.raw[:4] == b"\x28\xb5\x2f\xfd"  # a zstd frame
    r = run("import", tmp_path / "piped.fps", "-", stdin=piped.raw)
    assert r.code == 0
    assert answers(tmp_path / "piped.fps", texts) == answers(built, texts)


def test_export_import_round_trip_keeps_the_exact_tier(built, tmp_path):
    """Short texts match the same documents after export and import."""
    stream = tmp_path / "dump.fpx"
    assert cli("export", built, "-o", stream).code == 0
    assert cli("import", tmp_path / "copy.fps", stream).code == 0
    texts = ["tiny note about bread", "something else entirely"]
    assert answers(built, texts) == answers(tmp_path / "copy.fps", texts)


def test_import_checks_the_pipeline(built, tmp_path):
    """An existing store refuses a stream of another pipeline (exit 2, unchanged); a new path takes
    the stream's pipeline; importing into the same store twice changes nothing."""
    stream = tmp_path / "dump.fpx"
    assert cli("export", built, "-o", stream).code == 0
    other = tmp_path / "other.fps"
    assert cli("create", other, "--shingle", "2").code == 0
    r = run("import", other, stream)
    assert r.code == 2 and "pipeline" in r.err and "new store" in r.err
    assert cli("info", other, "--json").json()["documents"] == 0
    new = tmp_path / "fresh.fps"
    assert cli("import", new, stream).code == 0
    assert cli("info", new, "--json").json()["pipeline_id"] == cli("info", built, "--json").json()["pipeline_id"]
    n = cli("info", new, "--json").json()["documents"]
    r = cli("import", new, stream, "--json")
    assert r.code == 0 and r.json()["created"] is False
    assert cli("info", new, "--json").json()["documents"] == n


def test_piped_import_into_an_existing_store(built, tmp_path):
    """A stream piped into a store that exists is read from its start (the spool of a pipe was
    read from its end: "the stream ends before its header")."""
    piped = run("export", built)
    assert piped.code == 0
    target = tmp_path / "existing.fps"
    assert cli("create", target, "-k", "8").code == 0  # the pipeline of `built`
    r = run("import", target, "-", "--json", stdin=piped.raw)
    assert r.code == 0, r.err
    assert r.json()["created"] is False
    assert cli("info", target, "--json").json()["documents"] == cli("info", built, "--json").json()["documents"]


def test_options_may_follow_the_positionals(built, tmp_path):
    """Options anywhere among a command's arguments, as users type them: ``query STORE -k 9 -``
    was refused ("unrecognized arguments: -") because the optional TEXT was taken as absent
    before the options were read."""
    text = corpus()[0]["text"]
    r = cli("query", built, "-k", "6", "-", "--json", stdin=text.encode())
    assert r.code in (0, 1), r.err
    assert r.json()["matches"] == cli("query", "-k", "6", "--json", built, "-", stdin=text.encode()).json()["matches"]
    assert cli("create", tmp_path / "late-options.fps", "--shingle", "2").code == 0
    assert cli("info", tmp_path / "late-options.fps", "--json").json()["documents"] == 0


def test_errors_name_the_command_lines_flags_and_commands(built, tmp_path):
    """A refusal names the flag or command to use next, not the library's Python arguments."""
    r = cli("query", built, "-k", "9", "-", stdin=b"some text")
    assert r.code == 2 and "--exhaustive" in r.err and "exhaustive=True" not in r.err
    r = cli("info", tmp_path / "nothing-here")
    assert r.code == 2 and "fpstore-admin create STORE" in r.err and "create=True" not in r.err
    with fpstore.open(tmp_path / "busy.fps"):  # this process writes: another writer is refused
        r = run("compact", tmp_path / "busy.fps")
    assert r.code == 2 and "only read" in r.err and "readonly=True" not in r.err


def test_redesign_lets_a_store_answer_the_radius_it_refused(tmp_path):
    """A k=3 store refuses a k=5 query and names the redesign command; after it, the query answers as
    an exhaustive scan does; with another process holding the store, redesign is refused unchanged."""
    store = tmp_path / "small-k.fps"
    assert cli("create", store, "-k", "3").code == 0
    with fpstore.open(store) as s:
        s.add_many([f"d{i}" for i in range(60)], texts=[synthetic(i % 20, 60 + i) for i in range(60)])
    text = synthetic(3, 70).encode()
    r = cli("query", store, "-k", "5", "--json", "-", stdin=text)
    assert r.code == 2 and "fpstore-admin redesign STORE -k 5" in r.err and "store.redesign" not in r.err
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fpstore, sys, time; s = fpstore.open(sys.argv[1], readonly=True); print(len(s), flush=True); time.sleep(60)",
            str(store),
        ],
        stdout=subprocess.PIPE,
        text=True,
        env=env(),
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "60"
        r = cli("redesign", store, "-k", "5")
        assert r.code == 2 and "open in another process; a redesign needs it alone" in r.err, r.err
    finally:
        holder.kill()
        holder.wait()
    assert cli("info", store, "--json").json()["k"] == 3
    r = cli("redesign", store, "-k", "5", "--json")
    assert r.code == 0, r.err
    assert r.json()["design_before"] == "r4" and r.json()["design_after"] == "r6" and r.json()["entries"] == 60
    got = cli("query", store, "-k", "5", "--json", "-", stdin=text)
    want = cli("query", store, "-k", "5", "--exhaustive", "--json", "-", stdin=text)
    assert got.code == want.code == 0 and got.json()["matches"] == want.json()["matches"] != []
    assert "nothing to do" in cli("redesign", store, "-k", "5").out


def test_a_read_only_open_of_nothing_does_not_suggest_create_true(tmp_path):
    """create=True cannot apply to a read-only open: its error says so instead."""
    with pytest.raises(fpstore.errors.NotAStoreError, match="read-only open cannot make one"):
        fpstore.open(tmp_path / "none", readonly=True)


def good_stream(tmp_path: pathlib.Path) -> bytes:
    with fpstore.open(tmp_path / "src.fps") as s:
        s.add_many([f"k{i}" for i in range(20)], texts=[synthetic(i) for i in range(20)])
        s.add_many([b"raw-bytes-key", 12345, "sur\udc80"], texts=[synthetic(30), synthetic(31), synthetic(32)])
        buf = io.BytesIO()
        export_store(s, buf)
    return buf.getvalue()


def reframe(objs: list[object]) -> bytes:
    return zstandard.ZstdCompressor().compress(b"".join(msgpack.packb(o, use_bin_type=True) for o in objs))


def unframe(data: bytes) -> list[object]:
    raw = zstandard.ZstdDecompressor().decompress(data, max_output_size=1 << 24)
    return list(msgpack.Unpacker(io.BytesIO(raw), raw=False, strict_map_key=False))


def test_import_round_trip_of_every_key_type(tmp_path):
    """str, bytes, int and surrogate-holding keys survive export and import (in process)."""
    data = good_stream(tmp_path)
    res = import_stream(io.BytesIO(data), str(tmp_path / "dst.fps"))
    assert res.created and res.records == 23
    with fpstore.open(tmp_path / "dst.fps", readonly=True) as d, fpstore.open(tmp_path / "src.fps", readonly=True) as s:
        assert sorted(map(repr, d)) == sorted(map(repr, s))
        assert d.get(b"raw-bytes-key").fingerprint == s.get(b"raw-bytes-key").fingerprint


def hostile(data: bytes) -> dict[str, bytes]:
    """Damaged and crafted variants of a good stream."""
    objs = unframe(data)
    header, records, trailer = objs[0], objs[1:-1], objs[-1]
    bad_version = dict(header, version=99)
    bad_record = [header, records[0], ["k", -1, None, 0, None], *records[2:], trailer]
    tampered = [header, [records[0][0], records[0][1] ^ 1, *records[0][2:]], *records[1:], trailer]
    return {
        "truncated": data[: len(data) // 2],
        "flipped": data[:40] + bytes([data[40] ^ 0xFF]) + data[41:],
        "not zstd": b"hello, this is not a stream at all",
        "bad magic": reframe([dict(header, magic="other")] + objs[1:]),
        "newer version": reframe([bad_version] + objs[1:]),
        "no trailer": reframe(objs[:-1]),
        "cut record": reframe(objs[:-1])[:-3],
        "bad record": reframe(bad_record),
        "digest mismatch": reframe(tampered),
        "trailing data": data + data,
        "huge object": zstandard.ZstdCompressor().compress(msgpack.packb(header) + b"\xc6\x7f\xff\xff\xff" + b"x" * 100),
        "pipeline id lie": reframe([dict(header, pipeline_id="0000000000000000")] + objs[1:]),
    }


def test_hostile_streams_are_refused_and_leave_nothing(tmp_path):
    """Every damaged or crafted stream raises FormatError; no new store is left behind and an
    existing store is unchanged."""
    data = good_stream(tmp_path)
    existing = tmp_path / "existing.fps"
    import_stream(io.BytesIO(data), str(existing))
    for name, bad in hostile(data).items():
        target = tmp_path / f"new-{name.replace(' ', '-')}.fps"
        with pytest.raises(FormatError):
            import_stream(io.BytesIO(bad), str(target))
        assert not target.exists(), name
        assert not [p for p in tmp_path.iterdir() if "importing" in p.name], name
        with pytest.raises(FormatError):
            import_stream(io.BytesIO(bad), str(existing))
        with fpstore.open(existing, readonly=True) as s:
            assert len(s) == 23, name


@pytest.mark.slow
def test_hostile_stream_on_the_command_line(tmp_path):
    """The command reports a bad stream in one line with exit 2."""
    data = good_stream(tmp_path)
    for name, says in (("truncated", "truncated"), ("no trailer", "truncated"), ("newer version", "upgrade fpstore")):
        f = tmp_path / "bad.fpx"
        f.write_bytes(hostile(data)[name])
        r = run("import", tmp_path / f"x-{name[:3]}.fps", f)
        assert r.code == 2 and r.err.startswith("fpstore-admin: error: ") and r.err.count("\n") == 1
        assert says in r.err


def test_dump_writes_every_document_as_a_table(tmp_path):
    """dump: JSON Lines, CSV and Parquet (to a file and through a pipe) hold one row per document
    with the same columns and values; Store.to_arrow gives the same table; keys of every type."""
    import pyarrow.parquet as pq

    path = tmp_path / "t.fps"
    with fpstore.open(path, k=5) as s:
        s.add("page", text=synthetic(1))
        s.add("copy", text=synthetic(1))
        s.add(42, fingerprint=7, pipeline_id=s.pipeline.id)
        s.add(b"\x00\xff", text="tiny")
        table = s.to_arrow()
    rows = [json.loads(line) for line in cli("dump", path).out.splitlines()]
    assert [r["key"] for r in rows] == ["page", "copy", "42", "hex:00ff"]
    assert [r["key_type"] for r in rows] == ["str", "str", "int", "bytes"]
    assert rows[1]["canonical"] == "page" and rows[2]["fingerprint"] == "0000000000000007" and rows[3]["short"] is True
    assert rows[2]["content_hash"] is None and len(rows[0]["content_hash"]) == 32
    assert table.to_pylist() == rows
    with open(tmp_path / "t.csv", "w") as fh:
        fh.write(cli("dump", path, "--format", "csv").out)
    with open(tmp_path / "t.csv", newline="") as fh:
        assert [r["key"] for r in csv.DictReader(fh)] == [r["key"] for r in rows]
    assert cli("dump", path, "--format", "parquet", "-o", tmp_path / "t.parquet").code == 0
    assert pq.read_table(tmp_path / "t.parquet").to_pylist() == rows
    piped = run("dump", path, "--format", "parquet")
    assert piped.code == 0 and pq.read_table(io.BytesIO(piped.raw)).to_pylist() == rows
    info = cli("info", path, "--json").json()
    assert info["design_detail"]["name"] and info["design_detail"]["k"] >= 3 and info["design_detail"]["tables"]


def test_dump_export_and_import_of_a_store_with_a_sketch(tmp_path):
    """A store with a verification sketch: dump (JSON Lines, CSV, Parquet) adds the ``sketch``
    column (hex, and fixed-size binary in Parquet); export then import through the command gives a
    store with the same rows, sketches included."""
    import pyarrow.parquet as pq

    path = tmp_path / "sk.fps"
    with fpstore.open(path, pipeline=fpstore.Pipeline(sketch_bits=128)) as s:
        s.add_many([f"d{i}" for i in range(6)], texts=[synthetic(i % 3) for i in range(6)])
    rows = [json.loads(line) for line in cli("dump", path).out.splitlines()]
    assert len(rows) == 6 and all(len(r["sketch"]) == 32 for r in rows)
    with open(tmp_path / "t.csv", "w") as fh:
        fh.write(cli("dump", path, "--format", "csv").out)
    with open(tmp_path / "t.csv", newline="") as fh:
        assert [r["sketch"] for r in csv.DictReader(fh)] == [r["sketch"] for r in rows]
    assert cli("dump", path, "--format", "parquet", "-o", tmp_path / "t.parquet").code == 0
    assert [r["sketch"].hex() for r in pq.read_table(tmp_path / "t.parquet").to_pylist()] == [r["sketch"] for r in rows]
    assert cli("export", path, "-o", tmp_path / "sk.fpx").code == 0
    r = cli("import", tmp_path / "copy.fps", tmp_path / "sk.fpx", "--json")
    assert r.code == 0 and r.json()["records"] == 6
    strip = [{c: v for c, v in row.items() if c != "id"} for row in rows]
    assert [
        {c: v for c, v in json.loads(line).items() if c != "id"} for line in cli("dump", tmp_path / "copy.fps").out.splitlines()
    ] == strip


def test_dedup_writes_parquet(built, tmp_path):
    """dedup --format parquet holds the same pairs and clusters as the JSON Lines output."""
    import pyarrow.parquet as pq

    pairs = [json.loads(line) for line in cli("dedup", built).out.splitlines()]
    assert pairs, "the built store has near-duplicate pairs"
    assert cli("dedup", built, "--format", "parquet", "-o", tmp_path / "p.parquet").code == 0
    got = pq.read_table(tmp_path / "p.parquet").to_pylist()
    assert [(r["a"], r["b"], r["distance"]) for r in got] == [(str(p["a"]), str(p["b"]), p["distance"]) for p in pairs]
    clusters = [json.loads(line) for line in cli("dedup", built, "--clusters").out.splitlines()]
    assert cli("dedup", built, "--clusters", "--format", "parquet", "-o", tmp_path / "c.parquet").code == 0
    got = pq.read_table(tmp_path / "c.parquet").to_pylist()
    assert [(r["cluster"], r["key"]) for r in got] == [(c["cluster"], str(k)) for c in clusters for k in c["keys"]]


def test_the_library_logs_only_when_asked(tmp_path, caplog):
    """fpstore logs through "fpstore.*" loggers: nothing reaches stderr unless the program
    configures logging; `fpstore-admin -v` does."""
    import logging

    script = (
        "import fpstore, numpy as np\n"
        f"s = fpstore.open({str(tmp_path / 'a.fps')!r}, k=5, flush_entries=10)\n"
        "s.add_many([str(i) for i in range(50)], fingerprints=np.arange(50, dtype=np.uint64), pipeline_id=s.pipeline.id)\n"
        "s.compact(); s.close()\n"
    )
    quiet = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env())
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr
    with caplog.at_level(logging.INFO, logger="fpstore"), fpstore.open(tmp_path / "b.fps", k=5, flush_entries=10) as s:
        s.add_many([str(i) for i in range(50)], fingerprints=np.arange(50, dtype=np.uint64), pipeline_id=s.pipeline.id)
    assert any(r.name == "fpstore.store.lsm" and "flushed" in r.getMessage() for r in caplog.records)
    r = run("compact", tmp_path / "a.fps", "-v")
    assert r.code == 0 and "fpstore.store.writes: compacted" in r.err
    assert "fpstore." not in run("compact", tmp_path / "a.fps").err


@pytest.mark.parametrize("shell", ["bash", "zsh", "tcsh"])
def test_completion_scripts_name_every_command(shell):
    """completion SHELL prints a script that completes every command (made from the parser)."""
    r = cli("completion", shell)
    assert r.code == 0
    for name in ("create", "ingest", "dump", "dedup", "export", "import", "calibrate", "completion"):
        assert name in r.out
    if shell == "bash":
        ok = subprocess.run(["bash", "-n"], input=r.out, text=True, capture_output=True)
        assert ok.returncode == 0, ok.stderr  # the script parses


def test_stats_png(built, tmp_path):
    """stats --png writes a PNG of the distance histograms, bucket sizes and runs."""
    pytest.importorskip("matplotlib")
    r = cli("stats", built, "--sample", "200", "--png", tmp_path / "stats.png")
    assert r.code == 0 and "wrote" in r.err
    assert (tmp_path / "stats.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_long_commands_announce_their_stages(built, tmp_path):
    """verify and compact say what they are doing on stderr with --progress (or on a terminal),
    and nothing of it in a pipe."""
    shutil.copytree(built, tmp_path / "c.fps")
    r = cli("verify", tmp_path / "c.fps", "--progress")
    assert r.code == 0 and "verify: LMDB's structural check" in r.err and "verify: every document" in r.err
    assert "verify:" not in cli("verify", tmp_path / "c.fps").err
    r = cli("compact", tmp_path / "c.fps", "--progress")
    assert r.code == 0 and "compact: merging" in r.err


def test_query_writes_parquet(built, tmp_path):
    """query --parquet FILE holds the matches the JSON output lists."""
    import pyarrow.parquet as pq

    text = corpus()[0]["text"]
    r = cli("query", built, "-", "--json", "--parquet", tmp_path / "m.parquet", stdin=text.encode())
    assert r.code == 0
    want = [(str(m["key"]), m["distance"], m["fingerprint"]) for m in r.json()["matches"]]
    got = [(row["key"], row["distance"], row["fingerprint"]) for row in pq.read_table(tmp_path / "m.parquet").to_pylist()]
    assert got == want and want


def test_a_verifying_store_on_the_command_line(tmp_path):
    """create --threshold makes a store with a sketch (the default's bits and k); ingest, query and dedup
    follow its threshold, report similarities, and take their own; a fingerprint needs --threshold 0."""
    import numpy as np

    from fpstore.store.sketches import CANDIDATE_K, DEFAULT_SKETCH_BITS

    rng = np.random.default_rng(9)
    base = rng.integers(0, 3000, 300)
    lines = []
    for i in range(12):
        t = base.copy()
        e = 3 * i
        t[rng.integers(0, 300, e)] = rng.integers(0, 3000, e)
        lines.append(json.dumps({"id": f"v{i}", "text": " ".join(f"w{x}" for x in t)}))
    src = tmp_path / "docs.jsonl"
    src.write_text("\n".join(lines) + "\n")
    store = tmp_path / "s"
    r = cli("create", store, "--threshold", "0.9", "--json")
    assert r.code == 0, r.err
    info = json.loads(r.out)
    assert info["threshold"] == 0.9 and info["pipeline"]["sketch_bits"] == DEFAULT_SKETCH_BITS and info["k"] == CANDIDATE_K
    assert cli("ingest", store, src).code == 0
    text = json.loads(lines[0])["text"]
    strict = json.loads(cli("query", store, text, "--json").out)["matches"]
    loose = json.loads(cli("query", store, text, "--json", "--threshold", "0").out)["matches"]
    assert strict and all(m["similarity"] >= 0.9 for m in strict) and len(loose) > len(strict)
    assert "J~" in cli("query", store, text).out
    pairs_strict = cli("dedup", store).out.strip().splitlines()
    pairs_loose = cli("dedup", store, "--threshold", "0").out.strip().splitlines()
    assert 0 < len(pairs_strict) < len(pairs_loose)
    fp = json.loads(cli("query", store, text, "--json").out)["fingerprint"]
    refused = cli("query", store, "--fingerprint", fp)
    assert refused.code == 2 and "threshold" in refused.err
    assert cli("query", store, "--fingerprint", fp, "--threshold", "0").code == 0
    assert cli("redesign", store, "--threshold", "0.5").code == 0
    assert cli("info", store, "--json").json()["threshold"] == 0.5
    assert cli("create", tmp_path / "t", "--threshold", "2").code == 2
    assert cli("create", tmp_path / "plain", "-k", "5").code == 0  # answers within k bits: no sketch
    refused_redesign = cli("redesign", tmp_path / "plain", "--threshold", "0.8")
    assert refused_redesign.code == 2 and "ingest the texts again" in refused_redesign.err
    assert "--threshold needs a store that keeps verification sketches" in refused_redesign.err  # the command line's words
    refused_query = cli("query", tmp_path / "plain", "some text to look for", "--threshold", "0.8")
    assert refused_query.code == 2 and "without -k" in refused_query.err and "threshold=" not in refused_query.err, refused_query.err
    no_sketch = cli("create", tmp_path / "u", "--threshold", "0.8", "--sketch-bits", "0")
    assert no_sketch.code == 2 and "sketch" in no_sketch.err


# -- files of the user's, and closed standard streams -------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        ("dump", "{missing}"),
        ("dump", "{missing}", "--format", "csv"),
        ("dump", "{missing}", "--format", "parquet"),
        ("dedup", "{missing}"),
        ("dedup", "{missing}", "--format", "parquet"),
        ("dedup", "{plain}", "--threshold", "0.5"),
        ("export", "{missing}"),
    ],
)
def test_a_command_that_fails_leaves_the_output_file_as_it_was(tmp_path, command):
    """``-o FILE`` names a file of the user's: a command that fails must not empty it."""
    plain = tmp_path / "plain"
    assert cli("create", plain, "-k", "5").code == 0  # no sketch: --threshold is refused
    notes = tmp_path / "notes.txt"
    notes.write_text("my important notes\n")
    args = [a.format(missing=tmp_path / "no-such-store", plain=plain) for a in command]
    r = cli(*args, "-o", notes)
    assert r.code in (1, 2), r.err
    assert notes.read_text() == "my important notes\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", "plain"]  # no partial file left


def test_a_command_that_succeeds_replaces_the_output_file(built, tmp_path):
    out = tmp_path / "out.jsonl"
    out.write_text("old\n")
    r = cli("dump", built, "-o", out)
    assert r.code == 0, r.err
    lines = out.read_text().splitlines()
    assert lines and lines[0] != "old" and json.loads(lines[0])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.jsonl"]
    refused = cli("dump", built, "-o", tmp_path)
    assert refused.code == 2 and "is a directory" in refused.err


@pytest.mark.parametrize(
    "args",
    [("query", "{store}", "-"), ("import", "{new}"), ("import", "{new}", "-")],
)
def test_closed_stdin_is_a_usage_error(built, tmp_path, args):
    p = subprocess.run(
        admin() + [a.format(store=built, new=tmp_path / "new") for a in args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        env=env(),
        close_fds=True,
        preexec_fn=lambda: os.close(0),
    )
    err = p.stderr.decode()
    assert "Traceback" not in err, err
    assert p.returncode == 2 and "standard input is closed" in err, err


@pytest.mark.parametrize(
    "args", [("dump", "{store}"), ("export", "{store}"), ("dedup", "{store}"), ("dump", "{store}", "--format", "parquet")]
)
def test_closed_stdout_is_a_usage_error(built, args):
    p = subprocess.run(
        admin() + [a.format(store=built) for a in args],
        capture_output=False,
        stderr=subprocess.PIPE,
        env=env(),
        preexec_fn=lambda: os.close(1),
    )
    err = p.stderr.decode()
    assert "Traceback" not in err, err
    assert p.returncode == 2 and "standard output is closed" in err, err


def _stream_with(store: fpstore.Store, records: list[list], path: pathlib.Path) -> pathlib.Path:
    """An export stream of ``store``'s pipeline and design holding ``records`` as given."""
    import hashlib

    header = {
        "magic": "fpstore-export",
        "version": 2,
        "fpstore": fpstore.__version__,
        "created": 0,
        "pipeline": store.pipeline.config,
        "pipeline_id": store.pipeline.id,
        "idf": None,
        "design": store.design.config(),
        "k": store.k,
        "count": len(records),
    }
    packer, digest = msgpack.Packer(use_bin_type=True), hashlib.blake2b(digest_size=16)
    with open(path, "wb") as f, zstandard.ZstdCompressor(write_checksum=True).stream_writer(f) as z:
        z.write(packer.pack(header))
        for r in records:
            b = packer.pack(r)
            digest.update(b)
            z.write(b)
        z.write(packer.pack({"end": True, "count": len(records), "digest": digest.digest(), "checkpoints": 0}))
    return path


def test_import_into_a_store_refuses_a_key_it_cannot_store_before_writing_anything(tmp_path):
    """The stream format takes keys up to 1 MiB, a store 64 KiB: an import into an existing store
    checks every record against the store's limits in its first pass, so it writes all or nothing."""
    path = tmp_path / "s"
    with fpstore.open(path, k=5) as s:
        s.add_many(["old"], fingerprints=[9], pipeline_id=s.pipeline.id)
        long_key = "L" * (fpstore.limits.MAX_KEY_BYTES + 1)
        records = [[f"g{i}", 1000 + i, None, 0, None] for i in range(30)] + [[long_key, 5, None, 0, None]]
        stream = _stream_with(s, records, tmp_path / "x.exp")
        canon = _stream_with(s, [["a", 1, None, 0, None]] * 20 + [["b", 2, None, 0, long_key]], tmp_path / "c.exp")
    for src, where in ((stream, "record 31's key"), (canon, "record 21's canonical key")):
        r = cli("import", path, src, "--batch-size", "10")
        with fpstore.open(path, k=5) as s:
            assert len(s) == 1 and s.checkpoints() == {}
        assert r.code == 2 and where in r.err and "65,536" in r.err and "nothing was imported" in r.err, r.err


def test_a_stream_exported_at_a_smaller_k_imports_into_a_new_store(tmp_path):
    with fpstore.open(tmp_path / "s", k=5) as s:
        s.add_many(["a", "b"], fingerprints=[1, 3], pipeline_id=s.pipeline.id)
        design_k = s.design.k
    with fpstore.open(tmp_path / "s", k=design_k - 1) as s, open(tmp_path / "s.exp", "wb") as fh:
        export_store(s, fh)
    r = cli("import", tmp_path / "t", tmp_path / "s.exp", "--json")
    assert r.code == 0, r.err
    with fpstore.open(tmp_path / "t", k=5) as t:
        assert len(t) == 2 and t.k == design_k
        assert [m.key for m in t.query(fingerprint=1, pipeline_id=t.pipeline.id, k=1)] == ["a", "b"]


def test_fingerprint_option_takes_hex_digits_only(built):
    for bad in ("0x0x1", "1_0", "g1", "1" * 17, "", "0x", " 1"):
        r = cli("query", built, "--fingerprint", bad)
        assert r.code == 2 and "hex digits" in r.err, (bad, r.err)
    for good in ("0x00ff", "0XFF", "ff", "F" * 16):
        r = cli("query", built, "--fingerprint", good)
        assert r.code in (0, 1) and "matches within" in r.out, r.err  # exit 1: no match


def test_command_summaries_are_whole_sentences():
    """A summary is its docstring's first paragraph: dump's was cut at its first line's end."""
    parser = build_parser()
    (sub,) = [a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"]
    for action in sub._choices_actions:
        assert action.help.count("(") == action.help.count(")"), (action.dest, action.help)


def test_output_to_a_link_a_device_or_a_file_of_given_permissions(built, tmp_path):
    """-o replaces a regular file (a symlink's target) on success, keeping its permissions; a
    device or a FIFO is written in place, never replaced by a regular file."""
    target = tmp_path / "target.jsonl"
    target.write_text("old\n")
    os.chmod(target, 0o640)
    link = tmp_path / "link.jsonl"
    link.symlink_to(target)
    assert cli("dump", built, "-o", link).code == 0
    assert link.is_symlink() and json.loads(target.read_text().splitlines()[0])
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o640
    assert cli("dump", built, "-o", "/dev/null").code == 0
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    reader = subprocess.Popen(["cat", str(fifo)], stdout=subprocess.PIPE)
    assert cli("dump", built, "-o", fifo).code == 0
    got = reader.communicate(timeout=60)[0]
    assert stat.S_ISFIFO(os.stat(fifo).st_mode) and got.splitlines() == target.read_bytes().splitlines()
    new = tmp_path / "new.jsonl"
    assert cli("dump", built, "-o", new).code == 0
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(os.stat(new).st_mode) == 0o666 & ~umask
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo", "link.jsonl", "new.jsonl", "target.jsonl"]


# -- a default store, which verifies -----------------------------------------------------------------


def _default_store_with_texts(tmp_path):
    src = write_jsonl(tmp_path / "c.jsonl", corpus())
    store = tmp_path / "v.fps"
    assert cli("ingest", store, src).code == 0
    return store


def test_a_fingerprint_query_of_a_verifying_store_says_how_to_ask(tmp_path):
    """A default store verifies at 0.8, and a bare --fingerprint carries no sketch: the usage error
    names the store's threshold and the two ways to ask (the text, or --threshold 0); the summary
    line names the rule. It spoke of a "threshold=" the user never gave."""
    store = _default_store_with_texts(tmp_path)
    text = corpus()[0]["text"]
    fp = json.loads(cli("query", store, text, "--json").out)["fingerprint"]
    refused = cli("query", store, "--fingerprint", fp)
    assert refused.code == 2
    assert "threshold 0.8" in refused.err and "--threshold 0" in refused.err and "TEXT" in refused.err, refused.err
    loose = cli("query", store, "--fingerprint", fp, "--threshold", "0")
    assert loose.code == 0 and "within k=7" in loose.out and "similarity" not in loose.out.splitlines()[0]
    strict = cli("query", store, text)
    assert strict.code == 0 and "within k=7 and of estimated similarity >= 0.8" in strict.out


def test_a_default_stores_stream_imports_into_a_store_without_a_sketch(tmp_path):
    """The stream of a default store (Pipeline(), 512-bit sketches) imports into a store made with
    -k 5 (Pipeline(sketch_bits=0)): the same fingerprints, the sketches dropped, as add_many takes
    them. It was refused as another pipeline."""
    store = _default_store_with_texts(tmp_path)
    stream = tmp_path / "v.fpx"
    assert cli("export", store, "-o", stream).code == 0
    plain = tmp_path / "plain.fps"
    assert cli("create", plain, "-k", "5").code == 0
    r = cli("import", plain, stream, "--json")
    assert r.code == 0, r.err
    assert r.json()["pipeline_id"] == fpstore.Pipeline(sketch_bits=0).id  # the store's, not the stream's
    with fpstore.open(store, readonly=True) as a, fpstore.open(plain, readonly=True) as b:
        assert b.pipeline == fpstore.Pipeline(sketch_bits=0) and len(b) == len(a)
        assert sorted((d.key, d.fingerprint) for d in b.documents()) == sorted((d.key, d.fingerprint) for d in a.documents())
    other = tmp_path / "other.fps"
    assert cli("create", other, "-k", "5", "--shingle", "2").code == 0
    refused = cli("import", other, stream)  # another pipeline still is refused, naming what differs
    assert refused.code == 2 and "shingle: store has 2, given 3" in refused.err and "sketch" not in refused.err, refused.err
    assert cli("info", other, "--json").json()["documents"] == 0


def test_demo_on_an_existing_store_clusters_at_the_radius_it_names(tmp_path):
    """``demo --store EXISTING -k 3`` printed "candidates within k=3" over clusters made at the
    store's own radius, 7."""
    path = tmp_path / "demo.fps"
    assert cli("demo", "--store", path).code == 0
    r = cli("demo", "--store", path, "-k", "3")
    assert r.code == 0, r.err
    n = int(re.search(r"(\d+) near-duplicate clusters of estimated similarity >= 0.8 \(candidates within k=3\)", r.out).group(1))
    with fpstore.open(path, readonly=True) as store:  # on this sample the two radii differ: 18 clusters against 15
        assert n == len(store.clusters(3))
