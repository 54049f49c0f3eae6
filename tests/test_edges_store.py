"""Edges of the store's lifecycle and input: valid input that must not brick a store, directories
and files the store did not make, failed creates, dropped stores, read-only media."""

from __future__ import annotations

import contextlib
import gc
import io
import os
import shutil
import stat
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

import fpstore
from fpstore.admin.exchange import export_store, import_stream
from fpstore.errors import FpstoreError, InputError, NotAStoreError
from fpstore.store import storage as _storage
from fpstore.store.storage import DATA_FILE
COMPACT_MARKER = getattr(_storage, "COMPACT_MARKER", ".fpstore-compaction")


def _pid(store: fpstore.Store) -> str:
    return store.pipeline.id


# -- case 1: a writable open never deletes what the store did not make ---------------------------------


def test_writable_open_keeps_a_users_compact_named_directory(tmp_path):
    """A user's sub-directory whose name starts with compact- survives a writable open of the store."""
    path = tmp_path / "s"
    fpstore.open(path, k=5).close()
    mine = path / "compact-disc-collection"
    mine.mkdir()
    (mine / "track01.flac").write_bytes(b"music")
    lookalike = path / "compact-12345"
    lookalike.mkdir()
    (lookalike / "data.mdb").write_bytes(b"not a copy of ours: no marker")
    with fpstore.open(path, k=5) as s:
        s.add("a", fingerprint=1, pipeline_id=_pid(s))
    assert (mine / "track01.flac").read_bytes() == b"music"
    assert (lookalike / "data.mdb").exists()


def _marked_compaction_dir(path, marker_text):
    """Create a store at `path` and, inside it, a compaction directory carrying the store's marker."""
    fpstore.open(path, k=5).close()
    directory = path / "compact-12345-0123456789abcdef"
    directory.mkdir()
    (directory / COMPACT_MARKER).write_text(marker_text)
    return directory


def test_stale_marked_compaction_copy_is_removed_by_the_next_writer(tmp_path):
    """A copy left by a file compaction that died before its switch (it carries the store's marker) is removed on open."""
    path = tmp_path / "s"
    stale = _marked_compaction_dir(path, "fpstore file compaction of pid 12345\n")
    (stale / "data.mdb").write_bytes(b"partial")
    empty = path / "compact-777-fedcba9876543210"  # killed between mkdir and the marker: empty
    empty.mkdir()
    with fpstore.open(path, k=5) as s:
        assert s.add("a", fingerprint=1, pipeline_id=_pid(s)).id
    assert not stale.exists()
    assert not empty.exists()


def test_marked_compaction_directory_with_foreign_files_is_kept(tmp_path):
    """A compaction directory holding a file the store never writes there is left alone."""
    path = tmp_path / "s"
    odd = _marked_compaction_dir(path, "")
    (odd / "notes.txt").write_text("someone's notes")
    fpstore.open(path).close()
    assert (odd / "notes.txt").read_text() == "someone's notes"


def test_store_is_not_created_in_a_non_empty_directory(tmp_path):
    """Opening a non-empty directory that is not a store refuses, and changes nothing in it."""
    d = tmp_path / "photos"
    d.mkdir()
    (d / "cat.jpg").write_bytes(b"\xff\xd8")
    (d / "compact-disc-collection").mkdir()
    before = sorted(os.listdir(d))
    with pytest.raises(NotAStoreError, match="not empty"):
        fpstore.open(d)
    assert sorted(os.listdir(d)) == before


def test_store_is_created_in_an_empty_directory(tmp_path):
    """An existing empty directory becomes a store."""
    d = tmp_path / "empty"
    d.mkdir()
    with fpstore.open(d) as s:
        assert len(s) == 0


def test_file_compaction_still_switches_and_leaves_nothing(tmp_path):
    """compact_file() switches to the copy and leaves no compaction directory behind."""
    path = tmp_path / "s"
    with fpstore.open(path, k=5) as s:
        s.add_many([f"k{i}" for i in range(100)], fingerprints=np.arange(100, dtype=np.uint64), pipeline_id=_pid(s))
        s.compact_file()
        assert len(s) == 100
    assert not [n for n in os.listdir(path) if n.startswith("compact-")]


# -- case 7: a failed create leaves nothing behind ----------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [{"k": 12}, {"design": "no-such-design"}, {"expected_size": -5}, {"k": -1}, {"pipeline": "default"}],
)
def test_failed_create_leaves_nothing_behind(tmp_path, kwargs):
    """A create refused for its arguments makes no directory; the same path then creates fine."""
    path = tmp_path / "new" / "s"
    with pytest.raises(FpstoreError):
        fpstore.open(path, **kwargs)
    assert not path.exists()
    assert not (tmp_path / "new").exists()
    with fpstore.open(path) as s:
        assert len(s) == 0


def test_failed_create_in_an_existing_empty_directory_empties_it_again(tmp_path):
    """A refused create in an existing empty directory leaves it empty (and does not remove it)."""
    d = tmp_path / "d"
    d.mkdir()
    with pytest.raises(FpstoreError):
        fpstore.open(d, k=12)
    assert d.is_dir() and os.listdir(d) == []


def test_create_that_fails_midway_removes_what_it_made(tmp_path, monkeypatch):
    """A create that fails after the environment exists removes its files, so a later create works."""
    from fpstore.store import store as store_mod

    path = tmp_path / "s"

    def boom(self, *a, **kw):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(store_mod.Storage, "create", boom)
    with pytest.raises(OSError):
        fpstore.open(path)
    monkeypatch.undo()
    assert not path.exists()
    with fpstore.open(path) as s:
        assert len(s) == 0


def test_environment_left_by_a_killed_create_is_created_over(tmp_path):
    """An empty LMDB environment (a create killed before its first commit) is made a store by the next writable open."""
    import lmdb

    path = tmp_path / "s"
    path.mkdir(mode=0o700)
    (path / "writer.lock").write_bytes(b"")  # a create takes the writer lock before LMDB opens
    lmdb.open(str(path), lib_version=0, map_size=1 << 20).close()
    assert (path / DATA_FILE).exists()
    with fpstore.open(path, k=5) as s:
        s.add("a", fingerprint=1, pipeline_id=_pid(s))
    with fpstore.open(path, readonly=True) as s:
        assert "a" in s


def test_empty_lmdb_environment_of_someone_else_is_not_taken_over(tmp_path):
    """An empty LMDB environment (or an empty data.mdb) no writer of ours left is refused, and left as it was."""
    import lmdb

    env_dir = tmp_path / "env"
    lmdb.open(str(env_dir), lib_version=0, map_size=1 << 20).close()
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / DATA_FILE).write_bytes(b"")
    for d in (env_dir, empty):
        before = (d / DATA_FILE).read_bytes()
        names = sorted(os.listdir(d))
        with pytest.raises(NotAStoreError):
            fpstore.open(d)
        assert (d / DATA_FILE).read_bytes() == before
        assert sorted(os.listdir(d)) == names  # no lock files of ours left behind either


def test_cli_create_with_a_refused_k_leaves_nothing(tmp_path):
    """fpstore-admin create -k 12 exits 2 and leaves no directory."""
    path = tmp_path / "s"
    proc = subprocess.run([sys.executable, "-m", "fpstore", "create", str(path), "-k", "12"], capture_output=True, text=True)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert not path.exists()


# -- case 8: a store dropped without close() is released -----------------------------------------------


def test_dropped_store_is_released_with_a_resource_warning(tmp_path):
    """A Store dropped without close() releases its locks on collection and warns (as files do)."""
    path = tmp_path / "s"
    s = fpstore.open(path, k=5)
    s.add("a", fingerprint=1, pipeline_id=_pid(s))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        del s
        gc.collect()
    assert any(issubclass(w.category, ResourceWarning) for w in caught), [str(w.message) for w in caught]
    with fpstore.open(path, k=5) as again:  # same process: no "already open"
        assert "a" in again
    code = f"import fpstore; s = fpstore.open({str(path)!r}, k=5); print(len(s))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.strip() == "1", proc.stderr


def test_closed_store_collects_without_a_warning(tmp_path):
    """A closed Store is collected silently."""
    s = fpstore.open(tmp_path / "s")
    s.close()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        del s
        gc.collect()
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)]


# -- case 9: read-only media ---------------------------------------------------------------------------


@contextlib.contextmanager
def _read_only(path: os.PathLike[str]):
    """``path`` made read-only media for the duration: a read-only bind mount where we are root
    (root ignores permission bits), else a 0500 directory of 0400 files."""
    path = os.fspath(path)
    if os.getuid() == 0:
        if shutil.which("mount") is None:
            pytest.skip("no mount command to make a read-only bind mount")
        subprocess.run(["mount", "--bind", path, path], check=True)
        try:
            subprocess.run(["mount", "-o", "remount,bind,ro", path], check=True)
            yield
        finally:
            subprocess.run(["umount", path], check=True)
        return
    modes = {}
    for root, _dirs, files in os.walk(path):
        for name in files:
            full = os.path.join(root, name)
            modes[full] = os.stat(full).st_mode
            os.chmod(full, 0o400)
    os.chmod(path, 0o500)
    try:
        yield
    finally:
        os.chmod(path, 0o700)
        for full, mode in modes.items():
            os.chmod(full, mode)


def test_store_on_read_only_media_opens_read_only(tmp_path):
    """A store on read-only media opens with readonly=True and answers; a writable open is refused clearly."""
    path = tmp_path / "s"
    with fpstore.open(path, k=5) as s:
        s.add_many(["a", "b"], fingerprints=np.array([5, 4], np.uint64), pipeline_id=_pid(s))
    with _read_only(path):
        with fpstore.open(path, readonly=True) as s:
            assert len(s) == 2
            assert [m.key for m in s.query(fingerprint=5, pipeline_id=s.pipeline.id, k=1)] == ["a", "b"]
            assert s.get("b").fingerprint == 4
        with pytest.raises(FpstoreError):
            fpstore.open(path, k=5)
    with fpstore.open(path, k=5) as s:  # writable again once the media is
        s.add("c", fingerprint=7, pipeline_id=_pid(s))


# -- case 10: files that are not regular files ----------------------------------------------------------


@pytest.mark.parametrize("name", [DATA_FILE, "lock.mdb", "open.lock", "writer.lock"])
@pytest.mark.parametrize("readonly", [False, True])
def test_fifo_in_place_of_a_store_file_is_refused(tmp_path, name, readonly):
    """A FIFO where a store file belongs is refused with an fpstore error, without hanging."""
    path = tmp_path / "s"
    fpstore.open(path).close()
    os.remove(path / name)
    os.mkfifo(path / name)
    code = f"""
        import fpstore
        try:
            fpstore.open({str(path)!r}, readonly={readonly}).close()
            print("opened")
        except fpstore.errors.FpstoreError as exc:
            print("refused:", type(exc).__name__, exc)
    """
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    if name == DATA_FILE:
        assert proc.stdout.startswith("refused:"), proc.stdout
        assert "regular file" in proc.stdout
    else:  # a lock file is ours to replace or refuse, but never to hang on
        assert proc.stdout.startswith(("refused:", "opened")), proc.stdout
    assert stat.S_ISFIFO(os.lstat(path / name).st_mode) or name != DATA_FILE


# -- case 2: whatever a writer accepts, every reader reads ------------------------------------------------

from fpstore.limits import MAX_CHECKPOINT_BYTES, MAX_KEY_BYTES  # noqa: E402


def _long_keys(n: int) -> list[object]:
    return ["é" * (n // 2), b"\x00" * n, "u" * n]


def _write(s: fpstore.Store, writer: str, keys: list, fps: np.ndarray) -> None:
    """Store ``keys`` with ``fps`` through one of the three writers."""
    pid = _pid(s)
    if writer == "add":
        for key, fp in zip(keys, fps.tolist()):
            s.add(key, fingerprint=fp, pipeline_id=pid)
    elif writer == "add_many":
        s.add_many(keys, fingerprints=fps, pipeline_id=pid)
    else:
        s.bulk_load(keys, fps, pipeline_id=pid)


@pytest.mark.parametrize("writer", ["add", "add_many", "bulk_load"])
def test_keys_over_the_limit_are_refused_by_every_writer(tmp_path, writer):
    """A key one byte over MAX_KEY_BYTES is an InputError in add, add_many and bulk_load, and nothing is written."""
    with fpstore.open(tmp_path / "s", k=5) as s:
        s.add("keep", fingerprint=3, pipeline_id=_pid(s))
        for key in [b"x" * (MAX_KEY_BYTES + 1), "y" * (MAX_KEY_BYTES + 1), "é" * (MAX_KEY_BYTES // 2 + 1)]:
            with pytest.raises(InputError, match="longer than"):
                if writer == "add":
                    s.add(key, fingerprint=1, pipeline_id=_pid(s))
                elif writer == "add_many":
                    s.add_many(["ok", key], fingerprints=[1, 2], pipeline_id=_pid(s))
                else:
                    s.bulk_load(["ok", key], [1, 2], pipeline_id=_pid(s))
        assert len(s) == 1 and list(s) == ["keep"]


@pytest.mark.parametrize("writer", ["add", "add_many", "bulk_load"])
def test_keys_at_the_limit_read_back_through_every_reader(tmp_path, writer):
    """Keys of exactly MAX_KEY_BYTES, written by each writer, read back via get, in, iteration, queries, keys_of, delete, re-add and export/import."""
    keys = _long_keys(MAX_KEY_BYTES) + ["short"]
    fps = np.array([10, 11, 12, 13], np.uint64)
    with fpstore.open(tmp_path / "s", k=5) as s:
        pid = _pid(s)
        _write(s, writer, keys, fps)
        assert sorted(map(repr, s)) == sorted(map(repr, keys))
        for key, fp in zip(keys, fps.tolist()):
            assert key in s
            assert s.get(key).fingerprint == fp
        hits = s.query(fingerprint=10, pipeline_id=pid, k=3)
        assert {repr(m.key) for m in hits} == {repr(k) for k in keys}
        q, ids, _ = s.query_many(np.array([10], np.uint64), pipeline_id=pid)
        assert sorted(map(repr, s.keys_of(ids))) == sorted(map(repr, keys))
        buf = io.BytesIO()
        assert export_store(s, buf) == 4
        buf.seek(0)
        import_stream(buf, str(tmp_path / "copy"))
        with fpstore.open(tmp_path / "copy", readonly=True) as c:
            assert sorted(map(repr, c)) == sorted(map(repr, keys))
        s.add(keys[0], fingerprint=99, pipeline_id=pid)  # re-adding
        assert s.get(keys[0]).fingerprint == 99
        assert s.delete(keys[1]) and keys[1] not in s
        assert s.near_duplicate_pairs(k=3)[0].size >= 1


def test_checkpoint_positions_over_the_limit_are_refused_and_at_the_limit_read_back(tmp_path):
    """A checkpoint position that packs over MAX_CHECKPOINT_BYTES is refused; one at the limit reads back."""
    import msgpack

    with fpstore.open(tmp_path / "s", k=5) as s:
        pid = _pid(s)
        big = "p" * (MAX_CHECKPOINT_BYTES + 1)
        with pytest.raises(InputError, match="checkpoint"):
            s.add_many(["a"], fingerprints=[1], pipeline_id=pid, checkpoint=("feed", big))
        assert "a" not in s
        fits = "p" * (MAX_CHECKPOINT_BYTES - 3)
        assert len(msgpack.packb(fits)) == MAX_CHECKPOINT_BYTES
        s.add_many(["a"], fingerprints=[1], pipeline_id=pid, checkpoint=("feed", fits))
        assert s.checkpoint("feed") == fits


# -- case 3: only integers are fingerprints -----------------------------------------------------------------

from decimal import Decimal  # noqa: E402
from fractions import Fraction  # noqa: E402

_NOT_FINGERPRINTS = [
    [np.float32(1.7)], ["77"], [Fraction(7, 2)], [Decimal("7.9")], [b"12"], [np.True_], [True], [1.5], [1.0],
    [None], [[1]], [np.array([1], np.uint64)], np.array([1.0]), np.array(["1"]), np.array([1], dtype=object), "12", b"12",
]


@pytest.mark.parametrize("values", _NOT_FINGERPRINTS, ids=lambda v: repr(v)[:30])
def test_non_integers_are_not_fingerprints(tmp_path, values):
    """add_many, bulk_load and query_many refuse every non-integer with InputError instead of converting it."""
    with fpstore.open(tmp_path / "s") as s:
        pid = _pid(s)
        n = len(values)
        keys = [f"k{i}" for i in range(n)]
        with pytest.raises(InputError):
            s.add_many(keys, fingerprints=values, pipeline_id=pid)
        with pytest.raises(InputError):
            s.bulk_load(keys, values, pipeline_id=pid)
        with pytest.raises(InputError):
            s.query_many(values, pipeline_id=pid)
        assert len(s) == 0


def test_integers_of_every_kind_are_fingerprints(tmp_path):
    """Python ints, numpy integer scalars and uint64 arrays are accepted unchanged."""
    with fpstore.open(tmp_path / "s", k=5) as s:
        pid = _pid(s)
        s.add_many(["a", "b", "c"], fingerprints=[1, np.uint64(2**64 - 1), np.int32(7)], pipeline_id=pid)
        assert [s.get(k).fingerprint for k in "abc"] == [1, 2**64 - 1, 7]


# -- case 16: malformed batches and names are clear errors --------------------------------------------------


@pytest.mark.parametrize(
    "field, value",
    [
        ("short", np.zeros(1, bool)),
        ("short", np.zeros((3, 1), bool)),
        ("content_hashes", np.zeros((1, 2), np.uint64)),
        ("content_hashes", np.zeros((3,), np.uint64)),
        ("content_hashes", np.zeros((3, 3), np.uint64)),
        ("content_hashes", [[1, 2]] * 3),
        ("tokens", np.zeros(2, np.int64)),
        ("values", np.zeros((3, 1), np.uint64)),
        ("values", np.zeros(3, np.int64)),
    ],
)
def test_fingerprints_of_the_wrong_shape_raise_input_error(tmp_path, field, value):
    """A Fingerprints batch whose columns have the wrong length, shape or dtype is an InputError, not a numpy error."""
    from fpstore.fingerprint.pipeline import Fingerprints

    with fpstore.open(tmp_path / "s") as s:
        cols = {"values": np.arange(3, dtype=np.uint64), "pipeline_id": _pid(s)}
        cols[field] = value
        with pytest.raises(InputError):
            fps = Fingerprints(**cols)
            s.add_many(["a", "b", "c"], fingerprints=fps)
        assert len(s) == 0


def test_checkpoint_name_with_a_surrogate_raises_input_error(tmp_path):
    """A checkpoint name that is not encodable as UTF-8 is an InputError in writes and reads."""
    with fpstore.open(tmp_path / "s") as s:
        with pytest.raises(InputError):
            s.add_many(["a"], fingerprints=[1], pipeline_id=_pid(s), checkpoint=("bad\udc80", 1))
        with pytest.raises(InputError):
            s.checkpoint("bad\udc80")
        assert "a" not in s


# -- case 4: export then import keeps everything ------------------------------------------------------------


def _dump(store: fpstore.Store) -> dict:
    """Everything a store holds that a user can see: every document's fields and every checkpoint."""
    docs = {}
    for key in store:
        d = store.get(key)
        docs[repr(key)] = (d.fingerprint, d.content_hash, None if d.canonical is None else repr(d.canonical), d.short)
    return {"docs": docs, "checkpoints": store.checkpoints(), "count": len(store)}


def _populate(s: fpstore.Store) -> None:
    rng = np.random.default_rng(4)
    base = ["the quick brown fox jumps over the lazy dog and runs far away into the forest " * 3 + f"page {i}" for i in range(40)]
    for i, text in enumerate(base):
        s.add(f"p{i}", text=text)  # near-duplicates of each other: canonical links
        s.add(f"copy{i}", text=text)  # exact duplicates
    s.add("tiny", text="soft 404")
    s.add("tiny2", text="soft 404")  # short texts: matched by content hash
    s.add_many([i for i in range(100, 130)], fingerprints=rng.integers(0, 2**63, 30, dtype=np.uint64), pipeline_id=_pid(s), checkpoint=("feed", {"file": "a.jsonl", "line": 30}))
    s.bulk_load(np.arange(1000, 1050), rng.integers(0, 2**63, 50, dtype=np.uint64), pipeline_id=_pid(s))
    s.add(b"bytes-key", fingerprint=12345, pipeline_id=_pid(s))
    s.add("copy7", text=base[7] + " edited")  # re-added: a new id
    # A canonical that comes after its variant in id order: the import must hold the variant back.
    s.add_many(["fwd-variant", "fwd-canonical"], fingerprints=[777, 778], pipeline_id=_pid(s), canonicals=["fwd-canonical", None])
    s.delete("copy3")
    s.set_checkpoint("other", [1, 2, 3])


def _exported_store(path):
    """Populate a store at `path` and export it: its dump, and the export stream rewound."""
    with fpstore.open(path, k=5) as a:
        _populate(a)
        want = _dump(a)
        buf = io.BytesIO()
        export_store(a, buf)
    buf.seek(0)
    return want, buf


def test_export_import_round_trip_preserves_everything(tmp_path):
    """A store exported and imported into a new path dumps equal: documents, canonical keys, short flags, content hashes, checkpoints."""
    want, buf = _exported_store(tmp_path / "a")
    assert sum(1 for v in want["docs"].values() if v[2] is not None) > 20
    import_stream(buf, str(tmp_path / "b"), batch_size=7)
    with fpstore.open(tmp_path / "b", readonly=True) as b:
        assert _dump(b) == want


def test_import_into_an_existing_store_preserves_canonicals_and_keeps_its_checkpoints(tmp_path):
    """Importing into an existing store carries canonical keys, adds checkpoints it lacks and leaves its own alone."""
    want, buf = _exported_store(tmp_path / "a")
    with fpstore.open(tmp_path / "b", k=5) as b:
        b.set_checkpoint("other", "mine")
    import_stream(buf, str(tmp_path / "b"), batch_size=5)
    with fpstore.open(tmp_path / "b", readonly=True) as b:
        got = _dump(b)
    assert got["docs"] == want["docs"]
    assert got["checkpoints"]["other"] == "mine"
    assert got["checkpoints"]["feed"] == want["checkpoints"]["feed"]


def test_add_many_with_canonical_keys(tmp_path):
    """add_many records canonical keys naming stored documents or documents of the same batch, and refuses unknown ones whole."""
    with fpstore.open(tmp_path / "s", k=5) as s:
        pid = _pid(s)
        s.add("old", fingerprint=1, pipeline_id=pid)
        s.add_many(["x", "y", "z"], fingerprints=[2, 3, 4], pipeline_id=pid, canonicals=["old", "z", None])
        assert s.get("x").canonical == "old"
        assert s.get("y").canonical == "z"
        assert s.get("z").canonical is None
        with pytest.raises(InputError, match="canonical"):
            s.add_many(["w"], fingerprints=[5], pipeline_id=pid, canonicals=["nowhere"])
        assert "w" not in s
        with pytest.raises(InputError):
            s.add_many(["w"], fingerprints=[5], pipeline_id=pid, canonicals=["a", "b"])


def test_add_many_of_an_unchanged_document_keeps_its_id(tmp_path):
    """Re-adding a document unchanged in a batch keeps its id, so canonical links to it survive a rerun."""
    with fpstore.open(tmp_path / "s", k=5) as s:
        pid = _pid(s)
        first = s.add_many(["c", "v"], fingerprints=[1, 3], pipeline_id=pid, canonicals=[None, "c"])
        again = s.add_many(["c"], fingerprints=[1], pipeline_id=pid)
        assert again[0] == first[0]
        assert s.get("v").canonical == "c"
        changed = s.add_many(["c"], fingerprints=[2], pipeline_id=pid)
        assert changed[0] != first[0]


from hypothesis import given, settings, strategies as st  # noqa: E402

_LENGTHS = st.sampled_from([0, 1, 2, 399, 400, 401, 511, 512, 4096, MAX_KEY_BYTES - 1, MAX_KEY_BYTES])


@st.composite
def _keys(draw) -> object:
    kind = draw(st.sampled_from(["str", "bytes", "int", "surrogate"]))
    if kind == "int":
        return draw(st.integers(0, 2**64 - 1))
    n = draw(_LENGTHS)
    fill = draw(st.binary(min_size=1, max_size=8))
    raw = (fill * (n // len(fill) + 1))[:n]
    if kind == "bytes":
        return raw
    text = raw.decode("latin-1").encode("ascii", "replace").decode("ascii")
    if kind == "surrogate" and n >= 3:
        text = text[: n - 3] + "\udc80"  # a lone surrogate takes 3 bytes: the key stays at n bytes
    return text


@settings(max_examples=20, deadline=None)
@given(keys=st.lists(_keys(), min_size=1, max_size=4, unique_by=repr), writer=st.sampled_from(["add", "add_many", "bulk_load"]))
def test_whatever_a_writer_accepts_every_reader_reads(tmp_path_factory, keys, writer):
    """Property: keys a writer accepts (types, lengths up to MAX_KEY_BYTES) read back through get, in, iteration, keys_of and an export/import."""
    d = tmp_path_factory.mktemp("prop")
    fps = np.arange(1, len(keys) + 1, dtype=np.uint64)
    with fpstore.open(d / "s", k=5) as s:
        pid = _pid(s)
        _write(s, writer, keys, fps)
        assert sorted(map(repr, s)) == sorted(map(repr, keys))
        for key, fp in zip(keys, fps.tolist()):
            assert key in s and s.get(key).fingerprint == fp
        _, ids, _ = s.query_many(fps, pipeline_id=pid, k=0)
        assert sorted(map(repr, s.keys_of(ids))) == sorted(map(repr, keys))
        want = _dump(s)
        buf = io.BytesIO()
        export_store(s, buf)
    buf.seek(0)
    import_stream(buf, str(d / "copy"))
    with fpstore.open(d / "copy", readonly=True) as c:
        assert _dump(c) == want
