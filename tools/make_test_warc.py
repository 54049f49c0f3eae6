"""Write ``tests/data/sample.warc.gz``: a small, deterministic WARC file for the ingest tests.

    python tools/make_test_warc.py            # writes tests/data/sample.warc.gz
    python tools/make_test_warc.py OUT.warc   # uncompressed when the name does not end in .gz

The records are serialised here by hand from the WARC 1.1 specification (ISO 28500:2017), not
with the WARC library that ``fpstore.admin.ingest`` reads them with, so the test exercises the reader
against an independent writer. Every byte is a pure function of this file: fixed dates, record
ids derived from the target URI, gzip members with mtime 0. The test suite regenerates the file
and compares it with the committed copy.

What is in it, and what the ingest of it must do:

* a ``warcinfo`` record, ``request`` records, a ``metadata`` and a ``revisit`` record: skipped;
* ``response`` records with HTML pages: two articles, each also served with different navigation
  (a near duplicate), one with a word edited (a near duplicate), and one byte-identical copy under
  another URI (an exact duplicate);
* a ``text/plain`` response; a gzip ``Content-Encoding`` response and a ``chunked``
  ``Transfer-Encoding`` response (the library decodes both); an ``iso-8859-1`` page; a page
  declared UTF-8 with invalid bytes in it (decoded with U+FFFD, and counted);
* an ``image/png`` response: not text, skipped with a note.
"""

from __future__ import annotations

import gzip
import io
import pathlib
import sys
import uuid

OUT = pathlib.Path(__file__).resolve().parent.parent / "tests" / "data" / "sample.warc.gz"
DATE = "2024-05-01T12:00:00Z"
NS = uuid.UUID("6f0c7e8e-2d7b-4f39-9a53-6b0cf5d3a1e4")

ARTICLE_A = (
    "The lighthouse keeper climbed the spiral stairs every evening at dusk, carrying a can of oil "
    "and a cloth for the lens. For forty years the light had turned above the harbour, and in all "
    "that time it had failed only once, during the great storm of the winter when the ice came "
    "down the river and the fishing boats stayed tied to the quay for eleven days. The keeper "
    "wrote everything in a brown ledger: the wind, the ships that passed, the hours the lamp "
    "burned, and the names of the children who came to ask about the sea."
)
ARTICLE_B = (
    "Sourdough bread needs three things: flour, water and time. The starter is a living culture "
    "of wild yeast and lactic bacteria, fed once or twice a day with equal weights of flour and "
    "water until it doubles within a few hours of feeding. Mix the dough, let it rest, fold it "
    "gently every half hour, and then leave it to rise slowly in a cool place overnight. Bake it "
    "in a very hot covered pot so that the steam keeps the crust soft at first, then remove the "
    "lid to let the crust turn deep brown and crackle as it cools on a rack."
)
PLAIN = (
    "Release notes. This version fixes a crash when the configuration file is empty, speeds up "
    "the start by reading the cache lazily, and adds a flag to print the effective settings. "
    "Thanks to everyone who reported problems and sent patches during the last cycle."
)
LATIN1 = (
    "Crème brûlée à la façon du chef: chauffer la crème, ajouter le sucre et les jaunes d'oeufs, "
    "verser dans des ramequins et cuire au bain-marie à feu très doux pendant une heure environ, "
    "puis caraméliser le dessus au moment de servir."
)


def page(title: str, body: str, nav: str) -> bytes:
    return (
        f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{title}</title></head>\n"
        f"<body><nav>{nav}</nav>\n<main><h1>{title}</h1>\n<p>{body}</p></main>\n"
        "<footer>Copyright the authors.</footer></body></html>\n"
    ).encode("utf-8")


def http(status: str, headers: list[tuple[str, str]], body: bytes) -> bytes:
    lines = [f"HTTP/1.1 {status}"] + [f"{k}: {v}" for k, v in headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def record(rtype: str, uri: str | None, block: bytes, content_type: str, extra: list[tuple[str, str]] = ()) -> bytes:
    rid = uuid.uuid5(NS, f"{rtype} {uri} {len(block)}")
    head = [("WARC-Type", rtype), ("WARC-Date", DATE), ("WARC-Record-ID", f"<urn:uuid:{rid}>")]
    if uri is not None:
        head.append(("WARC-Target-URI", uri))
    head += list(extra)
    head += [("Content-Type", content_type), ("Content-Length", str(len(block)))]
    text = "WARC/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in head) + "\r\n"
    return text.encode("utf-8") + block + b"\r\n\r\n"


def response(uri: str, body: bytes, ctype: str = "text/html; charset=utf-8", extra: list[tuple[str, str]] = ()) -> bytes:
    headers = [("Content-Type", ctype), ("Content-Length", str(len(body)))] + list(extra)
    return record("response", uri, http("200 OK", headers, body), "application/http; msgtype=response")


def chunked(body: bytes, size: int = 97) -> bytes:
    out = io.BytesIO()
    for i in range(0, len(body), size):
        part = body[i : i + size]
        out.write(f"{len(part):x}\r\n".encode() + part + b"\r\n")
    out.write(b"0\r\n\r\n")
    return out.getvalue()


def records() -> list[bytes]:
    """The records of the sample file, in order."""
    nav1 = "Home | News | Archive | About"
    nav2 = "Start page - Latest stories - Old stories - Contact us - Subscribe"
    a = page("The keeper of the light", ARTICLE_A, nav1)
    out = [
        record("warcinfo", None, b"software: fpstore tools/make_test_warc.py\r\nformat: WARC File Format 1.1\r\n",
               "application/warc-fields"),
        record("request", "https://news.example/keeper",
               b"GET /keeper HTTP/1.1\r\nHost: news.example\r\n\r\n", "application/http; msgtype=request"),
        response("https://news.example/keeper", a),
        response("https://mirror.example/keeper", page("The keeper of the light", ARTICLE_A, nav2)),
        response("https://copy.example/keeper", a),  # byte-identical: an exact duplicate
        response("https://news.example/keeper-edited",
                 page("The keeper of the light", ARTICLE_A.replace("brown ledger", "green ledger"), nav1)),
        response("https://bakery.example/sourdough", page("Sourdough at home", ARTICLE_B, nav1)),
        response("https://recipes.example/sourdough", page("Sourdough at home", ARTICLE_B, nav2)),
        response("https://files.example/NEWS.txt", PLAIN.encode(), "text/plain; charset=utf-8"),
        response("https://gzip.example/sourdough", gzip.compress(page("Sourdough", ARTICLE_B, nav1), mtime=0),
                 extra=[("Content-Encoding", "gzip")]),
        response("https://chunked.example/keeper", chunked(page("The keeper", ARTICLE_A, nav2)),
                 extra=[("Transfer-Encoding", "chunked")]),
        response("https://latin1.example/creme", page("Crème", LATIN1, nav1).decode().encode("iso-8859-1"),
                 "text/html; charset=iso-8859-1"),
        response("https://broken.example/utf8", page("Broken", ARTICLE_B, nav1).replace(b"Sourdough", b"Sour\xff\xfedough"),
                 "text/html; charset=utf-8"),
        response("https://img.example/logo.png", b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 2, "image/png"),
        record("metadata", "https://news.example/keeper", b"via: https://news.example/\r\n", "application/warc-fields"),
        record("revisit", "https://news.example/keeper", http("304 Not Modified", [], b""),
               "application/http; msgtype=response",
               [("WARC-Profile", "http://netpreserve.org/warc/1.1/revisit/server-not-modified")]),
    ]
    return out


#: Target URIs of the response records the ingest must store (text or HTML), in file order.
TEXT_URIS = [
    "https://news.example/keeper",
    "https://mirror.example/keeper",
    "https://copy.example/keeper",
    "https://news.example/keeper-edited",
    "https://bakery.example/sourdough",
    "https://recipes.example/sourdough",
    "https://files.example/NEWS.txt",
    "https://gzip.example/sourdough",
    "https://chunked.example/keeper",
    "https://latin1.example/creme",
    "https://broken.example/utf8",
]


def build(compress: bool = True) -> bytes:
    """The file's bytes: one gzip member per record (as crawlers write them), or plain."""
    if not compress:
        return b"".join(records())
    return b"".join(gzip.compress(r, compresslevel=9, mtime=0) for r in records())


def main(argv: list[str]) -> int:
    out = pathlib.Path(argv[0]) if argv else OUT
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(build(compress=out.name.endswith(".gz")))
    print(f"wrote {out} ({out.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
