"""Ingest sources and the checkpointed driver, in process: positions, resuming, bad input, WARC."""

from __future__ import annotations

import gzip
import json
import os
import pathlib
import threading

import pytest

from fpstore.errors import InputError
from fpstore.admin.ingest import (
    DirectorySource,
    Item,
    JsonlSource,
    Note,
    Problem,
    WarcSource,
    detect_kind,
    ingest,
    make_source,
)
from tools import make_test_warc as mtw

DATA = pathlib.Path(__file__).parent / "data"
WORDS = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa".split()


def text(i: int, n: int = 40) -> str:
    """A deterministic text of n words, different for each i."""
    return " ".join(WORDS[(i * 7 + j * (i % 5 + 1)) % len(WORDS)] + str((i + j) % 11) for j in range(n))


def events(src, pos=None):
    return list(src.items(pos))


def items(evs):
    return [e for e in evs if isinstance(e, Item)]


def kinds(evs, cls):
    return [e.kind for e in evs if isinstance(e, cls)]


# -- JSON Lines ------------------------------------------------------------------------------------


def write_jsonl(path: pathlib.Path, lines: list[bytes]) -> pathlib.Path:
    path.write_bytes(b"".join(lines))
    return path


def test_jsonl_positions_resume_exactly_after_each_line(tmp_path):
    """Resuming from any item's position yields exactly the items after it."""
    p = write_jsonl(tmp_path / "a.jsonl", [json.dumps({"id": f"k{i}", "text": text(i)}).encode() + b"\n" for i in range(30)])
    all_items = items(events(JsonlSource(str(p))))
    assert [it.key for it in all_items] == [f"k{i}" for i in range(30)]
    for cut in (0, 1, 17, 29):
        rest = items(events(JsonlSource(str(p)), all_items[cut].pos))
        assert [it.key for it in rest] == [f"k{i}" for i in range(cut + 1, 30)]


def test_jsonl_bad_lines_are_reported_with_line_numbers(tmp_path):
    """Malformed JSON, non-objects, missing and mistyped fields are problems at their line; invalid
    UTF-8 is a note and the text is kept with U+FFFD; blank lines are ignored; int keys become str."""
    lines = [
        b'{"id": "a", "text": "fine"}\n',
        b"\n",
        b'{"id": "b", "text": \n',
        b'["not", "an", "object"]\n',
        b'{"id": "c"}\n',
        b'{"id": ["x"], "text": "t"}\n',
        b'{"id": "d", "text": 5}\n',
        b'{"id": "e", "text": "caf\xff\xfe"}\n',
        b'{"id": 17, "text": "int key"}\n',
    ]
    evs = events(JsonlSource(str(write_jsonl(tmp_path / "b.jsonl", lines))))
    probs = [(e.where.rsplit(":", 1)[1], e.kind) for e in evs if isinstance(e, Problem)]
    assert probs == [("3", "malformed"), ("4", "malformed"), ("5", "missing-field"), ("6", "bad-field"), ("7", "bad-field")]
    assert "missing field 'text'" in str([e for e in evs if isinstance(e, Problem)][2])
    assert kinds(evs, Note) == ["invalid-utf8"]
    got = {it.key: it.text for it in items(evs)}
    assert got == {"a": "fine", "e": "caf\ufffd\ufffd", "17": "int key"}


def test_jsonl_incomplete_last_line_is_left_for_the_next_run(tmp_path):
    """A last line without newline that does not parse is 'truncated' with no position (not skipped
    for good); once the writer finishes it, a resumed read picks it up."""
    p = tmp_path / "c.jsonl"
    p.write_bytes(b'{"id": "a", "text": "one"}\n{"id": "b", "te')
    evs = events(JsonlSource(str(p)))
    assert [it.key for it in items(evs)] == ["a"]
    (prob,) = [e for e in evs if isinstance(e, Problem)]
    assert prob.kind == "truncated" and prob.pos is None and prob.where.endswith(":2")
    pos = items(evs)[0].pos
    p.write_bytes(b'{"id": "a", "text": "one"}\n{"id": "b", "text": "two"}\n')
    assert [it.key for it in items(events(JsonlSource(str(p)), pos))] == ["b"]


def test_jsonl_changed_file_is_refused_on_resume(tmp_path):
    """A file whose first bytes changed, or that shrank below the checkpoint, is refused."""
    p = write_jsonl(tmp_path / "d.jsonl", [json.dumps({"id": f"k{i}", "text": "x"}).encode() + b"\n" for i in range(5)])
    pos = items(events(JsonlSource(str(p))))[2].pos
    p.write_bytes(p.read_bytes().replace(b"k0", b"z0"))
    with pytest.raises(InputError, match="changed since its checkpoint.*--restart"):
        events(JsonlSource(str(p)), pos)
    p.write_bytes(b'{"id": "k0", "text": "x"}\n')
    with pytest.raises(InputError, match="shorter"):
        events(JsonlSource(str(p)), pos)


def test_jsonl_overlong_line_is_skipped_without_reading_it_whole(tmp_path):
    """A line above max_bytes is a too-large problem; the lines after it are read normally."""
    p = write_jsonl(tmp_path / "e.jsonl", [
        json.dumps({"id": "big", "text": "x" * 5000}).encode() + b"\n",
        b'{"id": "small", "text": "y"}\n',
    ])
    evs = events(JsonlSource(str(p), max_bytes=1000))
    assert kinds(evs, Problem) == ["too-large"]
    assert [it.key for it in items(evs)] == ["small"]


# -- directories -------------------------------------------------------------------------------------


def test_directory_walk_order_keys_binary_and_hidden_files(tmp_path):
    """Keys are relative paths in component order; binary files are skipped with a note; hidden
    files and directories are left out; invalid UTF-8 is replaced and noted; resume skips done files."""
    root = tmp_path / "docs"
    (root / "a").mkdir(parents=True)
    (root / ".git").mkdir()
    (root / "a.txt").write_text(text(1))
    (root / "a" / "z.txt").write_text(text(2))
    (root / "b.html").write_text(f"<p>{text(3)}</p>")
    (root / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00")
    (root / "latin.txt").write_bytes("naïve café".encode("latin-1"))
    (root / ".hidden").write_text("secret")
    (root / ".git" / "config").write_text("x")
    evs = events(DirectorySource(str(root)))
    assert [it.key for it in items(evs)] == ["a/z.txt", "a.txt", "b.html", "latin.txt"]
    assert sorted(kinds(evs, Note)) == ["binary", "invalid-utf8"]
    assert items(evs)[3].text == "na\ufffdve caf\ufffd"
    rest = items(events(DirectorySource(str(root)), items(evs)[1].pos))
    assert [it.key for it in rest] == ["b.html", "latin.txt"]


def test_detect_kind_and_make_source(tmp_path):
    """Types come from what a path is and its name; unknown names ask for --format."""
    (tmp_path / "x.jsonl").write_text("")
    (tmp_path / "x.txt").write_text("")
    assert detect_kind(str(tmp_path)) == "dir"
    assert detect_kind(str(tmp_path / "x.jsonl")) == "jsonl"
    assert detect_kind("crawl.warc.gz") == "warc"
    with pytest.raises(InputError, match="--format"):
        detect_kind(str(tmp_path / "x.txt"))
    with pytest.raises(InputError, match="no such file"):
        make_source(str(tmp_path / "missing.jsonl"))
    assert isinstance(make_source(str(tmp_path / "x.txt"), "jsonl"), JsonlSource)


# -- WARC -----------------------------------------------------------------------------------------------


def test_committed_warc_is_what_the_tool_makes():
    """tests/data/sample.warc.gz is byte for byte the output of tools/make_test_warc.py."""
    assert (DATA / "sample.warc.gz").read_bytes() == mtw.build(compress=True)


def test_warc_reads_text_responses_and_skips_the_rest():
    """Every text response is read (gzip and chunked payloads decoded, the declared charset used,
    invalid UTF-8 replaced); other record types and the PNG are notes; no problems."""
    evs = events(WarcSource(str(DATA / "sample.warc.gz")))
    got = {it.key: it.text for it in items(evs)}
    assert list(got) == mtw.TEXT_URIS
    assert not kinds(evs, Problem)
    assert sorted(kinds(evs, Note)) == ["invalid-utf8", "not-response", "not-response", "not-response", "not-response", "not-text"]
    assert got["https://gzip.example/sourdough"].startswith("<!DOCTYPE html>") and "Sourdough bread" in got["https://gzip.example/sourdough"]
    assert got["https://chunked.example/keeper"] == mtw.page("The keeper", mtw.ARTICLE_A, "Start page - Latest stories - Old stories - Contact us - Subscribe").decode()
    assert "Crème brûlée" in got["https://latin1.example/creme"]
    assert "Sour\ufffd\ufffddough" in got["https://broken.example/utf8"]


@pytest.mark.parametrize("form", ["per-record-gzip", "plain", "one-gzip-member"])
def test_warc_resume_from_every_position(tmp_path, form):
    """From any item's position the rest is read exactly once, by seeking or by counting records."""
    raw = {"per-record-gzip": mtw.build(True), "plain": mtw.build(False),
           "one-gzip-member": gzip.compress(mtw.build(False), mtime=0)}[form]
    path = tmp_path / ("x.warc" if form == "plain" else "x.warc.gz")
    path.write_bytes(raw)
    evs = events(WarcSource(str(path)))
    its = items(evs)
    for cut in range(len(its)):
        rest = events(WarcSource(str(path)), its[cut].pos)
        assert [it.key for it in items(rest)] == [it.key for it in its[cut + 1:]]
        assert not kinds(rest, Problem)
    assert events(WarcSource(str(path)), evs[-1].pos) == []  # all done: nothing, no false alarm


def test_warc_changed_file_is_refused_on_resume(tmp_path):
    """A checkpoint whose record id is not found where it says is refused with --restart advice."""
    path = tmp_path / "x.warc.gz"
    path.write_bytes(mtw.build(True))
    pos = dict(items(events(WarcSource(str(path))))[3].pos, id="<urn:uuid:something-else>")
    with pytest.raises(InputError, match="changed since its checkpoint"):
        events(WarcSource(str(path)), pos)


@pytest.mark.parametrize("compress", [True, False])
def test_truncated_warc_is_reported_and_ends_the_source(tmp_path, compress):
    """Cut anywhere (except in the few trailing bytes that hold no content), a WARC file yields a
    'truncated' problem without a position, and the items before it are a prefix of the whole."""
    whole = mtw.build(compress)
    ends, pos = [], 0
    for rec in mtw.records():
        pos += len(gzip.compress(rec, compresslevel=9, mtime=0)) if compress else len(rec)
        ends.append(pos)
    full = [it.key for it in items(events(WarcSource(str(DATA / "sample.warc.gz"))))]
    harmless = 12 if compress else 4  # a gzip trailer, or the record's closing CRLF CRLF
    path = tmp_path / ("t.warc.gz" if compress else "t.warc")
    for cut in range(1, len(whole), 13):
        if any(0 <= e - cut <= harmless for e in ends):
            continue
        path.write_bytes(whole[:cut])
        evs = events(WarcSource(str(path)))
        probs = [e for e in evs if isinstance(e, Problem)]
        assert [p.kind for p in probs] == ["truncated"], cut
        assert probs[0].pos is None and "truncated" in str(probs[0]) or "no whole WARC record" in str(probs[0])
        keys = [it.key for it in items(evs)]
        assert keys == full[: len(keys)]


def test_warc_payload_bomb_is_bounded(tmp_path):
    """A gzip payload that inflates past max_bytes is skipped as too large, not inflated whole."""
    bomb = gzip.compress(b"<p>" + b"a " * 2_000_000, mtime=0)
    data = mtw.response("https://bomb.example/", bomb, extra=[("Content-Encoding", "gzip")])
    data += mtw.response("https://ok.example/", mtw.page("ok", mtw.PLAIN, "nav"))
    path = tmp_path / "bomb.warc"
    path.write_bytes(data)
    evs = events(WarcSource(str(path), max_bytes=100_000))
    assert kinds(evs, Note) == ["too-large"]
    assert [it.key for it in items(evs)] == ["https://ok.example/"]


# -- the driver ---------------------------------------------------------------------------------------


def test_ingest_stop_commits_before_the_bad_line_and_resumes_there(tmp_path, store):
    """on_error='stop' stores the lines before the bad one with a checkpoint just before it; after
    the line is fixed, a rerun resumes there and every document is stored once."""
    lines = [json.dumps({"id": f"k{i}", "text": text(i)}).encode() + b"\n" for i in range(10)]
    lines[6] = b'{"id": "k6", "text": oops}\n'
    p = write_jsonl(tmp_path / "s.jsonl", lines)
    src = JsonlSource(str(p))
    res = ingest(store, [src], batch_size=4, on_error="stop")
    assert res.stopped_at is not None and res.stopped_at.where.endswith(":7")
    assert sorted(store) == [f"k{i}" for i in range(6)]
    assert store.checkpoint(src.name)["line"] == 6
    lines[6] = json.dumps({"id": "k6", "text": text(6)}).encode() + b"\n"
    write_jsonl(p, lines)
    res = ingest(store, [JsonlSource(str(p))], batch_size=4)
    assert res.added == 4 and res.sources[0].resumed_from == "line 6" and res.sources[0].done
    assert sorted(store) == sorted(f"k{i}" for i in range(10))


def test_ingest_skip_advances_past_bad_lines_even_at_the_end(tmp_path, store):
    """Skipped lines move the checkpoint (a rerun does not report them again), even when no
    document follows them: the last checkpoint is committed with an empty batch."""
    lines = [json.dumps({"id": "a", "text": text(1)}).encode() + b"\n", b"not json\n", b"{}\n"]
    p = write_jsonl(tmp_path / "k.jsonl", lines)
    seen = []
    res = ingest(store, [JsonlSource(str(p))], report=seen.append)
    assert res.problems == 2 and [e.kind for e in seen] == ["malformed", "missing-field"]
    assert store.checkpoint(JsonlSource(str(p)).name)["line"] == 3
    again = ingest(store, [JsonlSource(str(p))])
    assert again.added == 0 and again.problems == 0


def test_ingest_stop_event_ends_after_the_current_batch(tmp_path, store):
    """Setting the stop event commits what was read and returns; a rerun completes the source and
    every key is stored exactly once."""
    p = write_jsonl(tmp_path / "i.jsonl", [json.dumps({"id": f"k{i}", "text": text(i)}).encode() + b"\n" for i in range(200)])
    stop = threading.Event()
    calls = []

    def progress(done, total):
        calls.append(done)
        if len(store) >= 50:
            stop.set()

    res = ingest(store, [JsonlSource(str(p))], batch_size=25, stop=stop, progress=progress)
    assert res.interrupted and 50 <= len(store) < 200
    first = len(store)
    res = ingest(store, [JsonlSource(str(p))], batch_size=25)
    assert res.added == 200 - first and len(store) == 200
    assert sorted(store) == sorted(f"k{i}" for i in range(200))


def test_truncated_warc_then_completed_file_resumes(tmp_path, store):
    """A crawler's WARC read while still being written: the truncated record is reported and not
    skipped; once the file is complete a rerun stores the rest, each record once."""
    whole = mtw.build(True)
    path = tmp_path / "live.warc.gz"
    path.write_bytes(whole[: len(whole) // 2])
    res = ingest(store, [WarcSource(str(path))], batch_size=3)
    assert res.sources[0].problems == {"truncated": 1} and not res.sources[0].done
    half = len(store)
    assert 0 < half < len(mtw.TEXT_URIS)
    path.write_bytes(whole)
    res = ingest(store, [WarcSource(str(path))], batch_size=3)
    assert res.problems == 0 and res.added == len(mtw.TEXT_URIS) - half
    assert sorted(store) == sorted(mtw.TEXT_URIS)


def test_restart_reads_from_the_start(tmp_path, store):
    """restart=True ignores the checkpoint; keys are replaced, not duplicated."""
    p = write_jsonl(tmp_path / "r.jsonl", [json.dumps({"id": f"k{i}", "text": text(i)}).encode() + b"\n" for i in range(5)])
    ingest(store, [JsonlSource(str(p))])
    res = ingest(store, [JsonlSource(str(p))], restart=True)
    assert res.added == 5 and len(store) == 5


def test_sample_source_is_resumable(store):
    """The sample corpus ingests with a checkpoint like any file."""
    from fpstore.admin.ingest import SampleSource

    src = SampleSource()
    if not src._docs:
        pytest.skip("no sample text on this machine")
    res = ingest(store, [src], batch_size=50)
    assert res.added == len(src._docs) == len(store)
    assert ingest(store, [SampleSource()]).added == 0


def test_bad_arguments(store, tmp_path):
    """on_error and batch_size are checked; a malformed checkpoint asks for --restart."""
    p = write_jsonl(tmp_path / "z.jsonl", [b'{"id": "a", "text": "b"}\n'])
    with pytest.raises(InputError):
        ingest(store, [JsonlSource(str(p))], on_error="ignore")
    with pytest.raises(InputError):
        ingest(store, [JsonlSource(str(p))], batch_size=0)
    store.add_many([], texts=[], checkpoint=(JsonlSource(str(p)).name, {"line": "x"}))
    with pytest.raises(InputError, match="--restart"):
        ingest(store, [JsonlSource(str(p))])
    assert os.path.exists(p)


def test_a_source_that_yields_no_document_keeps_its_checkpoint(tmp_path, store):
    """Every line refused for a missing field (the wrong --key-field/--text-field): nothing is
    committed for the source, so a rerun with the right fields reads it from the start (before,
    the checkpoint moved past every line and the rerun added nothing)."""
    p = write_jsonl(tmp_path / "f.jsonl", [json.dumps({"url": f"u{i}", "body": text(i)}).encode() + b"\n" for i in range(5)])
    res = ingest(store, [JsonlSource(str(p))])
    assert res.added == 0 and res.sources[0].problems == {"missing-field": 5}
    assert store.checkpoint(JsonlSource(str(p)).name) is None
    res = ingest(store, [JsonlSource(str(p), key_field="url", text_field="body")])
    assert res.added == 5 and sorted(store) == [f"u{i}" for i in range(5)]


def test_a_rerun_with_other_options_is_refused_and_names_restart(tmp_path, store):
    """A source's reading options are recorded with its checkpoint; resuming with others would mix
    two readings of one file, so it is refused until --restart."""
    p = write_jsonl(tmp_path / "o.jsonl", [json.dumps({"id": f"k{i}", "text": text(i), "alt": text(i + 50)}).encode() + b"\n" for i in range(4)])
    assert ingest(store, [JsonlSource(str(p))]).added == 4
    with pytest.raises(InputError, match="--restart") as info:
        ingest(store, [JsonlSource(str(p), text_field="alt")])
    assert "text_field" in str(info.value)
    assert ingest(store, [JsonlSource(str(p))]).added == 0  # the same options resume as before
    res = ingest(store, [JsonlSource(str(p), text_field="alt")], restart=True)
    assert res.added == 4 and store.get("k0").fingerprint == store.pipeline.fingerprint(text(50))


def test_directory_include_and_exclude_globs(tmp_path):
    """--include keeps only matching relative paths, --exclude drops matching ones."""
    root = tmp_path / "site"
    (root / "static").mkdir(parents=True)
    for rel in ("index.html", "about.html", "static/site.css", "static/app.js", "notes.txt"):
        (root / rel).write_text(text(len(rel)))
    keys = lambda src: sorted(it.key for it in items(events(src)))  # noqa: E731
    assert keys(DirectorySource(str(root), exclude=["*.css", "*.js"])) == ["about.html", "index.html", "notes.txt"]
    assert keys(DirectorySource(str(root), include=["*.html"])) == ["about.html", "index.html"]
    assert keys(DirectorySource(str(root), include=["*.html", "*.txt"], exclude=["about.*"])) == ["index.html", "notes.txt"]


def test_cli_rerun_after_wrong_fields_reads_the_source(tmp_path):
    """The reported case: ingest with the wrong field names exits 1 and says the checkpoint did not
    move; the rerun with the right ones stores every line; a third run with other fields is
    refused (exit 2) naming --restart."""
    from tests.test_cli import cli

    p = write_jsonl(tmp_path / "small.jsonl", [json.dumps({"url": f"u{i}", "body": text(i)}).encode() + b"\n" for i in range(30)])
    store = tmp_path / "j.fps"
    r = cli("ingest", store, p, "--no-progress")
    assert r.code == 1 and "checkpoint did not move" in r.err
    r = cli("ingest", store, p, "--key-field", "url", "--text-field", "body", "--no-progress")
    assert r.code == 0 and "30 documents added (from the start)" in r.out
    r = cli("ingest", store, p, "--key-field", "url", "--no-progress")
    assert r.code == 2 and "--restart" in r.err


def test_cli_notes_are_summarised_per_kind(tmp_path):
    """A directory of images: three notes of the kind are shown, the rest counted in the summary."""
    from tests.test_cli import cli

    root = tmp_path / "d"
    root.mkdir()
    (root / "page.txt").write_text(text(1))
    for i in range(10):
        (root / f"img{i}.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00binary")
    r = cli("ingest", tmp_path / "d.fps", root, "--no-progress")
    assert r.code == 0, r.err
    assert r.err.count("note:") == 3 and "counted, not shown" in r.err
    assert "binary 10" in r.out
    r = cli("ingest", tmp_path / "e.fps", root, "--exclude", "*.png", "--no-progress")
    assert r.code == 0 and "note:" not in r.err and "1 documents added" in r.out
