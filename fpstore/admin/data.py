"""``fpstore-admin`` commands that read or write a store's documents: compact, redesign, query, dedup,
export, import."""

from __future__ import annotations

import argparse
import csv
import heapq
import itertools
import os
import signal
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import numpy as np

from fpstore.admin.options import Damaged, open_checked, open_store
from fpstore.admin.output import (
    EXIT_FINDINGS,
    EXIT_INTERRUPTED,
    EXIT_OK,
    Bar,
    dumps,
    key_out,
    key_text,
    mib,
    note,
    output_file,
    print_json,
    stages,
    stdin_stream,
    stdout_stream,
    want_progress,
)
from fpstore.closing import Closing
from fpstore.errors import CorruptionError, InputError


def cmd_compact(args: argparse.Namespace) -> int:
    """Merge incremental tables and runs into one run per table, dropping deleted entries."""
    with open_store(args.store, readonly=False) as store:
        before = store.info()
        what = "merging every run into one, then rewriting the file without free pages" if args.file else "merging every run into one"
        stages("compact", args)(f"{what} ({before['documents']:,} documents, {len(before['runs'])} runs)")
        t0 = time.monotonic()
        if args.file:
            result = store.compact_file()
        else:
            with Bar("compact", "tables", want_progress(args)) as bar:
                result = store.compact(progress=bar)
        after = store.info()
    data = {
        "result": result if isinstance(result, dict) else None,
        "seconds": round(time.monotonic() - t0, 3),
        "pages_used_before": before["lmdb"]["pages_used"],
        "pages_used_after": after["lmdb"]["pages_used"],
        "file_size": after["file_size"],
    }
    if args.json:
        print_json(data)
    else:
        res = ", ".join(f"{k.replace('_', ' ')} {v:,}" for k, v in (data["result"] or {}).items())
        print(f"compacted {args.store} in {data['seconds']:.2f} s" + (f": {res}" if res else ""))
        if args.file:
            print(f"file {mib(data['file_size'])} (rewritten without free pages)")
        else:
            print(f"file {mib(data['file_size'])}; freed pages are reused by later writes (--file shrinks the file)")
    return EXIT_OK


def cmd_redesign(args: argparse.Namespace) -> int:
    """Index a store for another radius: rebuild its tables under a new design, in one transaction."""
    with open_store(args.store, readonly=False) as store:
        before = store.info()
        radius = "the candidate radius" if args.k is None else f"k={args.k}"
        stages("redesign", args)(f"indexing {before['documents']:,} documents again for {radius} (design {args.design}; one transaction)")
        t0 = time.monotonic()
        with Bar("redesign", "tables", want_progress(args)) as bar:
            result = store.redesign(args.k, threshold=args.threshold, design=args.design, expected_size=args.expected_size, progress=bar)
        data = {**result, "seconds": round(time.monotonic() - t0, 3), "file_size": store.info()["file_size"]}
    k = result["k"]
    verified = "" if result["threshold"] is None else f", threshold {result['threshold']:g}"
    if args.json:
        print_json(data)
    elif result["design_before"] == result["design_after"]:
        print(f"{args.store} already has design {result['design_after']}: nothing to do for the tables (k is now {k}{verified})")
    else:
        print(
            f"redesigned {args.store} from {result['design_before']} to {result['design_after']} (exact up to k={k}{verified}) "
            f"in {data['seconds']:.2f} s: {result['entries']:,} documents; file {mib(data['file_size'])}"
        )
    return EXIT_OK


# -- query ---------------------------------------------------------------------------------------------------


def _read_text(args: argparse.Namespace) -> str | None:
    sources = [x for x in (args.text, args.file, args.fingerprint, args.image) if x is not None]
    if len(sources) != 1:
        raise InputError("give exactly one of TEXT, '-' (stdin), --file FILE, --image FILE or --fingerprint HEX")
    if args.image is not None:
        return None
    if args.file is not None:
        with open(args.file, "rb") as fh:
            return fh.read().decode("utf-8", errors="replace")
    if args.text == "-":
        return stdin_stream().read().decode("utf-8", errors="replace")
    return args.text


def cmd_query(args: argparse.Namespace) -> int:
    """Stored documents within k bits of a text (argument, '-' for stdin, --file), an image (--image) or a fingerprint."""
    from fpstore.fingerprint.image import ImagePipeline
    from fpstore.fingerprint.kinds import is_image

    text = _read_text(args)
    with open_store(args.store) as store:
        info: dict[str, Any] = {}
        image_store = is_image(store.pipeline)
        if args.image is not None and not image_store:
            raise InputError(f"{args.store} holds fingerprints of texts ({store.pipeline.kind}): give TEXT or --file, not --image")
        if text is not None and image_store:
            raise InputError(f"{args.store} holds fingerprints of images ({store.pipeline.kind}): give --image FILE, not a text")
        if args.image is not None:
            pipeline = store.pipeline
            assert isinstance(pipeline, ImagePipeline)
            with open(args.image, "rb") as fh:
                data = fh.read(pipeline.max_bytes + 1)
            try:
                sig = pipeline.signature(data)
            except InputError as exc:
                from fpstore.admin.ingest import image_reason

                raise InputError(f"{args.image}: {image_reason(exc)}") from None
            info.update({"fingerprint": f"{sig.fingerprint:016x}", "pixels": sig.tokens, "short": sig.short})
            matches = store.query(image=data, k=args.k, exhaustive=args.exhaustive, threshold=args.threshold)
        elif args.fingerprint is not None:
            digits = args.fingerprint.removeprefix("0x").removeprefix("0X")
            if not 1 <= len(digits) <= 16 or any(c not in "0123456789abcdefABCDEF" for c in digits):
                raise InputError(f"--fingerprint wants up to 16 hex digits, got {args.fingerprint!r}")
            fp = int(digits, 16)
            matches = store.query(
                fingerprint=fp, pipeline_id=store.pipeline.id, k=args.k, exhaustive=args.exhaustive, threshold=args.threshold
            )
            info["fingerprint"] = f"{fp:016x}"
        else:
            assert text is not None  # no --fingerprint: _read_text read the text
            sig = store.pipeline.signature(text)
            info.update({"fingerprint": f"{sig.fingerprint:016x}", "tokens": sig.tokens, "short": sig.short})
            matches = store.query(text=text, k=args.k, exhaustive=args.exhaustive, threshold=args.threshold)
        k = store.k if args.k is None else args.k
        rule = _rule(store, args)
    if args.limit is not None:
        matches = matches[: args.limit]
    if args.parquet:
        import pyarrow as pa

        from fpstore.store.rows import key_column

        pq = _parquet()
        table = pa.table(
            {
                "key": pa.array([key_column(m.key)[0] for m in matches], pa.string()),
                "key_type": pa.array([key_column(m.key)[1] for m in matches], pa.string()),
                "distance": pa.array([m.distance for m in matches], pa.uint8()),
                "fingerprint": pa.array([f"{m.fingerprint:016x}" for m in matches], pa.string()),
                "similarity": pa.array([m.similarity for m in matches], pa.float64()),
            }
        )
        pq.write_table(table, args.parquet)
        note(f"wrote {len(matches)} match{'es' * (len(matches) != 1)} to {args.parquet}")
    if args.json:
        print_json(
            {
                **info,
                "k": k,
                "matches": [
                    {"key": key_out(m.key), "distance": m.distance, "fingerprint": f"{m.fingerprint:016x}", "similarity": m.similarity}
                    for m in matches
                ],
            }
        )
    else:
        noun = "image: tiny or flat" if "pixels" in info else "text"
        short = f" (short {noun}: exact matches only)" if info.get("short") else ""
        # A short text or image is matched exactly (by content hash), whatever the rule.
        print(f"fingerprint {info['fingerprint']}{short}: {len(matches)} match{'es' * (len(matches) != 1)}{'' if short else ' ' + rule}")
        for m in matches:
            similarity = "" if m.similarity is None else f"  J~{m.similarity:.3f}"
            print(f"  d={m.distance:2d}{similarity}  {m.fingerprint:016x}  {key_text(m.key)}")
    return EXIT_OK if matches else EXIT_FINDINGS


# -- dedup ---------------------------------------------------------------------------------------------------


class PairSpill(Closing):
    """The pairs of a streamed join, held for output sorted by distance, then ``id_a``, then
    ``id_b``, in bounded memory: up to :attr:`BUFFER` pairs are sorted in memory and written as one
    sorted run to a temporary file per distance (16 bytes a pair, under ``TMPDIR``); reading back
    merges a distance's runs."""

    #: Pairs held in memory before they are sorted and written out (64 MiB).
    BUFFER = 1 << 22

    def __init__(self, k: int) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="fpstore-dedup-")
        self._paths = [os.path.join(self._dir.name, f"d{d}.bin") for d in range(k + 1)]
        self._held: list[list[np.ndarray]] = [[] for _ in range(k + 1)]
        self._runs: list[list[tuple[int, int]]] = [[] for _ in range(k + 1)]  # (first row, rows) per run
        self._written = [0] * (k + 1)
        self._buffered = 0
        self.count = 0

    def add(self, a: np.ndarray, b: np.ndarray, d: np.ndarray) -> None:
        for dist in np.unique(d).tolist():
            sel = d == dist
            self._held[dist].append(np.stack([a[sel], b[sel]], axis=1).astype("<i8"))
            n = int(sel.sum())
            self.count += n
            self._buffered += n
        if self._buffered >= self.BUFFER:
            self._spill()

    def _spill(self) -> None:
        for dist, held in enumerate(self._held):
            if not held:
                continue
            rows = np.concatenate(held)
            rows = rows[np.lexsort((rows[:, 1], rows[:, 0]))]
            with open(self._paths[dist], "ab") as f:
                rows.tofile(f)
            self._runs[dist].append((self._written[dist], len(rows)))
            self._written[dist] += len(rows)
            self._held[dist] = []
        self._buffered = 0

    def chunks(self, size: int = 10000) -> Iterator[tuple[np.ndarray, np.ndarray, int]]:
        """``(id_a, id_b, distance)`` in chunks of at most ``size`` pairs, in output order."""
        self._spill()
        for dist, runs in enumerate(self._runs):
            if not runs:
                continue
            rows = np.memmap(self._paths[dist], dtype="<i8", mode="r").reshape(-1, 2)
            if len(runs) == 1:
                for lo in range(0, len(rows), size):
                    part = np.array(rows[lo : lo + size])
                    yield part[:, 0], part[:, 1], dist
                continue
            merged = heapq.merge(*(_run_rows(rows[first : first + n]) for first, n in runs))
            while chunk := list(itertools.islice(merged, size)):
                part = np.array(chunk, dtype=np.int64)
                yield part[:, 0], part[:, 1], dist
            del rows

    def close(self) -> None:
        self._dir.cleanup()


def _run_rows(rows: np.ndarray, step: int = 65536) -> Iterator[tuple[int, int]]:
    for lo in range(0, len(rows), step):
        part = np.array(rows[lo : lo + step])
        yield from zip(part[:, 0].tolist(), part[:, 1].tolist())


def _rule(store: Any, args: argparse.Namespace) -> str:
    """What made a match or a pair, in words: ``"within k=7 and of estimated similarity >= 0.8"``."""
    k = store.k if args.k is None else args.k
    threshold = store.threshold if args.threshold is None else args.threshold
    return f"within k={k}" + (f" and of estimated similarity >= {threshold}" if threshold else "")


def _dedup_join(store: Any, args: argparse.Namespace) -> tuple[str, list[Any] | None, PairSpill | None]:
    """``(rule, clusters, None)`` with ``--clusters`` (those of at least ``--min-size``), else
    ``(rule, None, spill)``: the streamed pairs, to be read back sorted by distance, then ids (the
    caller closes it); ``rule`` says what made a pair ("within k=7 and of estimated similarity >=
    0.8"). The join draws a progress bar."""
    k, rule = store.k if args.k is None else args.k, _rule(store, args)
    with Bar("join", "table", want_progress(args)) as bar:
        if args.clusters:
            return rule, [c for c in store.clusters(k, progress=bar, threshold=args.threshold) if len(c.keys) >= args.min_size], None
        spill = PairSpill(k)
        try:
            for a, b, d in store.iter_near_duplicate_pairs(k, progress=bar, threshold=args.threshold):
                spill.add(a, b, d)
        except BaseException:
            spill.close()
            raise
    return rule, None, spill


def _dedup_summary(rule: str, clusters: list[Any] | None, pairs: PairSpill | None) -> str:
    if clusters is not None:
        return f"{len(clusters):,} clusters of {sum(len(c.keys) for c in clusters):,} documents {rule}"
    assert pairs is not None  # one of the two is given
    return f"{pairs.count:,} pairs {rule}"


def cmd_dedup(args: argparse.Namespace) -> int:
    """Every near-duplicate pair within k bits, or the clusters they form, as JSONL, CSV or Parquet."""
    if args.format == "parquet":
        return _dedup_parquet(args)
    pairs: PairSpill | None = None
    try:
        with open_store(args.store) as store:
            rule, clusters, pairs = _dedup_join(store, args)
            with output_file(args.output) as out:
                writer = csv.writer(out) if args.format == "csv" else None
                if clusters is not None:
                    if writer:
                        writer.writerow(["cluster", "canonical", "key"])
                    for c_no, c in enumerate(clusters, 1):
                        if writer:
                            for key in c.keys:
                                writer.writerow([c_no, key_text(c.canonical), key_text(key)])
                        else:
                            record = {
                                "cluster": c_no,
                                "size": len(c.keys),
                                "canonical": key_out(c.canonical),
                                "keys": [key_out(x) for x in c.keys],
                            }
                            out.write(dumps(record) + "\n")
                else:
                    assert pairs is not None  # not --clusters
                    if writer:
                        writer.writerow(["a", "b", "distance"])
                    for a, b, dist in pairs.chunks():
                        ka, kb = store.keys_of(a.tolist()), store.keys_of(b.tolist())
                        for x, y in zip(ka, kb):
                            if writer:
                                writer.writerow([key_text(x), key_text(y), dist])
                            else:
                                out.write(dumps({"a": key_out(x), "b": key_out(y), "distance": dist}) + "\n")
        note(_dedup_summary(rule, clusters, pairs))
    finally:
        if pairs is not None:
            pairs.close()
    return EXIT_OK


def _dedup_parquet(args: argparse.Namespace) -> int:
    """:func:`cmd_dedup` as one Parquet file: pairs ``a, b, distance`` (written a row group at a
    time as they are read back) or clusters ``cluster, canonical, key`` (keys as text, as in
    ``dump``)."""
    from fpstore.store.rows import key_column

    pq = _parquet()
    _refuse_terminal(args.output, "Parquet")
    import pyarrow as pa

    with open_store(args.store) as store, output_file(args.output, binary=True) as sink:
        rule, clusters, pairs = _dedup_join(store, args)
        if clusters is not None:
            members = [(n, key_column(c.canonical)[0], key_column(key)[0]) for n, c in enumerate(clusters, 1) for key in c.keys]
            numbers, canonicals, keys = zip(*members) if members else ((), (), ())
            table = pa.table(
                {
                    "cluster": pa.array(numbers, pa.int64()),
                    "canonical": pa.array(canonicals, pa.string()),
                    "key": pa.array(keys, pa.string()),
                }
            )
            pq.write_table(table, sink)
        else:
            assert pairs is not None  # not --clusters
            with pairs:
                schema = pa.schema([("a", pa.string()), ("b", pa.string()), ("distance", pa.uint8())])
                with pq.ParquetWriter(sink, schema) as writer:
                    for a, b, dist in pairs.chunks(65536):
                        ka = [key_column(x)[0] for x in store.keys_of(a.tolist())]
                        kb = [key_column(x)[0] for x in store.keys_of(b.tolist())]
                        distances = pa.array(np.full(len(ka), dist, np.uint8), pa.uint8())
                        writer.write_table(
                            pa.table({"a": pa.array(ka, pa.string()), "b": pa.array(kb, pa.string()), "distance": distances})
                        )
    note(_dedup_summary(rule, clusters, pairs))
    return EXIT_OK


def _refuse_terminal(path: str | None, what: str) -> None:
    """Binary output goes to a file or a pipe, not to a terminal (nor to a closed stdout)."""
    if path in (None, "-") and stdout_stream().isatty():
        raise InputError(f"refusing to write {what} to a terminal: pass -o FILE or redirect stdout")


def _parquet() -> Any:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise InputError("Parquet output needs pyarrow: pip install 'fpstore[arrow]'") from None
    return pq


# -- dump ------------------------------------------------------------------------------------------------------


def cmd_dump(args: argparse.Namespace) -> int:
    """Every document as a table: JSON Lines, CSV or Parquet (columns in docs/cli.md; a store
    with a sketch adds ``sketch``)."""
    from fpstore.store.rows import columns_of, record_batches, store_rows

    if args.format == "parquet":
        _refuse_terminal(args.output, "Parquet")
        pq = _parquet()

        with open_store(args.store) as store:
            batches = record_batches(store)
            first = next(batches)
            n = 0
            with output_file(args.output, binary=True) as sink, pq.ParquetWriter(sink, first.schema) as writer:
                for batch in (first, *batches):
                    writer.write_batch(batch)
                    n += batch.num_rows
        note(f"dumped {n:,} documents")
        return EXIT_OK
    n = 0
    with open_store(args.store) as store, output_file(args.output) as out:
        writer = csv.writer(out) if args.format == "csv" else None
        columns = columns_of(store)
        if writer:
            writer.writerow(columns)
        for row in store_rows(store):
            if writer:
                writer.writerow(["" if row[c] is None else row[c] for c in columns])
            else:
                out.write(dumps(row) + "\n")
            n += 1
    note(f"dumped {n:,} documents")
    return EXIT_OK


# -- export / import -----------------------------------------------------------------------------------------


def cmd_export(args: argparse.Namespace) -> int:
    """Write every document to a versioned, zstd-compressed msgpack stream (see docs/cli.md)."""
    from fpstore.admin.exchange import export_store

    to_stdout = args.output in (None, "-")
    _refuse_terminal(args.output, "a binary stream")
    # A damaged store is refused before anything is written (exit 1). There is no salvage mode:
    # reading around a damaged page means walking B-trees that LMDB would abort on.
    with open_checked(args.store) as store, Bar("export", "doc", want_progress(args)) as bar:
        try:
            with output_file(args.output, binary=True) as fh:
                n = export_store(store, fh, level=args.level, progress=bar)
        except CorruptionError as exc:
            where = "the stream on stdout is incomplete" if to_stdout else f"{args.output} was not written"
            raise Damaged(f"{exc}; the export stopped: {where}") from None
    size = None if to_stdout else os.path.getsize(args.output)
    note(f"exported {n:,} documents" + (f" to {args.output} ({mib(size)})" if size is not None else ""))
    return EXIT_OK


def cmd_import(args: argparse.Namespace) -> int:
    """Read an export stream into a new store (with the stream's pipeline) or an existing one."""
    from fpstore.admin.exchange import import_stream

    existing = os.path.exists(os.path.join(args.store, "data.mdb"))

    def on_signal(signum: int, frame: Any) -> None:
        # SIGTERM takes Ctrl-C's path: import_stream removes the hidden store it was building
        # (a new path), or keeps the batches it committed (an existing store; a rerun resumes).
        # Further signals are ignored so that the cleanup runs to its end.
        for s in (signal.SIGINT, signal.SIGTERM):
            signal.signal(s, signal.SIG_IGN)
        raise KeyboardInterrupt

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        with Bar("import", "doc", want_progress(args)) as bar:
            if args.input in (None, "-"):
                result = import_stream(stdin_stream(), args.store, batch_size=args.batch_size, progress=bar)
            else:
                with open(args.input, "rb") as fh:
                    result = import_stream(fh, args.store, batch_size=args.batch_size, progress=bar)
    except KeyboardInterrupt:
        note(
            "interrupted; "
            + (
                "the batches committed are kept: rerun the same command to resume"
                if existing
                else "nothing was imported (the half-built store was removed)"
            )
        )
        return EXIT_INTERRUPTED
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    data = {
        "store": result.path,
        "created": result.created,
        "records": result.records,
        "pipeline_id": result.pipeline_id,
        "design": result.design,
    }
    if args.json:
        print_json(data)
    else:
        what = "created" if result.created else "updated"
        print(f"{what} {result.path}: {result.records:,} documents imported (pipeline {result.pipeline_id}, design {result.design})")
    return EXIT_OK
