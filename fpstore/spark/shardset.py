"""The shard stores of :func:`fpstore.spark.build_shards` answering like one store (needs no Spark),
the manifest that describes them, and the key routing both sides apply."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from typing import Any

import numpy as np

from fpstore.closing import Closing
from fpstore.errors import FormatError
from fpstore.fingerprint.pipeline import Fingerprints
from fpstore.hamming import RawFingerprints
from fpstore.index.design import Design
from fpstore.store.keys import Key, typed_key
from fpstore.store.results import Match, sort_matches

#: File name of the manifest :func:`build_shards` writes next to the shard stores.
MANIFEST = "manifest.json"
#: Manifest format; :class:`ShardSet` refuses any other.
MANIFEST_FORMAT = 1
#: The routing rule :func:`build_shards` applies and :func:`shard_of` computes.
ROUTING = "blake2b-64(typed key) mod shards"


def _typed_key(key: object) -> bytes:
    if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
        key = int(key)
    return typed_key(key)


def shard_of(key: Key | np.integer, shards: int) -> int:
    """The shard :func:`build_shards` routes document ``key`` to: the first 8 bytes of
    BLAKE2b(typed key) as a big-endian integer, modulo ``shards`` (the typed key is the store's:
    ``b"i"`` + 8 big-endian bytes for an int, ``b"s"`` + UTF-8 for a str, ``b"b"`` + the bytes)."""
    digest = hashlib.blake2b(_typed_key(key), digest_size=8).digest()
    return int.from_bytes(digest, "big") % shards


def shard_dir(s: int) -> str:
    return f"shard-{s:05d}"


class ShardSet(Closing):
    """The shard stores of :func:`build_shards`, opened read-only, answering like one store.

    Every query visits every shard (routing is by key). Document ids are per shard, so ids
    returned here are global: ``local_id * shards + shard`` (:meth:`split_id`); :meth:`keys_of`
    maps them to keys. Needs fpstore only, not Spark.
    """

    def __init__(self, path: str | os.PathLike[str], *, allow_network_fs: bool = False) -> None:
        import fpstore

        self.path = os.path.abspath(os.fspath(path))
        try:
            with open(os.path.join(self.path, MANIFEST), encoding="utf-8") as fh:
                manifest = json.load(fh)
        except FileNotFoundError:
            raise FormatError(f"{self.path} holds no {MANIFEST}: not a shard set") from None
        except ValueError as exc:
            raise FormatError(f"{MANIFEST} in {self.path} does not parse: {exc}") from None
        if not isinstance(manifest, dict) or manifest.get("format") != MANIFEST_FORMAT:
            raise FormatError(f"{MANIFEST} in {self.path}: unknown format {manifest.get('format')!r}")
        self.manifest = manifest
        self.design = Design.from_config(manifest["design"])
        self.pipeline_id: str = manifest["pipeline_id"]
        entries = sorted(manifest["shards"], key=lambda e: e["shard"])
        if [e["shard"] for e in entries] != list(range(len(entries))):
            raise FormatError(f"{MANIFEST} in {self.path}: shards must be numbered 0..n-1")
        self.stores = []
        try:
            for e in entries:
                sub = os.path.normpath(os.path.join(self.path, e["path"]))
                if os.path.dirname(sub) != self.path:
                    raise FormatError(f"{MANIFEST}: shard path {e['path']!r} leaves the shard set")
                st = fpstore.open(sub, readonly=True, create=False, allow_network_fs=allow_network_fs)
                self.stores.append(st)
                if st.pipeline.id != self.pipeline_id or st.design.config() != self.design.config():
                    raise FormatError(f"shard {e['shard']} differs from the manifest in pipeline or design")
        except BaseException:
            self.close()
            raise
        self.k: int = self.stores[0].k if self.stores else manifest["k"]
        self.pipeline = self.stores[0].pipeline

    @property
    def shards(self) -> int:
        return len(self.stores)

    def shard_of(self, key: Key | np.integer) -> int:
        """The shard that holds (or would hold) document ``key``."""
        return shard_of(key, self.shards)

    def split_id(self, gid: int) -> tuple[int, int]:
        """(shard, that shard's document id) of a global id."""
        local, shard = divmod(int(gid), self.shards)
        return shard, local

    def query(self, **kwargs: Any) -> list[Match]:
        """:meth:`Store.query` over every shard (same arguments), merged: sorted by distance then
        key; each ``Match.id`` is a global id."""
        out = []
        for s, st in enumerate(self.stores):
            for m in st.query(**kwargs):
                out.append(m._replace(id=m.id * self.shards + s))
        return sort_matches(out)

    def query_many(
        self,
        fingerprints: RawFingerprints | Fingerprints,
        *,
        pipeline_id: str | None = None,
        k: int | None = None,
        threshold: float | None = None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`Store.query_many` over every shard: ``(query_index, global id, distance)``
        sorted by query index, distance, id (``threshold``: shards whose pipeline has a sketch)."""
        qs, ids, ds = [], [], []
        for s, st in enumerate(self.stores):
            q, i, d = st.query_many(fingerprints, pipeline_id=pipeline_id, k=k, threshold=threshold)
            qs.append(q)
            ids.append(i * self.shards + s)
            ds.append(d)
        if not qs:
            return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.uint8)
        q, i, d = np.concatenate(qs), np.concatenate(ids), np.concatenate(ds)
        order = np.lexsort((i, d, q))
        return q[order], i[order], d[order]

    def keys_of(self, ids: Iterable[int]) -> list[Key]:
        """Keys of global ids (as :meth:`query_many` returns them)."""
        ids = [int(i) for i in ids]
        out: list[Any] = [None] * len(ids)
        by_shard: dict[int, list[tuple[int, int]]] = {}
        for pos, gid in enumerate(ids):
            shard, local = self.split_id(gid)
            by_shard.setdefault(shard, []).append((pos, local))
        for shard, items in by_shard.items():
            keys = self.stores[shard].keys_of([local for _, local in items])
            for (pos, _), key in zip(items, keys):
                out[pos] = key
        return out

    def __len__(self) -> int:
        return sum(len(st) for st in self.stores)

    def close(self) -> None:
        for st in getattr(self, "stores", []):
            st.close()

    def __repr__(self) -> str:
        return f"ShardSet({self.path!r}, shards={self.shards}, documents={len(self)})"
