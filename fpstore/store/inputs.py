"""Checks of what callers give the store: raw fingerprints, the pipeline id that made them,
batches of texts or fingerprints, and one add made ready for its transaction."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from fpstore.errors import InputError, PipelineMismatchError
from fpstore.fingerprint.kinds import AnyPipeline, is_image
from fpstore.fingerprint.pipeline import SKETCH_BITS, Fingerprints, Pipeline
from fpstore.hamming import RawFingerprints, as_fingerprint_array
from fpstore.store.header import encode_checkpoint
from fpstore.store.keys import FLAG_SHORT, FLAG_TEXT, LOOKUP_KEY_BYTES, Key, typed_key

__all__ = [
    "Batch",
    "OneAdd",
    "check_pipeline_id",
    "fingerprint_int",
    "batch_adds",
    "prepare_add",
    "prepare_batch",
    "load_columns",
    "pack_adds",
    "unpack_adds",
    "signature_of",
    "signatures",
    "content_name",
]


class OneAdd(NamedTuple):
    """One document checked and fingerprinted, ready for a write transaction: its typed key,
    fingerprint, content hash (texts only), flags, the ``on_duplicate`` rule, and the checkpoint's
    key and value to record with it. A named tuple: :meth:`Store.add_each` makes one per document,
    at a quarter of a frozen dataclass's cost."""

    key: Key
    typed: bytes
    fp: int
    content_hash: bytes | None
    short: bool
    flags: int
    on_duplicate: str
    checkpoint: tuple[bytes, bytes] | None
    #: The verification sketch (uint64[W]) when the store's pipeline makes one.
    sketch: np.ndarray | None = None


def content_name(pipeline: AnyPipeline) -> str:
    """What the store's pipeline fingerprints, as its argument is named: ``text`` or ``image``."""
    return "image" if is_image(pipeline) else "text"


def signature_of(
    pipeline: AnyPipeline, content: Any, fingerprint: object, pipeline_id: str | None
) -> tuple[int, bool, bytes | None, np.ndarray | None]:
    """``(fingerprint, short, content hash, sketch)`` of exactly one of ``content`` (a text or an
    image, of the kind ``pipeline`` fingerprints) and a raw ``fingerprint`` made by
    ``pipeline_id`` (no content hash); the sketch is the text's verification sketch (None for a
    raw fingerprint, or when the pipeline makes none)."""
    if (content is None) == (fingerprint is None):
        raise InputError(f"pass exactly one of {content_name(pipeline)}= and fingerprint=")
    if content is not None:
        sig = pipeline.signature(content)
        sketch = np.array(sig.sketch, dtype=np.uint64) if sig.sketch else None
        return sig.fingerprint, sig.short, sig.content_hash, sketch
    check_pipeline_id(pipeline, pipeline_id)
    return fingerprint_int(fingerprint), False, None, None


def prepare_add(
    pipeline: AnyPipeline,
    key: Key,
    content: Any,
    fingerprint: object,
    pipeline_id: str | None,
    on_duplicate: str,
    checkpoint: tuple[str, Any] | None,
) -> OneAdd:
    """Check one add's arguments and fingerprint its text or image (outside any transaction)."""
    typed = typed_key(key)
    if on_duplicate not in ("insert", "skip"):
        raise InputError(f"on_duplicate must be 'insert' or 'skip', got {on_duplicate!r}")
    fp, short, content_hash, sketch = signature_of(pipeline, content, fingerprint, pipeline_id)
    if pipeline.sketch_bits and sketch is None:
        raise InputError(_NO_SKETCH.format(bits=pipeline.sketch_bits))
    flags = (FLAG_TEXT if content is not None else 0) | (FLAG_SHORT if short else 0)
    ckpt = encode_checkpoint(checkpoint) if checkpoint is not None else None
    return OneAdd(key, typed, fp, content_hash, short, flags, on_duplicate, ckpt, sketch)


_ONE_ADD_FIELDS = len(OneAdd._fields)


def pack_adds(adds: Sequence[OneAdd]) -> tuple[Any, ...]:
    """``adds`` as one flat tuple of their fields (:func:`unpack_adds` makes them again): the
    stager keeps its staged adds so until their commit, where the cycle collector stops tracking
    them once it has looked at them."""
    return tuple(itertools.chain.from_iterable(adds))


def unpack_adds(packed: tuple[Any, ...]) -> list[OneAdd]:
    """The adds :func:`pack_adds` packed."""
    w = _ONE_ADD_FIELDS
    return [OneAdd._make(packed[i : i + w]) for i in range(0, len(packed), w)]


_NO_SKETCH = (
    "this store keeps a {bits}-bit verification sketch per document, which a bare fingerprint does not carry: "
    "add texts, or Fingerprints made by the store's pipeline (their sketches column); a store whose pipeline has no "
    "sketch takes bare fingerprints (fpstore.open(path, k=5) makes one)"
)


def fingerprint_int(value: object) -> int:
    """One fingerprint as a Python int, checked (no numpy on the single-query path)."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)) and 0 <= int(value) < 1 << 64:
        return int(value)
    raise InputError(f"fingerprint must be an int in 0..2**64-1, got {value!r}")


def check_pipeline_id(pipeline: AnyPipeline, pipeline_id: object) -> None:
    """PipelineMismatchError unless raw fingerprints come with ``pipeline``'s id, or, for a text
    pipeline without a sketch, with the id of the same pipeline with a sketch: a sketch leaves the
    64-bit fingerprint as it is (its words come from other seeds), so ``Pipeline()``'s fingerprints
    enter a store of ``Pipeline(sketch_bits=0)``, which keeps no sketch."""
    if pipeline_id is None:
        raise PipelineMismatchError(
            "raw fingerprints need the id of the pipeline that made them: pass pipeline_id= "
            f"(this store's is {pipeline.id}) or a Fingerprints object"
        )
    if pipeline_id != pipeline.id and pipeline_id not in _with_a_sketch(pipeline):
        unsketched = (
            isinstance(pipeline, Pipeline) and pipeline.sketch_bits and pipeline_id == dataclasses.replace(pipeline, sketch_bits=0).id
        )
        why = f" (this store's pipeline without its sketch: {_NO_SKETCH.format(bits=pipeline.sketch_bits)})" if unsketched else ""
        raise PipelineMismatchError(
            f"fingerprints from pipeline {pipeline_id!r} cannot enter this store, whose pipeline is {pipeline.id}{why}"
        )


_SKETCHED_IDS: dict[str, frozenset[str]] = {}


def _with_a_sketch(pipeline: AnyPipeline) -> frozenset[str]:
    """The ids of ``pipeline`` with each sketch length, when it is a text pipeline without one."""
    if not isinstance(pipeline, Pipeline) or pipeline.sketch_bits or pipeline.kind != "minhash1":
        return frozenset()
    ids = _SKETCHED_IDS.get(pipeline.id)
    if ids is None:
        ids = _SKETCHED_IDS[pipeline.id] = frozenset(dataclasses.replace(pipeline, sketch_bits=b).id for b in SKETCH_BITS if b)
    return ids


def signatures(
    pipeline: AnyPipeline,
    n: int | None,
    contents: Sequence[Any] | None,
    fingerprints: RawFingerprints | Fingerprints | None,
    pipeline_id: object,
    sketches_needed: bool = False,
) -> Fingerprints:
    """One :class:`Fingerprints` batch from exactly one of ``contents`` (texts or images, of the
    kind ``pipeline`` fingerprints) and ``fingerprints``; with ``sketches_needed`` (a write),
    checked to carry the sketches the store's pipeline makes."""
    noun = content_name(pipeline)
    if (contents is None) == (fingerprints is None):
        raise InputError(f"pass exactly one of {noun}s= and fingerprints=")
    if contents is not None:
        if isinstance(contents, (str, bytes)):
            raise InputError(f"{noun}s must be a sequence of {noun}s; use add() for one document")
        sigs = pipeline.signatures(contents)
    elif isinstance(fingerprints, Fingerprints):
        check_pipeline_id(pipeline, fingerprints.pipeline_id)
        if pipeline_id is not None and pipeline_id != fingerprints.pipeline_id:
            raise PipelineMismatchError("pipeline_id= differs from the Fingerprints object's pipeline id")
        sigs = fingerprints
        as_fingerprint_array(sigs.values)
    else:
        check_pipeline_id(pipeline, pipeline_id)
        sigs = Fingerprints(as_fingerprint_array(fingerprints), pipeline.id)
    if n is not None and len(sigs) != n:
        raise InputError(f"{n} keys but {len(sigs)} {noun + 's' if contents is not None else 'fingerprints'}")
    if sketches_needed and pipeline.sketch_bits:
        if sigs.sketches is None:
            raise InputError(_NO_SKETCH.format(bits=pipeline.sketch_bits))
        if sigs.sketches.shape[1] != pipeline.sketch_bits // 64:
            raise InputError(f"the sketches have {sigs.sketches.shape[1] * 64} bits; this store's pipeline makes {pipeline.sketch_bits}")
    return sigs


def load_columns(pipeline: AnyPipeline, n: int, fingerprints: RawFingerprints | Fingerprints, pipeline_id: object) -> np.ndarray:
    """A bulk-load chunk's fingerprints, checked: uint64[n], or uint64[n, 1 + W] with each
    document's sketch after its fingerprint when the store keeps sketches (one array, so that the
    chunking and deduplication of a load keep them together)."""
    sigs = signatures(pipeline, n, None, fingerprints, pipeline_id, sketches_needed=True)
    if sigs.sketches is None or not pipeline.sketch_bits:
        return sigs.values
    return np.column_stack([sigs.values, sigs.sketches])


@dataclass
class Batch:
    """An :meth:`Store.add_many` batch, checked before its transaction: typed keys, their
    fingerprints, typed canonical keys (None: its own) and the checkpoint's key and value.
    The last occurrence of a key wins; earlier ones are dropped before any write."""

    typed_keys: list[bytes]
    sigs: Fingerprints
    canon_typed: list[bytes | None]
    canonicals_given: bool
    ckpt: tuple[bytes, bytes] | None
    last: dict[bytes, int] = field(init=False)
    keep: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.last = {}
        for i, t in enumerate(self.typed_keys):
            self.last[t] = i
        self.keep = np.fromiter(sorted(self.last.values()), dtype=np.int64, count=len(self.last))


def prepare_batch(
    pipeline: AnyPipeline,
    keys: Sequence[Key],
    contents: Sequence[Any] | None,
    fingerprints: RawFingerprints | Fingerprints | None,
    pipeline_id: str | None,
    checkpoint: tuple[str, Any] | None,
    canonicals: Sequence[Key | None] | None,
) -> Batch:
    """Check an :meth:`Store.add_many` batch's arguments and fingerprint its texts or images."""
    if isinstance(keys, (str, bytes)):
        raise InputError("keys must be a sequence of keys; use add() for one document")
    typed_keys = [typed_key(k) for k in keys]
    sigs = signatures(pipeline, len(typed_keys), contents, fingerprints, pipeline_id, sketches_needed=True)
    ckpt = encode_checkpoint(checkpoint) if checkpoint is not None else None
    n = len(typed_keys)
    canon_typed: list[bytes | None] = [None] * n
    if canonicals is not None:
        if isinstance(canonicals, (str, bytes)) or not hasattr(canonicals, "__len__") or len(canonicals) != n:
            raise InputError(f"canonicals must be a sequence of one key (or None) per document: {n} keys")
        canon_typed = [None if c is None else typed_key(c, LOOKUP_KEY_BYTES) for c in canonicals]
    return Batch(typed_keys, sigs, canon_typed, canonicals is not None, ckpt)


def batch_adds(batch: Batch, keys: Sequence[Key]) -> list[OneAdd]:
    """The documents of ``batch`` as single adds, in the order given (:meth:`Store.add_each`)."""
    sigs, n = batch.sigs, len(batch.typed_keys)
    # Plain lists: indexing numpy arrays element by element costs more than the rest of the loop.
    short: list[bool] = sigs.short.tolist() if sigs.short is not None else [False] * n
    values: list[int] = sigs.values.tolist()
    text_flag = FLAG_TEXT if sigs.content_hashes is not None else 0
    sketches = sigs.sketches
    adds = []
    for i in range(n):
        s = short[i]
        adds.append(
            OneAdd(
                keys[i],
                batch.typed_keys[i],
                values[i],
                sigs.content_hash(i),
                s,
                text_flag | (FLAG_SHORT if s else 0),
                "insert",
                None,
                None if sketches is None else sketches[i],
            )
        )
    return adds
