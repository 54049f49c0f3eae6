"""Edge cases of ingest and HTML extraction: hostile lines, records, names and markup.

Each one used to block an ingest (a traceback, or a stop that every rerun hit again) or to take
time far beyond the input's size; see RELIABILITY.md rule 11.
"""

from __future__ import annotations

import json
import pathlib

import pytest

import fpstore
from fpstore.ingest import Item, JsonlSource, Note, Problem, WarcSource, ingest
from tests.test_cli import run
from tools import make_test_warc as mtw

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


def line(key: str, i: int) -> bytes:
    return json.dumps({"id": key, "text": text(i)}).encode() + b"\n"


@pytest.fixture
def store(tmp_path):
    with fpstore.open(tmp_path / "store") as s:
        yield s


# -- 11: JSON nested deeper than the parser's recursion ---------------------------------------------


DEEP = b"[" * 100_000 + b"\n"
DEEP_IN_OBJECT = b'{"id": "deep", "text": "x", "meta": ' + b"[" * 100_000 + b"]" * 100_000 + b"}\n"


def test_jsonl_deeply_nested_line_is_a_malformed_problem(tmp_path):
    """A line nested deeper than the JSON parser recurses is a 'malformed' problem at its line, like
    any bad JSON; the lines after it are read."""
    p = tmp_path / "deep.jsonl"
    p.write_bytes(line("a", 1) + DEEP + DEEP_IN_OBJECT + line("b", 2))
    evs = events(JsonlSource(str(p)))
    probs = [e for e in evs if isinstance(e, Problem)]
    assert [(e.kind, e.where) for e in probs] == [("malformed", f"{p}:2"), ("malformed", f"{p}:3")]
    assert "nested too deeply" in probs[0].message
    assert probs[1].pos == {**probs[1].pos, "line": 3}
    assert [it.key for it in items(evs)] == ["a", "b"]


def test_ingest_skips_a_deeply_nested_line_and_moves_the_checkpoint_past_it(tmp_path, store):
    """on_error='skip' stores the good lines and checkpoints past the deep line (a rerun has
    nothing to report); on_error='stop' stops before it with the line named."""
    p = tmp_path / "deep.jsonl"
    p.write_bytes(line("a", 1) + DEEP + line("b", 2))
    res = ingest(store, [JsonlSource(str(p))])
    assert res.problems == 1 and sorted(store) == ["a", "b"]
    assert store.checkpoint(JsonlSource(str(p)).name)["line"] == 3
    assert ingest(store, [JsonlSource(str(p))]).problems == 0
    res = ingest(store, [JsonlSource(str(p))], restart=True, on_error="stop")
    assert res.stopped_at is not None and res.stopped_at.where == f"{p}:2" and res.stopped_at.kind == "malformed"


def test_cli_ingest_deeply_nested_line_skips_with_exit_1_and_no_traceback(tmp_path):
    """fpstore-admin ingest reports the deep line as malformed (exit 1: input skipped), stores the
    rest, and a rerun has nothing left to report (exit 0)."""
    p = tmp_path / "deep.jsonl"
    p.write_bytes(line("a", 1) + DEEP + line("b", 2))
    store = tmp_path / "s.fps"
    r = run("ingest", store, p)
    assert r.code == 1 and f"{p}:2: malformed JSON" in r.err
    assert run("ingest", store, p).code == 0
    with fpstore.open(store, readonly=True) as s:
        assert sorted(s) == ["a", "b"]
    r = run("ingest", tmp_path / "t.fps", p, "--on-error", "stop")
    assert r.code == 2 and f"stopped at {p}:2" in r.err


# -- 12: a declared charset that names a codec, not a text encoding ---------------------------------


#: Declared charsets Python can look up but that are not character sets: bytes-to-bytes codecs
#: (rot13, base64, zlib) and text codecs that are not charsets (undefined fails on every input,
#: idna and punycode refuse errors="replace", the escape codecs are Python's own syntax).
NOT_CHARSETS = ["rot13", "base64", "zlib_codec", "hex", "undefined", "idna", "punycode", "unicode_escape", "raw_unicode_escape", "utf-8\x00"]


def test_warc_non_text_codec_charset_falls_back_like_an_unknown_one(tmp_path):
    """A response whose charset names a codec that is not a text encoding is decoded exactly as one
    with an unknown charset (UTF-8, invalid bytes replaced); the records after it are read."""
    body = mtw.page("Crème", mtw.LATIN1, "nav")  # UTF-8 bytes with non-ASCII letters
    data = mtw.response("https://unknown.example/", body, "text/html; charset=no-such-charset")
    for cs in NOT_CHARSETS:
        data += mtw.response(f"https://{cs.strip(chr(0))}.example/", body, f"text/html; charset={cs}")
    data += mtw.response("https://latin1.example/", body.decode().encode("iso-8859-1"), "text/html; charset=iso-8859-1")
    path = tmp_path / "cs.warc"
    path.write_bytes(data)
    evs = events(WarcSource(str(path)))
    assert not kinds(evs, Problem) and not kinds(evs, Note)
    got = [(it.key, it.text) for it in items(evs)]
    assert [k for k, _ in got] == ["https://unknown.example/"] + [f"https://{cs.strip(chr(0))}.example/" for cs in NOT_CHARSETS] + ["https://latin1.example/"]
    assert all(t == body.decode() for _, t in got)


def test_cli_ingest_warc_with_rot13_charset_stores_every_record(tmp_path):
    """fpstore-admin ingest of a WARC with charset=rot13, base64 and zlib_codec pages exits 0,
    without a traceback, and stores each page."""
    data = b"".join(mtw.response(f"https://{cs}.example/", mtw.page("t", mtw.ARTICLE_A, "nav"), f"text/html; charset={cs}")
                    for cs in ("rot13", "base64", "zlib_codec"))
    path = tmp_path / "cs.warc"
    path.write_bytes(data)
    r = run("ingest", tmp_path / "s.fps", path)
    assert r.code == 0, r.err
    with fpstore.open(tmp_path / "s.fps", readonly=True) as s:
        assert len(s) == 3
