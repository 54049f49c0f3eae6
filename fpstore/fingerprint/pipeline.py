"""The fingerprint pipeline: raw input → (HTML main content) → tokens → shingles → 64-bit fingerprint.

Two kinds of 64-bit fingerprint, compared alike by Hamming distance in the same index:

* ``"minhash1"`` (the default): 64 one-bit MinHash values over the set of distinct shingles;
  expected distance ``32 * (1 - J)`` for shingle-set Jaccard J. On the project's evaluation corpus
  it finds real near-duplicates best (F1 0.934 at k = 5, against a best of 0.486 for SimHash over
  raw HTML, byte-identical pairs left out; see ``docs/tuning.md``).
* ``"simhash64"``: Charikar's SimHash with tf or idf weights (the original scheme, kept so that
  stores made with it stay readable and comparable).

Inputs that look like HTML are reduced to their main content first (``html="main-v2"``, the
default; ``fpstore/fingerprint/html.py``); ``html="off"`` fingerprints markup as text.

A :class:`Pipeline` is a frozen set of parameters. Its :attr:`Pipeline.config` is a plain dict and
its :attr:`Pipeline.id` a digest of that dict's canonical msgpack form: a store records both and
refuses fingerprints made by any other pipeline, because fingerprints of two pipelines are not
comparable and mixing them silently breaks every answer.
"""

from __future__ import annotations

import functools
import hashlib
import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgpack
import numpy as np

from fpstore import _backend
from fpstore.errors import FormatError, InputError, InputTypeError
from fpstore.fingerprint import _simhash_py as _spec
from fpstore.fingerprint import html as _html
from fpstore.fingerprint import text as _text
from fpstore.fingerprint.text import Text
from fpstore.mixing import fmix64
from fpstore.parallel import available_cores, executor

__all__ = [
    "DEFAULT_K",
    "DEFAULT_SKETCH_BITS",
    "FINGERPRINT_SCHEME",
    "HTML_MODES",
    "KINDS",
    "SKETCH_BITS",
    "Fingerprints",
    "IdfTable",
    "Pipeline",
    "Signature",
    "sketch_distance",
    "sketch_similarity",
]

#: The radius a new store gets when none is given, in the API, ``fpstore-admin create``, ``ingest``
#: and ``demo``: the default pipeline's calibrated k (best F1 on the evaluation corpus of
#: docs/tuning.md, precision 0.951, recall 0.918). ``fpstore-admin calibrate`` measures your own.
DEFAULT_K = 5

_kernel = _backend.load("simhash")  # text.py installs its tables in it

#: Version of the hashing and counting scheme of ``kind="simhash64"`` (see ``fpstore/fingerprint/_simhash_py.py``).
FINGERPRINT_SCHEME = 1
#: Fingerprint kinds: name -> (scheme version recorded in the config, kernel kind number).
KINDS: dict[str, tuple[int, int]] = {
    "simhash64": (FINGERPRINT_SCHEME, _spec.KIND_SIMHASH64),
    "minhash1": (1, _spec.KIND_MINHASH1),
}
#: Weightings each kind accepts; the first is its default.
_WEIGHTINGS = {"simhash64": ("tf", "idf"), "minhash1": ("set",)}
#: ``"off"``: markup is text. ``"main-v1"``, ``"main-v2"``: HTML input is reduced to its main content
#: by that rule (fpstore.fingerprint.html).
HTML_MODES = ("off", *_html.EXTRACTORS)
MAX_SHINGLE = 16
#: The longest verification sketch (8 words of 64 bits).
MAX_SKETCH_BITS = 512
SKETCH_BITS = tuple(range(0, MAX_SKETCH_BITS + 1, 64))
#: The sketch of ``Pipeline()``: at the default threshold 0.8 and candidate radius 7, 512 bits reach
#: F1 0.95 where 256 do not, within the same query costs (docs/designs.md, "Verification radius k_c").
DEFAULT_SKETCH_BITS = 512
_M64 = 0xFFFFFFFFFFFFFFFF
_BATCH = 256  # texts per kernel call in fingerprint_many: large enough to amortise, small enough to balance threads


def config_id(config: dict[str, Any]) -> str:
    """A pipeline's id: 16 hex digits, a digest of the canonical msgpack form of its config."""
    canonical = msgpack.packb(sorted(config.items()), use_bin_type=True)
    return hashlib.blake2b(canonical, digest_size=8).hexdigest()


#: The value of a field that :attr:`Pipeline.config` leaves out when it has it.
_LEFT_OUT = {"html": "off", "sketch_bits": 0}


def config_mismatch(mine: dict[str, Any], theirs: dict[str, Any]) -> str:
    """``"field: store has X, given Y"`` for every field where two configs differ, joined by
    ``", "`` (empty when they are equal); a field a config leaves out is named by its value."""

    text = mine.get("kind") in KINDS and theirs.get("kind") in KINDS  # an image config has neither field

    def value(config: dict[str, Any], f: str) -> Any:
        return config.get(f, _LEFT_OUT.get(f) if text else None)

    return ", ".join(
        f"{f}: store has {value(mine, f)!r}, given {value(theirs, f)!r}"
        for f in sorted(set(mine) | set(theirs))
        if value(mine, f) != value(theirs, f)
    )


def batch_size(n: int, threads: int) -> int:
    """Texts per kernel call when ``fingerprint_many`` does ``n`` texts on ``threads`` threads.

    Threaded, about 16 batches per thread (at least 16 texts each): the threads take batches as
    they finish one, so when another process holds a core for a while, the other thread does more
    of the batches instead of waiting at the end for a quarter of the work.
    """
    return _BATCH if threads == 1 else max(16, min(_BATCH, -(-n // (16 * threads))))


def _token_hash(token: str, seed: int) -> int:
    """Hash of one folded token, exactly as the kernels compute it (FNV-1a over code points)."""
    h = _spec.FNV_OFFSET
    for ch in token:
        h = ((h ^ ord(ch)) * _spec.FNV_PRIME) & _M64
    return fmix64(h ^ seed)


_ASCII_TOKEN = re.compile(r"[a-z0-9]+")


def _fast_tokens(text: str) -> list[str]:
    # For ASCII text the v1 rule is exactly "runs of [a-z0-9] after lowercasing" (no ASCII
    # character is a mark, and only A-Z have lowercase mappings).
    if text.isascii():
        return _ASCII_TOKEN.findall(text.lower())
    return _text.tokens(text)


@dataclass(frozen=True, eq=False)
class IdfTable:
    """Integer inverse-document-frequency weights per token, 0..255.

    ``weights`` maps a folded token to its weight; tokens not in it weigh ``default``. Weights are
    integers so the SimHash counters stay exact. A shingle weighs the sum of its tokens' weights, so
    stopwords (weight near 0) barely vote, alone or inside a shingle.
    """

    weights: dict[str, int]
    default: int

    def __post_init__(self) -> None:
        if not isinstance(self.default, int) or not 0 <= self.default <= 255:
            raise InputError(f"idf default weight must be an int in 0..255, got {self.default!r}")
        for token, w in self.weights.items():
            if not isinstance(token, str) or not token:
                raise InputError(f"idf tokens must be non-empty str, got {token!r}")
            if not isinstance(w, int) or isinstance(w, bool) or not 0 <= w <= 255:
                raise InputError(f"idf weight of {token!r} must be an int in 0..255, got {w!r}")
            if _fast_tokens(token) != [token]:
                raise InputError(f"idf token {token!r} is not a single folded token")

    @classmethod
    def build(cls, texts: Iterable[Text], *, scale: float = 16.0, min_df: int = 2) -> IdfTable:
        """Build weights ``round(scale * ln((N + 1) / (df + 1)))`` from a corpus of N texts.

        Tokens seen in fewer than ``min_df`` texts are left out and weigh ``default``, the weight of
        a token never seen (df = 0). Capped at 255.
        """
        df: Counter[str] = Counter()
        n = 0
        for i, t in enumerate(texts):
            df.update(set(_fast_tokens(_text.normalize(t, index=i))))
            n += 1
        if n == 0:
            raise InputError("cannot build an idf table from an empty corpus")

        def weight(count: int) -> int:
            return min(255, max(0, round(scale * math.log((n + 1) / (count + 1)))))

        return cls({tok: weight(c) for tok, c in df.items() if c >= min_df}, weight(0))

    def to_bytes(self) -> bytes:
        """Canonical msgpack form (sorted tokens): the same table always gives the same bytes."""
        tokens = sorted(self.weights)
        return msgpack.packb(
            {"v": 1, "default": self.default, "tokens": tokens, "weights": bytes(self.weights[t] for t in tokens)},
            use_bin_type=True,
        )

    @classmethod
    def from_bytes(cls, data: bytes) -> IdfTable:
        """Decode :meth:`to_bytes` output; untrusted input raises :class:`FormatError`."""
        try:
            obj = msgpack.unpackb(data, raw=False, strict_map_key=True)
            if not isinstance(obj, dict) or obj.get("v") != 1:
                raise FormatError("unknown idf table version")
            tokens, weights = obj["tokens"], obj["weights"]
            if not isinstance(tokens, list) or not isinstance(weights, bytes) or len(tokens) != len(weights):
                raise FormatError("idf table: tokens and weights differ in length")
            return cls(dict(zip(tokens, weights)), obj["default"])
        except (ValueError, KeyError, TypeError, msgpack.UnpackException) as exc:
            if isinstance(exc, FormatError):
                raise
            raise FormatError(f"idf table does not decode: {exc}") from exc

    @property
    def digest(self) -> str:
        """Hex digest of :meth:`to_bytes`; part of the pipeline id."""
        return hashlib.blake2b(self.to_bytes(), digest_size=16).hexdigest()

    def _kernel_table(self, seed: int) -> tuple[np.ndarray, np.ndarray, int]:
        """The open-addressing form the kernels read: keys uint64[cap], weights uint16[cap], default."""
        cap = 1 << max(4, (2 * len(self.weights)).bit_length())  # load factor <= 1/2
        keys = np.zeros(cap, dtype=np.uint64)
        weights = np.full(cap, 0xFFFF, dtype=np.uint16)
        mask = cap - 1
        for token, w in self.weights.items():
            h = _token_hash(token, seed)
            slot = h & mask
            while weights[slot] != 0xFFFF:
                slot = (slot + 1) & mask
            keys[slot] = h
            weights[slot] = w
        return keys, weights, self.default


@dataclass(frozen=True)
class Signature:
    """What the pipeline knows about one text.

    ``fingerprint`` is the 64-bit fingerprint (of the pipeline's kind); ``tokens`` the token count; ``short`` is True when
    ``tokens < pipeline.min_tokens``: the fingerprint of so short a text moves many bits per edit,
    so a store matches it only by ``content_hash`` (16 bytes, a non-cryptographic hash of the
    normalised token stream: equal token streams give equal hashes).
    """

    fingerprint: int
    tokens: int
    short: bool
    content_hash: bytes
    #: The verification sketch (``pipeline.sketch_bits // 64`` words; empty without one).
    sketch: tuple[int, ...] = ()


def _describe(value: object) -> str:
    if isinstance(value, np.ndarray):
        return f"{value.dtype} array of shape {value.shape}"
    return type(value).__name__


@dataclass(frozen=True, eq=False)
class Fingerprints:
    """A batch of fingerprints together with the id of the pipeline that made them.

    ``values`` uint64[n]; ``tokens`` int64[n]; ``short`` bool[n]; ``content_hashes`` uint64[n, 2]
    (big-endian concatenation gives the 16-byte content hash); ``sketches`` uint64[n, W], the
    verification sketches of a pipeline with ``sketch_bits = 64 W``. Stores accept raw fingerprints
    only in this form or with an explicit ``pipeline_id``.
    """

    values: np.ndarray
    pipeline_id: str
    tokens: np.ndarray | None = None
    short: np.ndarray | None = None
    content_hashes: np.ndarray | None = None
    sketches: np.ndarray | None = None

    def __post_init__(self) -> None:
        # Shapes and dtypes are checked here, once, so that a malformed batch is an InputError
        # rather than a numpy IndexError deep inside a write.
        values = self.values
        if not isinstance(values, np.ndarray) or values.dtype != np.uint64 or values.ndim != 1:
            raise InputError(f"Fingerprints.values must be a 1-D uint64 array, got {_describe(values)}")
        n = len(values)
        for column, kinds, shape in (("tokens", "iu", (n,)), ("short", "b", (n,)), ("content_hashes", "u", (n, 2))):
            col = getattr(self, column)
            if col is None:
                continue
            if not isinstance(col, np.ndarray) or col.dtype.kind not in kinds or col.shape != shape:
                want = {"iu": "integer", "b": "bool", "u": "uint64"}[kinds]
                raise InputError(f"Fingerprints.{column} must be a {want} array of shape {shape}, got {_describe(col)}")
            if column == "content_hashes" and col.dtype != np.uint64:
                raise InputError(f"Fingerprints.content_hashes must have dtype uint64, got {col.dtype}")
        sketches = self.sketches
        if sketches is not None and (
            not isinstance(sketches, np.ndarray)
            or sketches.dtype != np.uint64
            or sketches.ndim != 2
            or len(sketches) != n
            or not 1 <= sketches.shape[1] <= MAX_SKETCH_BITS // 64
        ):
            raise InputError(
                f"Fingerprints.sketches must be a uint64 array of shape ({n}, W), W in 1..{MAX_SKETCH_BITS // 64}, got {_describe(sketches)}"
            )

    def __len__(self) -> int:
        return len(self.values)

    @classmethod
    def of(cls, signatures: Sequence[Signature], pipeline_id: str) -> Fingerprints:
        """The columns of ``signatures`` (one each, made by the pipeline ``pipeline_id``), sketches
        aside."""
        n = len(signatures)
        return cls(
            np.fromiter((s.fingerprint for s in signatures), dtype=np.uint64, count=n),
            pipeline_id,
            np.fromiter((s.tokens for s in signatures), dtype=np.int64, count=n),
            np.fromiter((s.short for s in signatures), dtype=bool, count=n),
            np.frombuffer(b"".join(s.content_hash for s in signatures), dtype=">u8").reshape(n, 2).astype(np.uint64),
        )

    def content_hash(self, i: int) -> bytes | None:
        if self.content_hashes is None:
            return None
        return int(self.content_hashes[i, 0]).to_bytes(8, "big") + int(self.content_hashes[i, 1]).to_bytes(8, "big")


@dataclass(frozen=True)
class Pipeline:
    """Parameters that turn text into a fingerprint. Frozen: a change is a new pipeline (new id).

    shingle: words per shingle (1..16; 3 for articles, 1-2 for short texts).
    seed: 64-bit hash seed; fingerprints of different seeds are unrelated.
    weighting: for ``kind="simhash64"``: ``"tf"`` (the default: each shingle occurrence votes 1,
        so repetition counts) or ``"idf"`` (a shingle votes the sum of its tokens' idf weights;
        requires ``idf``). ``kind="minhash1"`` takes only ``"set"`` (each distinct shingle once).
        None picks the kind's default.
    idf: the :class:`IdfTable` for ``"idf"`` weighting; its digest is part of the id.
    min_tokens: texts with fewer tokens are flagged ``short`` and matched only exactly.
    kind: ``"minhash1"`` (default) or ``"simhash64"`` (see the module docstring).
    html: ``"main-v2"`` (default: input that looks like HTML is reduced to its main content, with
        comments, related stories and other furniture inside it removed), ``"main-v1"`` (the rule
        of the pipelines before it) or ``"off"``.
    sketch_bits: length of the verification sketch (``kind="minhash1"`` only): 0 (none) or a
        multiple of 64 up to 512; None picks the kind's default, 512 for ``"minhash1"`` and 0 for
        ``"simhash64"``. The sketch is W = sketch_bits / 64 more one-bit MinHash words of
        the same shingles, computed in the same pass; :func:`sketch_similarity` of two sketches
        estimates the Jaccard similarity of the texts with a quarter of the 64-bit fingerprint's
        variance at 256 bits. A store keeps it per document to verify candidates (see
        ``docs/tuning.md``).

    Stores record :attr:`config`, and every pipeline keeps its fingerprints and id across versions:
    ``Pipeline(kind="simhash64", html="off")`` (what :func:`fpstore.simhash` uses) is SimHash over
    the raw text, id ``7d098142278897b3``.
    """

    shingle: int = 3
    seed: int = 0
    weighting: str | None = None
    idf: IdfTable | None = field(default=None, compare=False)
    min_tokens: int = 20
    kind: str = "minhash1"
    html: str = _html.EXTRACTOR
    # None picks the kind's default in __post_init__: a constructed pipeline always holds an int.
    sketch_bits: int = None  # type: ignore[assignment]
    _idf_kernel: Any = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.shingle, int) or not 1 <= self.shingle <= MAX_SHINGLE:
            raise InputError(f"shingle must be an int in 1..{MAX_SHINGLE}, got {self.shingle!r}")
        if not isinstance(self.seed, int) or not 0 <= self.seed <= _M64:
            raise InputError(f"seed must be an int in 0..2**64-1, got {self.seed!r}")
        if not isinstance(self.kind, str) or self.kind not in KINDS:
            raise InputError(f"kind must be one of {sorted(KINDS)}, got {self.kind!r}")
        allowed = _WEIGHTINGS[self.kind]
        if self.weighting is None:
            object.__setattr__(self, "weighting", allowed[0])
        if self.weighting not in allowed:
            raise InputError(f"weighting of kind {self.kind!r} must be one of {allowed}, got {self.weighting!r}")
        if self.html not in HTML_MODES:
            raise InputError(f"html must be one of {HTML_MODES}, got {self.html!r}")
        if (self.weighting == "idf") != (self.idf is not None):
            raise InputError("weighting='idf' needs an IdfTable in idf=, and only it takes one")
        if self.idf is not None and not isinstance(self.idf, IdfTable):
            raise InputError(f"idf must be an IdfTable, not {type(self.idf).__name__}")
        if self.sketch_bits is None:
            object.__setattr__(self, "sketch_bits", DEFAULT_SKETCH_BITS if self.kind == "minhash1" else 0)
        if not isinstance(self.sketch_bits, int) or isinstance(self.sketch_bits, bool) or self.sketch_bits not in SKETCH_BITS:
            raise InputError(f"sketch_bits must be one of {SKETCH_BITS}, got {self.sketch_bits!r}")
        if self.sketch_bits and self.kind != "minhash1":
            raise InputError(f"a verification sketch needs kind='minhash1', not {self.kind!r}")
        if not isinstance(self.min_tokens, int) or self.min_tokens < 0:
            raise InputError(f"min_tokens must be an int >= 0, got {self.min_tokens!r}")
        if self.idf is not None:
            object.__setattr__(self, "_idf_kernel", self.idf._kernel_table(self.seed))

    # -- identity -----------------------------------------------------------------------------

    @property
    def config(self) -> dict[str, Any]:
        """Every parameter that changes a fingerprint or a verdict, as a plain dict.

        ``html`` appears only when it is not ``"off"`` and ``sketch_bits`` only when not 0, so the
        configs and ids of pipelines without them stay stable (``7d098142278897b3`` for SimHash
        over the raw text).
        """
        config: dict[str, Any] = {
            "kind": self.kind,
            "scheme": KINDS[self.kind][0],
            "tokenizer": _text.TOKENIZER_VERSION,
            "unicode": _text.UNICODE_VERSION,
            "shingle": self.shingle,
            "seed": self.seed,
            "weighting": self.weighting,
            "idf": None if self.idf is None else self.idf.digest,
            "min_tokens": self.min_tokens,
        }
        if self.html != "off":
            config["html"] = self.html
        if self.sketch_bits:
            config["sketch_bits"] = self.sketch_bits
        return config

    @functools.cached_property
    def id(self) -> str:
        """16 hex digits: a digest of the canonical msgpack form of :attr:`config`."""
        return config_id(self.config)

    def mismatch(self, other: Any) -> str:
        """How ``other``'s config differs from this one's: ``"field: store has X, given Y"`` for
        every differing field, joined by ``", "`` (empty when the configs are equal). ``self`` is
        the stored pipeline, ``other`` the one given (a text or an image pipeline)."""
        return config_mismatch(self.config, other.config)

    @classmethod
    def from_config(cls, config: dict[str, Any], idf: IdfTable | None = None) -> Pipeline:
        """Rebuild a pipeline from :attr:`config` (read from a store header: untrusted).

        Raises :class:`FormatError` when the config names a scheme, tokenizer or field this build
        does not know, or when the idf table does not match the recorded digest.
        """
        if not isinstance(config, dict):
            raise FormatError("pipeline config must be a dict")
        known = {"kind", "scheme", "tokenizer", "unicode", "shingle", "seed", "weighting", "idf", "min_tokens", "html", "sketch_bits"}
        unknown = set(config) - known
        if unknown:
            raise FormatError(f"pipeline config has fields this version does not know: {sorted(unknown)}")
        kind = config.get("kind")
        if not isinstance(kind, str) or kind not in KINDS:
            raise FormatError(f"pipeline kind {kind!r} is not supported (this build: {sorted(KINDS)})")
        for name, expected in (("scheme", KINDS[kind][0]), ("tokenizer", _text.TOKENIZER_VERSION)):
            if config.get(name) != expected:
                raise FormatError(f"pipeline {name} {config.get(name)!r} is not supported (this build: {expected!r})")
        html = config.get("html", "off")
        if html == "off" and "html" in config:
            raise FormatError("pipeline config: html 'off' is recorded by leaving the field out")
        sketch_bits = config.get("sketch_bits", 0)
        if not isinstance(sketch_bits, int) or isinstance(sketch_bits, bool):  # None would be the constructor's default
            raise FormatError(f"pipeline config: sketch_bits must be an int, got {sketch_bits!r}")
        if sketch_bits == 0 and "sketch_bits" in config:
            raise FormatError("pipeline config: no sketch is recorded by leaving the field out")
        digest = config.get("idf")
        if (digest is None) != (idf is None) or (idf is not None and idf.digest != digest):
            raise FormatError("the idf table does not match the pipeline config's idf digest")
        try:
            pipe = cls(
                shingle=config["shingle"],
                seed=config["seed"],
                weighting=config["weighting"],
                idf=idf,
                min_tokens=config["min_tokens"],
                kind=kind,
                html=html,
                sketch_bits=sketch_bits,
            )
        except (KeyError, InputError, TypeError) as exc:
            raise FormatError(f"pipeline config is invalid: {exc}") from exc
        return pipe

    # -- fingerprints -------------------------------------------------------------------------

    def prepare(self, text: Text, *, index: int | None = None) -> str:
        """The text the kernel sees: HTML reduced to its main content (when ``html`` is on), then
        :func:`fpstore.fingerprint.text.normalize`. Bytes are decoded as UTF-8 first (invalid bytes: U+FFFD).

        HTML is detected and parsed before NFKC, so full-width ``＜`` in text never becomes markup.
        """
        return _text.normalize(self._decoded(text, index=index), index=index)

    def _decoded(self, text: Text, *, index: int | None = None) -> str:
        # prepare() less its NFKC step, which the kernel does (nfkc=True) without the GIL.
        if self.html != "off":
            if isinstance(text, (bytes, bytearray, memoryview)):
                text = bytes(text).decode("utf-8", errors="replace")
            if isinstance(text, str) and _html.looks_like_html(text):
                text = _html.main_text(text, self.html)
        return _text.decode(text, index=index)

    def signature(self, text: Text) -> Signature:
        """Fingerprint, token count, short flag and content hash of one text.

        ``text`` is str or UTF-8 bytes (invalid sequences become U+FFFD); anything else raises
        ``TypeError``. Linear time; memory beyond the text itself is constant (plus one NFKC copy
        of the longest stretch that NFKC can change, for non-ASCII text).
        """
        sketch = np.zeros(self.sketch_bits // 64, dtype=np.uint64) if self.sketch_bits else None
        fp, ntok, da, db = _kernel.fingerprint(self._decoded(text), self.seed, self.shingle, self._idf_kernel, self._kind, True, sketch)
        words = () if sketch is None else tuple(int(w) for w in sketch)
        return Signature(fp, ntok, ntok < self.min_tokens, da.to_bytes(8, "big") + db.to_bytes(8, "big"), words)

    def fingerprint(self, text: Text) -> int:
        """The 64-bit fingerprint of ``text`` as an int (see :meth:`signature` for the input rules)."""
        return _kernel.fingerprint(self._decoded(text), self.seed, self.shingle, self._idf_kernel, self._kind, True)[0]

    def signatures(self, texts: Sequence[Text], threads: int | None = None) -> Fingerprints:
        """Signatures of many texts, columnar, computed on ``threads`` threads (None: all cores).

        A non-text element raises :class:`~fpstore.errors.InputTypeError` (a ``TypeError``) naming its index, before any work is done.
        """
        if isinstance(texts, (str, bytes)):
            raise InputTypeError("texts must be a sequence of texts, not a single text")
        texts = list(texts)
        for i, t in enumerate(texts):  # every type error before any work, naming its index
            if not isinstance(t, (str, bytes, bytearray, memoryview)):
                raise InputTypeError(f"text at index {i} must be str or UTF-8 bytes, not {type(t).__name__}")
        n = len(texts)
        fps = np.zeros(n, dtype=np.uint64)
        ntok = np.zeros(n, dtype=np.int64)
        digests = np.zeros((n, 2), dtype=np.uint64)
        sketches = np.zeros((n, self.sketch_bits // 64), dtype=np.uint64) if self.sketch_bits else None
        threads = available_cores() if threads is None else int(threads)
        if threads < 1:
            raise InputError(f"threads must be >= 1, got {threads}")
        size = batch_size(n, threads)
        bounds = [(lo, min(lo + size, n)) for lo in range(0, n, size)]

        def run(bound: tuple[int, int]) -> None:
            # HTML extraction and decoding hold the GIL; the kernel releases it for NFKC and the
            # fingerprint. Doing both per chunk on the workers overlaps one chunk's Python with
            # another's kernel.
            lo, hi = bound
            # ASCII text that does not open with "<" is its own prepared form: skip the calls.
            decoded = [
                t if t.__class__ is str and t.isascii() and t.lstrip(_html.LEADING_SPACE)[:1] != "<" else self._decoded(t, index=i)
                for i, t in zip(range(lo, hi), texts[lo:hi])
            ]
            _kernel.fingerprint_batch(
                decoded,
                0,
                hi - lo,
                self.seed,
                self.shingle,
                self._idf_kernel,
                fps[lo:hi],
                ntok[lo:hi],
                digests[lo:hi],
                self._kind,
                True,
                None if sketches is None else sketches[lo:hi],
            )

        if threads == 1 or len(bounds) < 2:
            for b in bounds:
                run(b)
        else:
            list(executor(threads).map(run, bounds))
        return Fingerprints(fps, self.id, ntok, ntok < self.min_tokens, digests, sketches)

    @property
    def _kind(self) -> int:
        return KINDS[self.kind][1]

    def fingerprint_many(self, texts: Sequence[Text], threads: int | None = None) -> np.ndarray:
        """uint64 array of the fingerprints of ``texts`` (see :meth:`signatures`)."""
        return self.signatures(texts, threads).values


def sketch_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Hamming distances over whole sketches: ``a`` and ``b`` uint64[..., W], broadcast alike."""
    return np.bitwise_count(np.bitwise_xor(a, b)).sum(axis=-1, dtype=np.int64)


def sketch_similarity(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Estimated Jaccard similarity ``1 - 2 d / bits`` of sketches ``a`` and ``b`` (uint64[..., W]),
    clipped at 0 (unrelated texts differ in about half the bits, and the estimate scatters around 0)."""
    bits = 64 * a.shape[-1]
    return np.maximum(0.0, 1.0 - 2.0 * sketch_distance(a, b) / bits)


DEFAULT_PIPELINE = Pipeline()
