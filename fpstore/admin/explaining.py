"""``fpstore-admin explain``: why two stored documents match, or not (:meth:`Store.explain`)."""

from __future__ import annotations

import argparse
from typing import Any

import fpstore
from fpstore.admin.options import open_store
from fpstore.admin.output import EXIT_OK, key_out, key_text, print_json
from fpstore.errors import InputError, UnknownKeyError
from fpstore.store.keys import Key

#: How ``--key-type`` reads a KEY argument.
KEY_TYPES = ("auto", "str", "int", "bytes")


def _int_key(text: str) -> int | None:
    if text.isascii() and text.isdigit() and int(text) < 1 << 64:
        return int(text)
    return None


def _bytes_key(text: str) -> bytes | None:
    try:
        return bytes.fromhex(text.removeprefix("hex:"))
    except ValueError:
        return None


def _describe(key: Key) -> str:
    return f"{type(key).__name__} key {key_text(key)!r}" if not isinstance(key, int) else f"int key {key}"


def stored_key(store: fpstore.Store, text: str, key_type: str, name: str) -> Key:
    """The stored key a command-line KEY names. ``str``, ``int`` (decimal) and ``bytes`` (hex
    digits, ``hex:`` before them optional) read it as that type; ``auto`` takes the one stored key
    among the str ``text``, the int it spells (decimal digits) and the bytes it spells (``hex:`` and
    hex digits, as ``dump`` and ``dedup`` print bytes keys). None stored: :class:`UnknownKeyError`;
    two: :class:`InputError` asking for ``--key-type``."""
    if key_type == "str":
        candidates: list[Key] = [text]
    elif key_type == "int":
        number = _int_key(text)
        if number is None:
            raise InputError(f"{name} {text!r} is not an int key (--key-type int: decimal digits, below 2**64)")
        candidates = [number]
    elif key_type == "bytes":
        raw = _bytes_key(text)
        if raw is None:
            raise InputError(f"{name} {text!r} is not a bytes key (--key-type bytes: hex digits, 'hex:' before them optional)")
        candidates = [raw]
    else:
        candidates = [text]
        number = _int_key(text)
        raw = _bytes_key(text) if text.startswith("hex:") else None
        candidates += [c for c in (number, raw) if c is not None]
    stored = [c for c in candidates if c in store]
    if len(stored) > 1:
        raise InputError(f"{name} {text!r} names {' and '.join(_describe(c) for c in stored)}: pass --key-type str, int or bytes")
    if not stored:
        looked = " or ".join(_describe(c) for c in candidates) if len(candidates) > 1 else repr(text)
        raise UnknownKeyError(f"{name} {looked} is not stored in {store.path}")
    return stored[0]


def _read(path: str | None) -> bytes | None:
    if path is None:
        return None
    with open(path, "rb") as fh:
        return fh.read()


def _json(found: Any) -> dict[str, Any]:
    data = found.to_dict()
    for side in ("a", "b"):
        data[f"key_{side}"] = key_out(data[f"key_{side}"])
        data[f"fingerprint_{side}"] = f"{data[f'fingerprint_{side}']:016x}"
    return data


def _text_lines(found: Any) -> list[str]:
    lines = []
    for side in ("a", "b"):
        short = ", short: matched only by content hash" if getattr(found, f"short_{side}") else ""
        lines.append(
            f"{side}: {key_text(getattr(found, f'key_{side}'))} (id {getattr(found, f'id_{side}')}, "
            f"fingerprint {getattr(found, f'fingerprint_{side}'):016x}{short})"
        )
    verdict = "the store pairs them" if found.paired else "the store does not pair them"
    rule = f"k={found.k}" + (f" and similarity >= {found.threshold:g}" if found.threshold else "")
    lines.append(f"distance {found.distance} of 64 bits; {verdict} at {rule}")
    if found.sketch_similarity is not None:
        lines.append(f"similarity estimated by the stored sketches: {found.sketch_similarity:.3f}")
    if found.estimated_jaccard is not None:
        lines.append(f"estimated Jaccard {found.estimated_jaccard:.3f} ({found.kind}: a bit differs with probability (1 - J) / 2)")
    elif found.kind == "simhash64":
        lines.append(f"no Jaccard estimate: {found.kind} fingerprints (SimHash) track the angle between weighted shingle vectors")
    exact = {True: "yes (one content hash)", False: "no", None: "unknown (a document stored by fingerprint has no content hash)"}
    lines.append(f"exact duplicates: {exact[found.exact_duplicate]}")
    if found.jaccard is not None:
        lines.append(f"shingles: a {found.shingles_a}, b {found.shingles_b}, shared {found.shared}: exact Jaccard {found.jaccard:.3f}")
        for label, sample in (("shared", found.shared_sample), ("only in a", found.only_a_sample), ("only in b", found.only_b_sample)):
            lines += [f"  {label}: {s!r}" for s in sample]
        for side, same in zip("ab", found.texts_as_stored):
            if not same:
                lines.append(f"note: the text given for {side} does not fingerprint to {side}'s stored fingerprint")
    return lines


def cmd_explain(args: argparse.Namespace) -> int:
    """Why two stored documents match or not: distance, estimated and exact Jaccard, exact duplicates."""
    if (args.text_a is None) != (args.text_b is None):
        raise InputError("give both --text-a and --text-b, or neither")
    text_a, text_b = _read(args.text_a), _read(args.text_b)
    with open_store(args.store) as store:
        key_a = stored_key(store, args.key_a, args.key_type, "KEY_A")
        key_b = stored_key(store, args.key_b, args.key_type, "KEY_B")
        found = store.explain(key_a, key_b, text_a=text_a, text_b=text_b, sample=args.sample)
    if args.json:
        print_json(_json(found))
    else:
        print("\n".join(_text_lines(found)))
    return EXIT_OK
