"""``fpstore-admin ingest --images``, ``query --image`` and ``create --kind phash64|dhash64``: image
stores from the command line; usage errors exit 2 before a store is made; a killed image ingest
resumes with every image stored once."""

from __future__ import annotations

import gzip
import os
import signal
import time

import pytest

pytest.importorskip("PIL")

import fpstore  # noqa: E402
from tests.test_cli import cli, popen, run  # noqa: E402
from tests.test_ingest_images import BAD, GOOD, encode, image_dir, many_images, mutate, picture, _seeds  # noqa: E402
from tools import make_test_warc as mtw  # noqa: E402


def test_ingest_images_of_a_directory(tmp_path):
    """Exit 0; one note line per bad image naming it; the summary counts images; a rerun adds none;
    query --image finds the resized copy; dedup pairs it."""
    root = image_dir(tmp_path / "d")
    store = tmp_path / "i.fps"
    r = cli("ingest", store, "--images", root, "--no-progress", "--batch-size", "3")
    assert r.code == 0, r.err
    assert f"{len(GOOD)} images added (from the start)" in r.out and f"bad-image {len(BAD)}" in r.out
    assert f"the store holds {len(GOOD)}" in r.out
    bad_lines = [line for line in r.err.splitlines() if "skipped" in line and "note:" in line and "not an image" not in line]
    assert sorted(line.split("note: ")[1].split(": ")[0] for line in bad_lines) == sorted(str(root / n) for n in BAD)
    assert "readme.txt" not in r.err  # not-image notes are counted, not shown
    assert "not-image 1" in r.out
    r = cli("ingest", store, "--images", root, "--no-progress", "--json")
    assert r.code == 0 and r.json()["added"] == 0 and r.json()["documents"] == len(GOOD)
    near = tmp_path / "near.png"
    near.write_bytes(encode(picture(1).resize((120, 90)), "PNG"))
    r = cli("query", store, "--image", near, "--json")
    assert r.code == 0 and {"a.jpg", "a_small.png"} <= {m["key"] for m in r.json()["matches"]}
    r = cli("dedup", store)
    assert r.code == 0 and '"a.jpg"' in r.out and '"a_small.png"' in r.out
    info = cli("info", store, "--json").json()
    assert info["pipeline"]["kind"] == "phash64" and info["k"] == 10
    r = cli("explain", store, "a.jpg", "a_small.png")
    assert r.code == 0 and "store pairs them" in r.out
    assert "Jaccard" not in r.out and "shingle" not in r.out  # nothing of texts said of images


def test_ingest_images_of_a_warc_and_the_text_ingest_hint(tmp_path):
    png, gif = encode(picture(1), "PNG"), encode(picture(2), "GIF")
    recs = [
        mtw.response("https://img.example/a.png", png, "image/png"),
        mtw.response("https://news.example/page", mtw.page("A page", mtw.ARTICLE_A, "nav")),
        mtw.response("https://img.example/b.gif", gif, "image/gif"),
        mtw.response("https://img.example/cut.gif", gif[:40], "image/gif"),
    ]
    warc = tmp_path / "c.warc.gz"
    warc.write_bytes(b"".join(gzip.compress(r, mtime=0) for r in recs))
    r = cli("ingest", tmp_path / "i.fps", "--images", warc, "--no-progress", "--kind", "dhash64")
    assert r.code == 0, r.err
    assert "2 images added" in r.out and "bad-image 1" in r.out and "not-image 1" in r.out
    assert "https://img.example/cut.gif" in r.err and "record 4" in r.err
    with fpstore.open(tmp_path / "i.fps", readonly=True) as s:
        assert sorted(s) == ["https://img.example/a.png", "https://img.example/b.gif"] and s.pipeline.kind == "dhash64"
    r = cli("ingest", tmp_path / "t.fps", warc, "--no-progress")
    assert r.code == 0 and "1 documents added" in r.out
    assert "image/png payload; skipped (ingest --images reads images into an image store)" in r.err


def test_max_pixels_option(tmp_path):
    root = tmp_path / "d"
    root.mkdir()
    (root / "big.png").write_bytes(encode(picture(1, 400, 300), "PNG"))
    (root / "small.png").write_bytes(encode(picture(2), "PNG"))
    r = cli("ingest", tmp_path / "i.fps", "--images", root, "--max-pixels", "50000", "--no-progress")
    assert r.code == 0 and "1 images added" in r.out
    assert "big.png: image declares 400×300 pixels, above max_pixels=50,000; skipped" in r.err


@pytest.mark.parametrize(
    "args, message",
    [
        (["--images", "--kind", "phash64", "--shingle", "2"], "--shingle: options of text pipelines"),
        (["--images", "--kind", "simhash64"], "--images needs an image kind"),
        (["--kind", "phash64"], "add --images"),
        (["--images", "--sample"], "--sample"),
        (["--images", "--html", "off"], "--html: options of text pipelines"),
    ],
)
def test_usage_errors_make_no_store(tmp_path, args, message):
    root = tmp_path / "d"
    root.mkdir()
    r = cli("ingest", tmp_path / "x.fps", root, *args, "--no-progress")
    assert r.code == 2 and message in r.err, r.err
    assert not (tmp_path / "x.fps" / "data.mdb").exists()


def test_images_and_texts_keep_to_their_stores(tmp_path):
    root = image_dir(tmp_path / "d")
    (tmp_path / "a.jsonl").write_text('{"id": "k", "text": "some words to store here"}\n')
    assert cli("ingest", tmp_path / "t.fps", tmp_path / "a.jsonl", "--no-progress").code == 0
    assert cli("ingest", tmp_path / "i.fps", "--images", root, "--no-progress").code == 0
    r = cli("ingest", tmp_path / "t.fps", "--images", root, "--no-progress")
    assert r.code == 2 and "fingerprints of texts" in r.err and "a store of their own" in r.err
    r = cli("ingest", tmp_path / "i.fps", root, "--no-progress")
    assert r.code == 2 and "pass --images" in r.err
    r = cli("ingest", tmp_path / "i.fps", "--images", tmp_path / "a.jsonl", "--no-progress")
    assert r.code == 2 and "JSON Lines" in r.err
    r = cli("ingest", tmp_path / "i.fps", "--images", root, "--kind", "dhash64", "--no-progress")
    assert r.code == 2 and "kind" in r.err  # the store's kind is phash64
    r = cli("query", tmp_path / "i.fps", "some words")
    assert r.code == 2 and "--image FILE" in r.err
    r = cli("query", tmp_path / "t.fps", "--image", root / "a.jpg")
    assert r.code == 2 and "not --image" in r.err
    r = cli("query", tmp_path / "i.fps", "--image", root / "random.jpg")
    assert r.code == 2 and "random.jpg: image does not decode" in r.err and "BytesIO" not in r.err


def test_create_an_image_store(tmp_path):
    r = cli("create", tmp_path / "c.fps", "--kind", "dhash64", "--json")
    assert r.code == 0 and r.json()["pipeline"]["kind"] == "dhash64"
    r = cli("create", tmp_path / "e.fps", "--kind", "phash64", "--seed", "3")
    assert r.code == 2 and "--seed" in r.err and not (tmp_path / "e.fps" / "data.mdb").exists()
    root = image_dir(tmp_path / "d")
    r = cli("ingest", tmp_path / "c.fps", "--images", root, "--no-progress")
    assert r.code == 0 and f"{len(GOOD)} images added" in r.out


def test_fuzzed_images_through_the_command_line(tmp_path):
    """Mutated images: exit 0, no traceback, no Pillow warning on stderr, each bad image one line."""
    import random

    r_ = random.Random(7)
    seeds = _seeds()
    root = tmp_path / "f"
    root.mkdir()
    for i in range(90):
        (root / f"f{i:03d}.png").write_bytes(mutate(seeds[i % len(seeds)], r_))
    r = cli("ingest", tmp_path / "i.fps", "--images", root, "--no-progress", "--json")
    assert r.code == 0, r.err
    d = r.json()
    bad = d["sources"][0]["notes"].get("bad-image", 0)
    assert d["added"] + bad == 90 and bad > 0
    shown = [line for line in r.err.splitlines() if "bad" in line or "decode" in line or "pixels" in line]
    assert len(shown) == min(bad, 20)
    assert "Warning" not in r.err


@pytest.mark.slow
def test_killed_image_ingest_resumes_with_each_image_once(tmp_path):
    """SIGKILL an image ingest once it has committed a batch; the rerun resumes at the checkpoint
    and stores the rest, each image once."""
    root = tmp_path / "d"
    good, bad = many_images(root, n=400, bad_every=9)
    store = tmp_path / "k.fps"
    name = f"ingest:dir:{os.path.realpath(root)}"
    proc = popen("ingest", store, "--images", root, "--batch-size", "10", "--no-progress")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        if (store / "data.mdb").exists():
            try:
                with fpstore.open(store, readonly=True) as s:
                    if s.checkpoint(name):
                        break
            except fpstore.FpstoreError:
                pass
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    with fpstore.open(store, readonly=True) as s:
        before = len(s)
        pos = s.checkpoint(name)
    assert pos is not None and before <= len(good)
    if proc.returncode == -signal.SIGKILL:
        assert before == pos["count"] - sum(1 for b in bad if b <= pos["file"]) < len(good)
    r = run("ingest", store, "--images", root, "--json")
    assert r.code == 0, r.err
    d = r.json()
    assert d["added"] == len(good) - before and d["documents"] == len(good)
    with fpstore.open(store, readonly=True) as s:
        assert sorted(s) == sorted(good)
    assert run("verify", store, "--no-copy").code == 0


def test_text_options_on_an_existing_image_store_say_what_the_store_is(tmp_path):
    store = tmp_path / "i.fps"
    assert cli("create", store, "--kind", "phash64").code == 0
    (tmp_path / "d").mkdir()
    r = cli("ingest", store, "--images", tmp_path / "d", "--shingle", "3", "--no-progress")
    assert r.code == 2 and "phash64 (which takes no shingle), not shingle=3" in r.err
