"""Text normalisation and the token rule (tokenizer version 1).

The rule, applied to every text before it is fingerprinted:

1. Input: ``str`` as is; ``bytes``/``bytearray``/``memoryview`` are decoded as UTF-8 with
   ``errors="replace"`` (each invalid byte sequence becomes U+FFFD, which is a separator); any other
   type raises ``TypeError``.
2. Text that is not pure ASCII is put in Unicode NFKC form, so composed and decomposed accents,
   full-width letters and ligatures give the same tokens.
3. A token is a maximal run of code points whose general category is a letter (L*), a number (N*)
   or a mark (M*); every other code point (space, punctuation, symbols, controls, lone surrogates,
   U+FFFD) separates tokens.
4. Each token code point is replaced by its simple lowercase mapping.

Steps 3 and 4 use the table in ``fpstore/fingerprint/_unicode_v1.py`` (Unicode 14.0), committed with the code so
that fingerprints do not change with the Python that computes them. Step 2 is computed by the
compiled kernel from ``fpstore/fingerprint/_nfkc_v1.py``, generated from Python's ``unicodedata``
of the same Unicode version, so that it can run without the GIL; it equals
``unicodedata.normalize("NFKC", text)``: Unicode's normalisation stability policy keeps NFKC fixed
for assigned characters, and a text holding a code point unassigned in the tables goes to
``unicodedata`` itself when this Python's database is of another version (which may assign it).
The pure-Python backend uses ``unicodedata`` throughout.
"""

from __future__ import annotations

import functools
import unicodedata

import numpy as np

from fpstore import _backend
from fpstore.errors import InputTypeError
from fpstore.fingerprint import _nfkc_pack, _nfkc_v1, _unicode_v1

__all__ = ["FOLD", "TOKENIZER_VERSION", "UNICODE_VERSION", "Text", "decode", "nfkc", "normalize", "tokens"]

TOKENIZER_VERSION = 1
UNICODE_VERSION: str = _unicode_v1.UNICODE_VERSION
if _nfkc_v1.UNICODE_VERSION != UNICODE_VERSION:  # tools/gen_unicode_tables.py writes both at once
    raise ImportError(f"_nfkc_v1 is of Unicode {_nfkc_v1.UNICODE_VERSION}, _unicode_v1 of {UNICODE_VERSION}: regenerate both")

#: A text as the rule takes it (step 1): ``str``, or UTF-8 in ``bytes``, ``bytearray`` or ``memoryview``.
Text = str | bytes | bytearray | memoryview


def _build_fold_table() -> np.ndarray:
    fold = np.zeros(0x110000, dtype=np.uint32)
    for start, end in _unicode_v1.TOKEN_RANGES:
        fold[start:end] = np.arange(start, end, dtype=np.uint32)
    pairs = np.array(_unicode_v1.LOWER, dtype=np.uint32)
    fold[pairs[:, 0]] = pairs[:, 1]
    fold.setflags(write=False)
    return fold


#: ``FOLD[cp]`` is the folded (lowercased) code point of a token character, or 0 for a separator
#: (U+0000 is a separator, so 0 is free to mean "not a token character"). uint32[0x110000].
FOLD: np.ndarray = _build_fold_table()


def normalize(text: object, *, index: int | None = None) -> str:
    """Apply steps 1 and 2 of the rule: check the type, decode bytes, NFKC non-ASCII text.

    ``index`` names the position of ``text`` in a batch, for the error message.
    """
    text = decode(text, index=index)
    return text if text.isascii() else _kernel.nfkc(text)


def decode(text: object, *, index: int | None = None) -> str:
    """Apply step 1 of the rule: check the type, decode bytes (the pipeline leaves step 2 to the
    kernel, which runs it without the GIL)."""
    if isinstance(text, str):
        return text
    if isinstance(text, (bytes, bytearray, memoryview)):
        return bytes(text).decode("utf-8", errors="replace")
    where = f" at index {index}" if index is not None else ""
    raise InputTypeError(f"text{where} must be str or UTF-8 bytes, not {type(text).__name__}")


def _build_active_bits() -> np.ndarray:
    active = np.ones(0x110000, dtype=bool)
    for start, end in _unicode_v1.NFKC_INERT_RANGES:
        active[start:end] = False
    return np.packbits(active, bitorder="little")


#: Bitset of the code points NFKC may change or combine with a neighbour (not inert), bit
#: ``cp & 7`` of byte ``cp >> 3``; the kernel finds their runs (see :func:`nfkc`).
ACTIVE_BITS: np.ndarray = _build_active_bits()
_kernel = _backend.load("simhash")
_kernel.set_fold_table(FOLD)
_kernel.set_active_table(ACTIVE_BITS)
# A database of another Unicode version may map code points the tables call unassigned: texts
# holding one are normalised by it, as they were before the kernel computed NFKC.
_NFKC_FALLBACK = None if unicodedata.unidata_version == UNICODE_VERSION else functools.partial(unicodedata.normalize, "NFKC")
_kernel.set_nfkc_tables(*_nfkc_pack.pack(), fallback=_NFKC_FALLBACK)


def nfkc(text: str) -> str:
    """``unicodedata.normalize("NFKC", text)``, normalising only the stretches that can change.

    UAX #15: there is a normalisation boundary before every *inert* character (an assigned
    starter that is its own NFKC form and never composes with what precedes it; the table is
    ``_unicode_v1.NFKC_INERT_RANGES``), and the text between two boundaries normalises
    independently. So each run of other ("active") characters, with the inert character before
    it (a following mark may compose with it), is normalised on its own and the rest is copied.
    Same result, many times faster on real text: a page full of curly quotes (inert) and one "…"
    normalises one short stretch. The compiled kernel does this from the tables of
    ``_nfkc_v1`` without the GIL; the pure-Python one with ``unicodedata``.
    """
    return _kernel.nfkc(text)


def tokens(text: object) -> list[str]:
    """Return the tokens of ``text`` under the v1 rule (the reference; the kernels never build them)."""
    text = normalize(text)
    fold = FOLD
    out: list[str] = []
    current: list[str] = []
    for ch in text:
        folded = int(fold[ord(ch)])
        if folded:
            current.append(chr(folded))
        elif current:
            out.append("".join(current))
            current = []
    if current:
        out.append("".join(current))
    return out
