"""Edge cases of ingest and HTML extraction: hostile lines, records, names and markup.

Each one used to block an ingest (a traceback, or a stop that every rerun hit again) or to take
time far beyond the input's size; see docs/reliability.md, "Inputs at the edges".
"""

from __future__ import annotations

import gzip
import json
import os
import pathlib

import pytest

import fpstore
from fpstore.admin.ingest import DirectorySource, JsonlSource, Note, Problem, WarcSource, ingest
from tests.test_cli import run
from tests.test_ingest import events, items, kinds, text
from tools import make_test_warc as mtw

def line(key: str, i: int) -> bytes:
    return json.dumps({"id": key, "text": text(i)}).encode() + b"\n"


# -- 11: JSON nested deeper than the parser's recursion ---------------------------------------------


DEEP = b"[" * 100_000 + b"\n"
DEEP_IN_OBJECT = b'{"id": "deep", "text": "x", "meta": ' + b"[" * 100_000 + b"]" * 100_000 + b"}\n"


def test_jsonl_deeply_nested_line_is_a_malformed_problem(tmp_path):
    """A line nested deeper than the JSON parser recurses is a 'malformed' problem at its line; the next lines are read."""
    p = tmp_path / "deep.jsonl"
    p.write_bytes(line("a", 1) + DEEP + DEEP_IN_OBJECT + line("b", 2))
    evs = events(JsonlSource(str(p)))
    probs = [e for e in evs if isinstance(e, Problem)]
    assert [(e.kind, e.where) for e in probs] == [("malformed", f"{p}:2"), ("malformed", f"{p}:3")]
    assert "nested too deeply" in probs[0].message
    assert probs[1].pos == {**probs[1].pos, "line": 3}
    assert [it.key for it in items(evs)] == ["a", "b"]


def test_ingest_skips_a_deeply_nested_line_and_moves_the_checkpoint_past_it(tmp_path, store):
    """Skip mode stores the good lines and checkpoints past the deep line; stop mode stops at it, naming it."""
    p = tmp_path / "deep.jsonl"
    p.write_bytes(line("a", 1) + DEEP + line("b", 2))
    res = ingest(store, [JsonlSource(str(p))])
    assert res.problems == 1 and sorted(store) == ["a", "b"]
    assert store.checkpoint(JsonlSource(str(p)).name)["line"] == 3
    assert ingest(store, [JsonlSource(str(p))]).problems == 0
    res = ingest(store, [JsonlSource(str(p))], restart=True, on_error="stop")
    assert res.stopped_at is not None and res.stopped_at.where == f"{p}:2" and res.stopped_at.kind == "malformed"


@pytest.mark.slow
def test_cli_ingest_deeply_nested_line_skips_with_exit_1_and_no_traceback(tmp_path):
    """fpstore-admin ingest skips a deep line (exit 1, no traceback), a rerun exits 0, --on-error stop exits 2 there."""
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
    """A charset naming a codec that is no character set decodes as UTF-8, like an unknown one; later records are read."""
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
    uris = [f"https://{cs.strip(chr(0))}.example/" for cs in NOT_CHARSETS]
    assert [k for k, _ in got] == ["https://unknown.example/", *uris, "https://latin1.example/"]
    assert all(t == body.decode() for _, t in got)


def test_cli_ingest_warc_with_rot13_charset_stores_every_record(tmp_path):
    """fpstore-admin ingest of pages with charset rot13, base64 and zlib_codec exits 0 and stores them all."""
    data = b"".join(mtw.response(f"https://{cs}.example/", mtw.page("t", mtw.ARTICLE_A, "nav"), f"text/html; charset={cs}")
                    for cs in ("rot13", "base64", "zlib_codec"))
    path = tmp_path / "cs.warc"
    path.write_bytes(data)
    r = run("ingest", tmp_path / "s.fps", path)
    assert r.code == 0, r.err
    with fpstore.open(tmp_path / "s.fps", readonly=True) as s:
        assert len(s) == 3


# -- 13: WARC record headers longer than FastWARC's default 32 KiB ----------------------------------


def long_warc(form: str, uri_len: int) -> tuple[bytes, list[str]]:
    """The sample records with a response whose WARC-Target-URI is ``uri_len`` characters long
    inserted fourth; and the keys an ingest of it stores when that record is read."""
    long_uri = "https://long.example/" + "a" * uri_len
    recs = mtw.records()
    recs.insert(3, mtw.response(long_uri, mtw.page("Long", mtw.ARTICLE_B, "nav")))
    if form == "plain":
        raw = b"".join(recs)
    elif form == "per-record-gzip":
        raw = b"".join(gzip.compress(r, compresslevel=9, mtime=0) for r in recs)
    else:
        raw = gzip.compress(b"".join(recs), mtime=0)
    return raw, mtw.TEXT_URIS[:1] + [long_uri] + mtw.TEXT_URIS[1:]


FORMS = ["plain", "per-record-gzip", "one-gzip-member"]


def warc_path(tmp_path: pathlib.Path, form: str, raw: bytes) -> pathlib.Path:
    path = tmp_path / ("x.warc" if form == "plain" else "x.warc.gz")
    path.write_bytes(raw)
    return path


@pytest.mark.parametrize("form", FORMS)
def test_warc_header_over_32_kib_is_read(tmp_path, form):
    """A record header over 32 KiB (a long URI) but within max_bytes is read, and so is every record after it."""
    raw, keys = long_warc(form, 40_000)
    evs = events(WarcSource(str(warc_path(tmp_path, form, raw))))
    assert not kinds(evs, Problem)
    assert [it.key for it in items(evs)] == keys


@pytest.mark.parametrize("form", ["plain", "per-record-gzip"])
def test_warc_header_over_max_bytes_is_skipped_and_the_rest_read(tmp_path, form, store):
    """A header over max_bytes skips its record with a note; the rest is read, resumable from every position."""
    raw, keys = long_warc(form, 100_000)
    path = warc_path(tmp_path, form, raw)
    evs = events(WarcSource(str(path), max_bytes=65536))
    assert not kinds(evs, Problem)
    skipped = [e for e in evs if isinstance(e, Note) and e.kind == "too-large"]
    assert len(skipped) == 1 and "header" in skipped[0].message
    wanted = [k for k in keys if not k.startswith("https://long.")]
    assert [it.key for it in items(evs)] == wanted
    positioned = [e for e in evs if e.pos is not None]
    for i, ev in enumerate(positioned):
        rest = events(WarcSource(str(path), max_bytes=65536), ev.pos)
        assert not kinds(rest, Problem)
        assert [it.key for it in items(rest)] == [it.key for it in items(positioned[i + 1:])]
    res = ingest(store, [WarcSource(str(path), max_bytes=65536)], batch_size=2)
    assert res.problems == 0 and res.sources[0].done and sorted(store) == sorted(wanted)
    last = store.checkpoint(WarcSource(str(path)).name)
    assert last["record"] == len(mtw.records()) + 1
    again = ingest(store, [WarcSource(str(path), max_bytes=65536)])
    assert again.added == 0 and again.problems == 0
    # A checkpoint just after the skipped record resumes there, and notices a changed file.
    rest = events(WarcSource(str(path), max_bytes=65536), skipped[0].pos)
    assert [it.key for it in items(rest)] == wanted[1:]
    with pytest.raises(fpstore.errors.InputError, match="--restart"):
        events(WarcSource(str(path), max_bytes=65536), dict(skipped[0].pos, id="<urn:uuid:other>"))


def test_warc_header_over_max_bytes_in_one_gzip_member_stops_with_the_way_past(tmp_path):
    """Where a record cannot be skipped alone (one gzip stream), a long header stops the source naming --max-bytes."""
    raw, keys = long_warc("one-gzip-member", 100_000)
    path = warc_path(tmp_path, "one-gzip-member", raw)
    evs = events(WarcSource(str(path), max_bytes=65536))
    probs = [e for e in evs if isinstance(e, Problem)]
    assert len(probs) == 1 and probs[0].pos is None and "--max-bytes" in probs[0].message
    assert [it.key for it in items(evs)] == keys[:1]
    assert [it.key for it in items(events(WarcSource(str(path), max_bytes=1 << 20)))] == keys


def test_cli_ingest_warc_with_a_long_header_stores_the_rest(tmp_path):
    """fpstore-admin ingest of a per-record gzip WARC with a 40 KB URI exits 0 and stores every text response."""
    raw, keys = long_warc("per-record-gzip", 40_000)
    path = warc_path(tmp_path, "per-record-gzip", raw)
    r = run("ingest", tmp_path / "s.fps", path)
    assert r.code == 0, r.err
    with fpstore.open(tmp_path / "s.fps", readonly=True) as s:
        assert sorted(s) == sorted(keys)


@pytest.mark.parametrize("form", ["plain", "per-record-gzip"])
def test_warc_cut_inside_a_long_header_record_is_truncated(tmp_path, form):
    """A file ending inside a record with a header over max_bytes is 'truncated' (retried later), not skipped."""
    raw, keys = long_warc(form, 100_000)
    sizes = [len(gzip.compress(r, compresslevel=9, mtime=0) if form != "plain" else r) for r in mtw.records()]
    long_len = len(raw) - sum(sizes)
    cut = sum(sizes[:3]) + long_len - 30  # past the first 64 KiB of the header, inside the record's block
    path = warc_path(tmp_path, form, raw[:cut])
    evs = events(WarcSource(str(path), max_bytes=65536))
    probs = [e for e in evs if isinstance(e, Problem)]
    assert [(p.kind, p.pos) for p in probs] == [("truncated", None)]
    assert [it.key for it in items(evs)] == keys[:1]


# -- keys longer than the store accepts ---------------------------------------------------------------


def test_ingest_skips_a_key_over_the_limit_with_a_problem(tmp_path, store):
    """A key over MAX_KEY_BYTES is a 'too-large' problem for its record only; the rest of the batch is stored."""
    from fpstore.limits import MAX_KEY_BYTES

    long_key = "é" * (MAX_KEY_BYTES // 2 + 1)  # MAX_KEY_BYTES + 2 bytes of UTF-8, half as many characters
    p = tmp_path / "keys.jsonl"
    p.write_bytes(line("a", 1) + line(long_key, 2) + line("é" * (MAX_KEY_BYTES // 2), 3) + line("b", 4))
    seen = []
    res = ingest(store, [JsonlSource(str(p))], report=seen.append)
    assert [(e.kind, e.where) for e in seen] == [("too-large", f"{p}: line 2")]
    assert "key" in seen[0].message and f"{MAX_KEY_BYTES:,}" in seen[0].message
    assert sorted(store) == sorted(["a", "b", "é" * (MAX_KEY_BYTES // 2)])
    assert store.checkpoint(JsonlSource(str(p)).name)["line"] == 4
    res = ingest(store, [JsonlSource(str(p))], restart=True, on_error="stop")
    assert res.stopped_at is not None and res.stopped_at.where == f"{p}: line 2"


# -- 14: directory sources: names that are not UTF-8, long paths, symbolic links ---------------------


def make_file(path: bytes, data: bytes) -> None:
    with open(path, "wb") as fh:
        fh.write(data)


def test_directory_non_utf8_file_name_is_stored_faithfully_and_checkpointed(tmp_path, store):
    """A file name that is not UTF-8 is stored under a key os.fsencode turns back into it, with msgpack-able positions."""
    import msgpack

    root = os.fsencode(tmp_path / "docs")
    os.mkdir(root)
    names = [b"a.txt", b"caf\xe9.txt", b"sub\xff", b"z.txt"]
    for i, name in enumerate(names):
        if name.startswith(b"sub"):
            os.mkdir(os.path.join(root, name))
            make_file(os.path.join(root, name, b"in\xfe.txt"), text(i).encode())
        else:
            make_file(os.path.join(root, name), text(i).encode())
    src = DirectorySource(os.fsdecode(root))
    evs = events(src)
    keys = [it.key for it in items(evs)]
    assert sorted(os.fsencode(k) for k in keys) == [b"a.txt", b"caf\xe9.txt", b"sub\xff/in\xfe.txt", b"z.txt"]
    for i, it in enumerate(items(evs)):
        msgpack.packb(it.pos, use_bin_type=True)
        assert [r.key for r in items(events(DirectorySource(os.fsdecode(root)), it.pos))] == keys[i + 1:]
    res = ingest(store, [DirectorySource(os.fsdecode(root))], batch_size=2)
    assert res.added == 4 and res.sources[0].done
    assert sorted(os.fsencode(k) for k in store) == sorted(os.fsencode(k) for k in keys)
    assert ingest(store, [DirectorySource(os.fsdecode(root))]).added == 0


def test_non_utf8_and_long_source_paths_get_a_short_stable_checkpoint_name(tmp_path, store):
    """Non-UTF-8 and long source paths get short, stable, distinct checkpoint names; short paths keep the old name."""
    from fpstore.limits import MAX_CHECKPOINT_NAME_BYTES

    short = tmp_path / "short"
    short.mkdir()
    assert DirectorySource(str(short)).name == f"ingest:dir:{os.path.realpath(short)}"
    bad = os.fsencode(tmp_path) + b"/d\xff"
    os.mkdir(bad)
    deep = tmp_path
    for i in range(8):
        deep = deep / (f"{i}" + "x" * 60)
    deep2 = tmp_path / "y" / deep.relative_to(tmp_path)
    sources = []
    for d in (os.fsdecode(bad), str(deep), str(deep2)):
        os.makedirs(d, exist_ok=True)
        make_file(os.fsencode(os.path.join(d, "a.txt")), text(len(sources)).encode())
        sources.append(DirectorySource(d))
    names = [s.name for s in sources]
    assert len(set(names)) == 3
    for s, n in zip(sources, names):
        assert len(n.encode("utf-8")) <= MAX_CHECKPOINT_NAME_BYTES and DirectorySource(s.path).name == n
    assert names[1].endswith("x" * 20) and names[1].startswith("ingest:dir:")
    res = ingest(store, sources)
    assert res.added == 3
    assert ingest(store, [DirectorySource(s.path) for s in sources]).added == 0
    bad_jsonl = bad + b"/x.jsonl"
    make_file(bad_jsonl, line("j", 1))
    assert ingest(store, [JsonlSource(os.fsdecode(bad_jsonl))]).added == 1
    assert ingest(store, [JsonlSource(os.fsdecode(bad_jsonl))]).added == 0


@pytest.mark.slow
def test_cli_ingest_non_utf8_and_long_paths(tmp_path):
    """fpstore-admin ingest of a non-UTF-8 directory path and a 500-byte one exits 0, and a rerun adds nothing."""
    bad = os.fsencode(tmp_path) + b"/d\xff"
    os.mkdir(bad)
    make_file(bad + b"/caf\xe9.txt", text(1).encode())
    deep = tmp_path
    for i in range(8):
        deep = deep / (f"{i}" + "x" * 60)
    deep.mkdir(parents=True)
    (deep / "a.txt").write_text(text(2))
    store = tmp_path / "s.fps"
    r = run("ingest", store, os.fsdecode(bad), deep, "--json")
    assert r.code == 0, r.err
    assert r.json()["added"] == 2
    r = run("ingest", store, os.fsdecode(bad), deep, "--json")
    assert r.code == 0 and r.json()["added"] == 0
    with fpstore.open(store, readonly=True) as s:
        assert sorted(os.fsencode(k) for k in s) == [b"a.txt", b"caf\xe9.txt"]


def symlink_tree(tmp_path: pathlib.Path) -> pathlib.Path:
    """``tree/`` with a file, links to it, links out of the tree and a link back to its root."""
    outside = tmp_path / "outside"
    (outside / "d").mkdir(parents=True)
    (outside / "secret.txt").write_text("root:x:0:0:root:/root:/bin/bash")
    (outside / "d" / "f.txt").write_text(text(9))
    root = tmp_path / "tree"
    (root / "sub").mkdir(parents=True)
    (root / "in.txt").write_text(text(1))
    os.symlink("in.txt", root / "link-in.txt")
    os.symlink("../in.txt", root / "sub" / "link-up.txt")
    os.symlink(outside / "secret.txt", root / "link-out.txt")
    os.symlink("../outside/secret.txt", root / "rel-out.txt")
    os.symlink(outside / "d", root / "dir-out")
    os.symlink("..", root / "sub" / "loop")
    return root


def test_directory_does_not_follow_links_out_of_the_tree(tmp_path):
    """Links to files in the tree are read; links out of it are skipped with a 'symlink' note; directory links are not followed."""
    root = symlink_tree(tmp_path)
    evs = events(DirectorySource(str(root)))
    assert sorted(it.key for it in items(evs)) == ["in.txt", "link-in.txt", "sub/link-up.txt"]
    assert all("root:x" not in it.text for it in items(evs))
    notes = [e for e in evs if isinstance(e, Note)]
    assert sorted((n.kind, os.path.basename(n.where)) for n in notes) == [("symlink", "link-out.txt"), ("symlink", "rel-out.txt")]
    assert all(n.pos is not None and "follow" in n.message for n in notes)


def test_directory_follow_symlinks_reads_links_out_of_the_tree_without_looping(tmp_path):
    """follow_symlinks=True reads links to files and directories outside the tree, and a link to an ancestor does not loop."""
    from fpstore.admin.ingest import make_source

    root = symlink_tree(tmp_path)
    evs = events(make_source(str(root), "dir", follow_symlinks=True))
    assert sorted(it.key for it in items(evs)) == ["dir-out/f.txt", "in.txt", "link-in.txt", "link-out.txt", "rel-out.txt", "sub/link-up.txt"]
    assert not kinds(evs, Note) and not kinds(evs, Problem)


def test_directory_file_swapped_for_a_link_after_the_walk_is_not_followed(tmp_path):
    """A file replaced by a link out of the tree between the walk and the read is not read."""
    root = symlink_tree(tmp_path)
    (root / "z.txt").write_text(text(3))
    src = DirectorySource(str(root))
    src.files()
    os.remove(root / "z.txt")
    os.symlink(tmp_path / "outside" / "secret.txt", root / "z.txt")
    evs = events(src)
    assert "z.txt" not in [it.key for it in items(evs)]
    assert all("root:x" not in it.text for it in items(evs))


# -- 15: HTML nested deeper than the extractor's bound ------------------------------------------------


def deep(n: int, tag: str = "div") -> str:
    return "<!DOCTYPE html><html><body>" + f"<{tag}>" * n + "deep words" + f"</{tag}>" * n + "</body></html>"


def parser_must_not_run(monkeypatch):
    from fpstore.fingerprint import html

    def refuse():
        raise AssertionError("the HTML5 parser was called for a document over the nesting bound")

    monkeypatch.setattr(html, "_parser", refuse)


def test_deeply_nested_html_takes_the_flat_path_without_the_parser(monkeypatch):
    """A page 100,000 <div>s deep is reduced by the flat scan, and never handed to the HTML5 parser."""
    from fpstore.fingerprint import html

    doc = deep(100_000)
    assert html.nesting_depth(doc) > html.MAX_DEPTH
    parser_must_not_run(monkeypatch)
    assert html.main_text(doc).split() == ["deep", "words"]
    assert html.visible_text(doc).split() == ["deep", "words"]


EVASIONS = {
    "divs": deep(5000),
    "spans then divs": "<body>" + "<span>" * 5000 + "<div>x</div>" * 5000,
    "stray end tags": "<body>" + "<div></x>" * 5000,
    "stray end tags of open names": "<body><x>" + "<div></x>" * 5000,
    "unclosed formatting, distinct attributes": "<body>" + "".join(f"<b id={i}>" for i in range(5000)) + "<p>x</p>" * 10,
    "formatting entries closed by </p>": "<body>" + "".join(f"<p><b id={i}></p>" for i in range(5000)) + "<p>x</p>",
    "formatting kept open by a table": "<body>" + "<b><table><td></b></td></table>" * 5000,
    "nested list items": "<body>" + "<ul><li>" * 5000,
    "nested tables in cells": "<body>" + "<table><tr><td>" * 5000,
    "foreign elements": "<body><svg>" + "<area>" * 5000 + "</x>" * 10,
    "a comment ending early": "<body>" + "<!--->" + "<div>" * 5000 + "-->",
    "a comment in an attribute": '<body><div title="<!--">' + "<div>" * 5000 + "-->",
    "a script tag in an attribute": '<body><p title="<script>">' + "<div>" * 5000 + "</script>",
    "a script tag in a comment": "<body><!-- <script> -->" + "<div>" * 5000 + "</script>",
    "style in svg": "<body><svg><style>" + "<div>" * 5000 + "</style>",
    "an unquoted '=' attribute name": '<body><div =">' + "<div>" * 5000 + '">',
}


@pytest.mark.parametrize("name", sorted(EVASIONS))
def test_nesting_depth_sees_through_markup_tricks(name):
    """Deep nesting is counted however it is built or hidden (stray end tags, formatting, tables, foreign content, quotes)."""
    from fpstore.fingerprint import html

    assert html.nesting_depth(EVASIONS[name], 100_000) >= 2500


ORDINARY = {
    "sloppy paragraphs and lists": "<body>" + "<p>para <b>bold</b> <a href=x>link</a>" * 3000 + "<ul>" + "<li>item" * 3000 + "</ul>",
    "tables without end tags": "<body><table>" + ("<tr>" + "<td>cell" * 5) * 2000 + "</table>",
    "voids": "<body>" + "<br><img src=x><input><hr><meta x><link y><wbr>" * 2000,
    "scripts with comparisons": "<body><script>" + "for(i=0;i<n;i++)if(a<b&&c<d)x=a<b ?c:d;" * 3000 + "</script><p>x",
    "comments with markup": "<body>" + "<!-- <div><div><span> -->" * 3000,
    "attributes with markup": "<body>" + "<a title='<div><div>' href=\"<span>\">x</a>" * 3000,
    "html head body repeated": "<html><head></head><body>" * 3000,
    "misnested formatting": "<body>" + "<p><b><i>x</b></i></p>" * 3000,
    "options": "<body><select>" + "<option>o" * 3000 + "</select>",
    "selects with options left open": "<body><form><p>" + "<select><option>a<option>b</select>" * 3000,
    "definition lists": "<body><dl>" + "<dt>t<dd>d" * 3000 + "</dl>",
    "headings": "<body>" + "<h1>a<h2>b<h3>c" * 3000,
    "svg icons": "<body>" + "<svg><g><path d='M0'/><circle r=1 /></g></svg>" * 3000,
    "end tags with quoted '>'": "<body>" + "<div></div title='>'>" * 3000,
}


@pytest.mark.parametrize("name", sorted(ORDINARY))
def test_nesting_depth_of_ordinary_markup_is_its_real_depth(name):
    """Long but shallow markup (implied end tags, voids, raw text, comments, quotes) counts a few levels."""
    from fpstore.fingerprint import html

    assert html.nesting_depth(ORDINARY[name], 100_000) <= 12


def test_at_the_bound_the_parser_decides_and_just_over_it_the_flat_path(monkeypatch):
    """A tag-dense page at MAX_DEPTH levels is parsed as before; one level more and it takes the flat path."""
    from fpstore.fingerprint import html

    levels = html.MAX_DEPTH - 3  # with html, body and main: MAX_DEPTH
    shallow = "<i></i>" * 20_000  # many tags for the size: the depth is what decides
    at = "<html><body>" + "<div>" * levels + "<main>kept</main><nav>dropped</nav>" + "</div>" * levels + shallow
    assert html.nesting_depth(at) == html.MAX_DEPTH
    assert html.main_text(at).split() == ["kept"]
    over = at.replace("<main>", "<div><main>", 1)
    assert html.nesting_depth(over) == html.MAX_DEPTH + 1
    parser_must_not_run(monkeypatch)
    assert html.main_text(over).split() == ["kept", "dropped"]


def test_few_tags_for_the_size_are_parsed_without_a_scan(monkeypatch):
    """A page with at most sqrt(MAX_DEPTH x length) '<' is parsed as before however deep, and not scanned."""
    from fpstore.fingerprint import html

    page = "<html><body>" + "<div>" * 1000 + "<main>kept " + "word " * 200_000 + "</main><nav>dropped</nav>"
    assert page.count("<") ** 2 <= html.MAX_DEPTH * len(page)

    def refuse(*args, **kwargs):
        raise AssertionError("scanned")

    monkeypatch.setattr(html, "nesting_depth", refuse)
    got = html.main_text(page).split()
    assert got[0] == "kept" and len(got) == 200_001 and "dropped" not in got


VOIDS = frozenset("area base basefont bgsound br col embed frame hr img input keygen link meta param source track wbr".split())


def dom_depth(doc: str) -> int:
    """The deepest element of the tree lexbor builds for ``doc`` (html = 1), void elements (never
    open while another tag is read) left out."""
    from selectolax.lexbor import LexborHTMLParser

    best, todo = 0, [(LexborHTMLParser(doc).root, 1)]
    while todo:
        node, d = todo.pop()
        best = max(best, d)
        child = node.child
        while child is not None:
            if child.tag not in ("-text", "_text", "-comment", "_comment", "!doctype") and child.tag not in VOIDS:
                todo.append((child, d + 1))
            child = child.next
    return best


TAGS = ["div", "span", "p", "b", "i", "a", "li", "ul", "td", "tr", "table", "tbody", "th", "dd", "dt", "option", "select",
        "h1", "h2", "button", "form", "template", "svg", "math", "object", "caption", "x", "em", "font", "nobr", "br", "hr",
        "img", "script", "style", "title", "textarea", "body", "html", "head", "frameset", "area", "section", "pre"]


def tag_soup(draw) -> str:
    from hypothesis import strategies as st

    parts = []
    for _ in range(draw(st.integers(1, 60))):
        name = draw(st.sampled_from(TAGS))
        kind = draw(st.sampled_from(["<{}>", "</{}>", "<{} id={}>", "<{}/>", "x", "<!--{}-->"]))
        parts.append(kind.format(name, len(parts)))
    return "".join(parts)


@pytest.mark.slow
def test_nesting_depth_is_never_below_the_depth_lexbor_builds():
    """On random tag soup, nesting_depth is never below the depth of the tree lexbor builds (less 2)."""
    from hypothesis import given, settings, strategies as st

    from fpstore.fingerprint import html

    @settings(max_examples=400, database=None, derandomize=True)  # the same examples every run
    @given(st.data())
    def check(data):
        doc = "<body>" + tag_soup(data.draw)
        assert html.nesting_depth(doc, 10_000) >= dom_depth(doc) - 2, doc

    check()


@pytest.mark.slow
def test_deep_page_is_fingerprinted_in_linear_time_safety_net(tmp_path):
    """Safety net, generous timeout: a page 400,000 <div>s deep (minutes unbounded) is fingerprinted in a subprocess."""
    import subprocess
    import sys

    code = ("import fpstore; d = '<html><body>' + '<div>' * 400000 + 'deep words' + '</div>' * 400000; "
            "print(fpstore.Pipeline().signature(d).tokens)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=90, text=True)
    assert p.returncode == 0, p.stderr
