"""Why two stored documents match, or do not: :meth:`Store.explain`.

From the store alone: the Hamming distance of the two stored fingerprints, what it estimates, and
whether the documents are exact duplicates (one content hash). For the default pipeline
(``kind="minhash1"``, 64 one-bit MinHash values) a bit differs with probability ``(1 - J) / 2``
for shingle-set Jaccard similarity J, so ``J ≈ 1 - 2d / 64``; a SimHash fingerprint
(``kind="simhash64"``) tracks the angle between weighted shingle vectors, not a Jaccard
similarity, and gives no estimate. With the two texts: the exact Jaccard similarity of their
shingle sets under the store's own pipeline (HTML main content, tokens, ``shingle`` words per
shingle, as the fingerprint sees them) and a few shingles of each kind.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any

from fpstore.errors import InputError, UnknownKeyError
from fpstore.fingerprint import text as _text
from fpstore.fingerprint.kinds import AnyPipeline
from fpstore.fingerprint.pipeline import Pipeline, sketch_similarity
from fpstore.fingerprint.text import Text
from fpstore.store.keys import Key
from fpstore.store.results import Document

if TYPE_CHECKING:
    from fpstore.store.reading import Reader

__all__ = ["MINHASH_BITS", "Explanation", "estimated_jaccard", "explain", "shingles"]

#: Bits of a ``minhash1`` fingerprint: one per MinHash value.
MINHASH_BITS = 64


@dataclass(frozen=True)
class Explanation:
    """Two stored documents compared (:meth:`Store.explain`).

    ``distance`` is the Hamming distance of their stored fingerprints; ``estimated_jaccard`` the
    shingle-set Jaccard similarity it estimates, ``1 - 2 * distance / 64`` at least 0 (None for a
    SimHash pipeline, ``kind``); ``exact_duplicate`` whether their content hashes are equal (None
    when one was stored by fingerprint: no content hash); ``paired`` whether the store pairs them
    at its radius ``k`` (:meth:`Store.near_duplicate_pairs`: within ``k`` and, when one is short,
    exact duplicates; never a document with itself).

    Given the texts: ``jaccard``, the exact Jaccard similarity of their shingle sets under the
    store's pipeline (1.0 for two texts without tokens), the sets' sizes and their intersection's
    (``shingles_a``, ``shingles_b``, ``shared``), up to ``sample`` shingles (words joined by a space)
    shared, only in a and only in b, in the order of their text, and ``texts_as_stored``: whether
    each text fingerprints to its document's stored fingerprint (else the comparison is of other
    texts than those stored). All None without texts."""

    key_a: Key
    key_b: Key
    id_a: int
    id_b: int
    fingerprint_a: int
    fingerprint_b: int
    short_a: bool
    short_b: bool
    kind: str
    k: int
    distance: int
    estimated_jaccard: float | None
    exact_duplicate: bool | None
    paired: bool
    jaccard: float | None = None
    shingles_a: int | None = None
    shingles_b: int | None = None
    shared: int | None = None
    shared_sample: tuple[str, ...] | None = None
    only_a_sample: tuple[str, ...] | None = None
    only_b_sample: tuple[str, ...] | None = None
    texts_as_stored: tuple[bool, bool] | None = None
    #: In a store with sketches: the Jaccard similarity the two stored sketches estimate, and the
    #: store's threshold (``paired`` then also needs the estimate to reach it).
    sketch_similarity: float | None = None
    threshold: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """The fields as plain data (keys as given; tuples as lists)."""
        return {name: list(v) if isinstance(v, tuple) else v for name, v in asdict(self).items()}


def estimated_jaccard(kind: str, distance: int) -> float | None:
    """The shingle-set Jaccard similarity a distance estimates for fingerprints of ``kind``: for
    ``minhash1`` a bit differs with probability ``(1 - J) / 2``, so ``J ≈ 1 - 2d / 64`` (at least
    0); None for ``simhash64``, whose distance estimates no Jaccard similarity."""
    if kind != "minhash1":
        return None
    return max(0.0, 1.0 - 2.0 * distance / MINHASH_BITS)


def shingles(pipeline: Pipeline, text: Text) -> list[str]:
    """The shingles of ``text`` under ``pipeline``, in the order of the text (repeats included):
    each ``pipeline.shingle`` consecutive tokens joined by a space, or all the tokens as one
    shingle when there are fewer (as the fingerprint kernels take them)."""
    tokens = _text.tokens(pipeline.prepare(text))
    w = pipeline.shingle
    if len(tokens) < w:
        return [" ".join(tokens)] if tokens else []
    return [" ".join(tokens[i : i + w]) for i in range(len(tokens) - w + 1)]


def _sample(ordered: list[str], keep: set[str], sample: int) -> tuple[str, ...]:
    out: list[str] = []
    seen: set[str] = set()
    for s in ordered:
        if len(out) >= sample:
            break
        if s in keep and s not in seen:
            seen.add(s)
            out.append(s)
    return tuple(out)


def _check_text(value: object, name: str) -> Text:
    if not isinstance(value, (str, bytes, bytearray, memoryview)):
        raise InputError(f"{name} must be str or UTF-8 bytes, not {type(value).__name__}")
    return value


def explain(
    reader: Reader, pipeline: AnyPipeline, k: int, key_a: Key, key_b: Key, text_a: Text | None, text_b: Text | None, sample: int
) -> Explanation:
    """:meth:`Store.explain` in ``reader``'s snapshot."""
    if text_a is not None and not isinstance(pipeline, Pipeline):
        raise InputError(f"text_a and text_b compare shingles of texts; this store's pipeline ({pipeline.kind}) fingerprints images")
    if isinstance(sample, bool) or not isinstance(sample, int) or sample < 0:
        raise InputError(f"sample must be an int >= 0, got {sample!r}")
    if (text_a is None) != (text_b is None):
        raise InputError("give both text_a and text_b, or neither")
    texts = None if text_a is None or text_b is None else (_check_text(text_a, "text_a"), _check_text(text_b, "text_b"))
    docs: list[Document] = []
    for key in (key_a, key_b):
        doc = reader.get(key)
        if doc is None:
            raise UnknownKeyError(f"key {key!r} is not stored")
        docs.append(doc)
    a, b = docs
    distance = (a.fingerprint ^ b.fingerprint).bit_count()
    exact = None if a.content_hash is None or b.content_hash is None else a.content_hash == b.content_hash
    stored = reader.sketches_of([a.id, b.id])
    similarity = None if stored is None else float(sketch_similarity(stored[0], stored[1]))
    threshold = reader.threshold if stored is not None else None
    verified = a.short or b.short or not threshold or (similarity is not None and similarity >= threshold)
    paired = a.id != b.id and distance <= k and (not (a.short or b.short) or bool(exact)) and verified
    found = Explanation(
        key_a=a.key,
        key_b=b.key,
        id_a=a.id,
        id_b=b.id,
        fingerprint_a=a.fingerprint,
        fingerprint_b=b.fingerprint,
        short_a=a.short,
        short_b=b.short,
        kind=pipeline.kind,
        k=k,
        distance=distance,
        estimated_jaccard=estimated_jaccard(pipeline.kind, distance),
        exact_duplicate=exact,
        paired=paired,
        sketch_similarity=similarity,
        threshold=threshold,
    )
    if texts is None or not isinstance(pipeline, Pipeline):  # an image pipeline refused texts above
        return found
    ta, tb = texts
    sa, sb = shingles(pipeline, ta), shingles(pipeline, tb)
    set_a, set_b = set(sa), set(sb)
    both = set_a & set_b
    union = len(set_a | set_b)
    return replace(
        found,
        jaccard=len(both) / union if union else 1.0,
        shingles_a=len(set_a),
        shingles_b=len(set_b),
        shared=len(both),
        shared_sample=_sample(sa, both, sample),
        only_a_sample=_sample(sa, set_a - both, sample),
        only_b_sample=_sample(sb, set_b - both, sample),
        texts_as_stored=(pipeline.fingerprint(ta) == a.fingerprint, pipeline.fingerprint(tb) == b.fingerprint),
    )
