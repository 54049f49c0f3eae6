"""Write ``tests/golden/fingerprints_v1.json``: the fingerprints that pin pipeline scheme 1.

    python tools/gen_golden.py

Run this only when a pipeline change is deliberate (a new scheme or tokenizer version); the golden
test fails on any other change to a fingerprint, which is the point.
"""

from __future__ import annotations

import json
import pathlib

import fpstore

OUT = pathlib.Path(__file__).resolve().parent.parent / "tests" / "golden" / "fingerprints_v1.json"

TEXTS = [
    "",
    "   \t\n",
    "a",
    "The quick brown fox",
    "the  QUICK, brown fox!",
    "The quick brown fox jumps over the lazy dog",
    "Café café CAFÉ cafe\u0301",
    "İstanbul ΟΔΟΣ Straße ﬁne Ｆｕｌｌｗｉｄｔｈ",
    "東京 タワー は 高い 。 北京 上海",
    "Ελληνικά κείμενα και русский текст вместе",
    "numbers 123 ٤٥٦ ⅻ ½ mixed",
    "lone \ud800 surrogate \udfff here",
    "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut labore "
    "et dolore magna aliqua. Ut enim ad minim veniam, quis nostrud exercitation ullamco laboris nisi ut "
    "aliquip ex ea commodo consequat.",
    " ".join(f"word{i % 97}" for i in range(1000)),
]

PIPELINES = {
    "default": fpstore.Pipeline(),
    "shingle1": fpstore.Pipeline(shingle=1),
    "shingle5_seed": fpstore.Pipeline(shingle=5, seed=0xDEADBEEFCAFEF00D),
    "idf": fpstore.Pipeline(
        weighting="idf", idf=fpstore.IdfTable({"the": 0, "fox": 200, "quick": 50, "ut": 3}, default=100)
    ),
}


def main() -> None:
    data = {"texts": TEXTS, "pipelines": {}}
    for name, pipe in PIPELINES.items():
        sigs = [pipe.signature(t) for t in TEXTS]
        data["pipelines"][name] = {
            "id": pipe.id,
            "fingerprints": [f"{s.fingerprint:016x}" for s in sigs],
            "tokens": [s.tokens for s in sigs],
            "content_hashes": [s.content_hash.hex() for s in sigs],
        }
    OUT.write_text(json.dumps(data, indent=1, ensure_ascii=True) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
