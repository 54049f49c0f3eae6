"""Fingerprinting throughput: fpstore's compiled kernel against its pure-Python twin and ``simhash``.

    cd /work/main && PYTHONPATH=/work/main python tools/bench_fingerprint.py --json /tmp/bench_fingerprint.json

``--quick`` runs small sizes (a smoke run of about half a minute; the full run takes 3-4 minutes); ``--repeat N`` sets the repeats
(at least 5; default 7); ``--only headline`` runs the headline section alone (about a minute).
Results go to ``docs/benchmarks.md``, section "Fingerprinting".

What it measures, all in one process so every ratio compares figures taken minutes apart on the
same, possibly busy, machine:

* Corpora. ``synthetic``: 300-word documents over a vocabulary of 5,000 random pronounceable words
  (consonant-vowel syllables, seeded; words drawn uniformly; sentences of 8-20 words, capitalised,
  ending in a full stop). ``real``: every value of ``pydoc_data.topics.topics`` (one document per
  topic) and every regular file in ``/usr/share/common-licenses/`` (symlinks to a file already
  read are skipped; a missing source is skipped with a note). The real corpus is under 1 MB, so it
  is replicated into distinct ``str`` copies up to a target size: the per-byte cost is the same and
  the copies do not sit in cache the way one small list would. MB means 10**6 bytes of UTF-8.
* Contenders, each run once per repeat, the order rotated each repeat. fpstore with two pipelines:
  the default ``Pipeline()`` (kind ``minhash1``, HTML extraction ``main-v1``, which costs one
  character test on plain text) and ``Pipeline(kind="simhash64", html="off")`` (the SimHash scheme,
  like for like with the SimHash peers); each as ``fingerprint_many(texts, threads=1)``,
  ``threads=<cores>`` (``os.sched_getaffinity``) and ``Pipeline.fingerprint`` called in a Python
  loop. The pure-Python twin of each kind
  (``fpstore.fingerprint._simhash_py.fingerprint(pipe.prepare(t), seed, shingle, None, kind)``), and PyPI
  ``simhash.Simhash`` with its default features (character 4-grams) and with word 3-shingles passed
  as features (tokenising and shingling included in the timing). Pure-Python contenders run on a
  seeded subset of the same documents; their rate is extrapolated, never their output. Ratios are
  to the default pipeline on one thread.
* Figures: median over repeats of MB/s and docs/s, the rate at the p90 of the per-repeat time, the
  best repeat (the least disturbed by other work on a shared machine), and the ratio of
  median rates to fpstore one thread on the same corpus; the thread speedup both as a ratio of
  medians (what a user gets on this machine now) and best repeat against best repeat (what the
  code does in the repeats where the other core happened to be free).
* Headline, first: ``fingerprint_many`` of the default pipeline on 1 and 2 threads (the cores
  available) on NFKC-rich real text (the real documents NFKC changes, such as the pydoc topics
  with "…", replicated; and the real corpus with "ﬁ" at the start of every line), beside the
  machine's own two-thread control: sha256 of the same UTF-8 bytes, cut into the same batches as
  ``fingerprint_many`` cuts the texts, each batch hashed R times (R makes the control's one-thread
  time about fpstore's), on 1 and 2 threads of a thread pool. The figure of merit is fpstore's
  speedup over the control's (target >= 0.90). Beside it, fpstore on one thread against gaoya's
  MinHash (``pip install gaoya``; 64 hashes of 32 bits over lowercased word 3-shingles, Rust, one
  ``tokenize_and_minhash`` call per document) on the real corpus. Medians over 3 x ``--repeat``
  repeats (the section is cheap), interleaved and rotated like the rest.
* One text of 1, 10 and 100 MB (linear time); non-ASCII variants of the real corpus (NFKC cost);
  a breakdown of ``fingerprint_many`` into its serial part (HTML check and decoding, under the
  GIL) and the kernel (NFKC and fingerprint, without it), and a trivial GIL-free two-thread
  ``hashlib`` workload with the machine's load, to show what two threads can do here.

Benchmarks are scripts, not tests: nothing here is named for pytest to collect.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import hashlib
import json
import os
import platform
import random
import re
import resource
import statistics
import subprocess
import sys
import time
import unicodedata
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

import fpstore
from fpstore.fingerprint import _simhash_py
from fpstore.fingerprint import pipeline as _pipeline
from fpstore.fingerprint import text as _text

SEED = 20240601
LICENSES = "/usr/share/common-licenses"

# Typographic characters of the real corpus and their ASCII spellings (for the ASCII-only variant).
_ASCII_FOLD = str.maketrans(
    {
        "\u2019": "'",
        "\u2018": "'",
        "\u201c": '"',
        "\u201d": '"',
        "\u2026": "...",
        "\u2014": "--",
        "\u2013": "-",
        "\u00df": "ss",
        "\u00b0": " deg",
    }
)


def note(msg: str) -> None:
    print(f"  note: {msg}", flush=True)


# -- corpora ------------------------------------------------------------------------------------


@dataclass
class Corpus:
    name: str
    texts: list[str]
    description: str
    nbytes: int = 0

    def __post_init__(self) -> None:
        self.nbytes = sum(len(t.encode("utf-8", "surrogatepass")) for t in self.texts)

    @property
    def mb(self) -> float:
        return self.nbytes / 1e6


def _vocabulary(rng: random.Random, size: int) -> list[str]:
    onsets = list("bcdfghjklmnprstvwz") + ["br", "ch", "cl", "dr", "gr", "pl", "sh", "st", "th", "tr"]
    vowels = list("aeiou") + ["ai", "ea", "ou"]
    codas = ["", "", "", "n", "r", "s", "t", "l", "m", "nd", "st"]
    words: set[str] = set()
    while len(words) < size:
        syllables = rng.choice((1, 2, 2, 2, 3, 3))
        words.add("".join(rng.choice(onsets) + rng.choice(vowels) for _ in range(syllables)) + rng.choice(codas))
    return sorted(words)


def synthetic_corpus(n_docs: int, words_per_doc: int = 300, vocab: int = 5000, seed: int = SEED) -> Corpus:
    rng = random.Random(seed)
    words = _vocabulary(rng, vocab)
    texts = []
    for _ in range(n_docs):
        picked = rng.choices(words, k=words_per_doc)
        out, i = [], 0
        while i < words_per_doc:
            n = rng.randint(8, 20)
            sentence = picked[i : i + n]
            sentence[0] = sentence[0].capitalize()
            out.append(" ".join(sentence) + ".")
            i += n
        texts.append(" ".join(out))
    mean_len = statistics.mean(len(w) for w in words)
    return Corpus(
        "synthetic",
        texts,
        f"{n_docs} docs x {words_per_doc} words, vocabulary of {vocab} random "
        f"pronounceable words (mean {mean_len:.1f} letters), uniform draws, seed {seed}",
    )


def real_documents() -> tuple[list[str], list[str]]:
    """The real English documents found on this machine, and a line per source saying what was used."""
    docs: list[str] = []
    used: list[str] = []
    try:
        from pydoc_data.topics import topics
    except ImportError:
        note("pydoc_data.topics is not available in this Python: skipped")
    else:
        values = [topics[k] for k in sorted(topics)]
        docs.extend(values)
        used.append(f"pydoc_data.topics: {len(values)} topics, {sum(len(v.encode()) for v in values) / 1e6:.3f} MB")
    if os.path.isdir(LICENSES):
        seen: set[str] = set()
        n = nb = 0
        for name in sorted(os.listdir(LICENSES)):
            path = os.path.realpath(os.path.join(LICENSES, name))
            if path in seen or not os.path.isfile(path):
                continue
            seen.add(path)
            with open(path, "rb") as f:
                data = f.read()
            docs.append(data.decode("utf-8", errors="replace"))
            n, nb = n + 1, nb + len(data)
        used.append(f"{LICENSES}: {n} files (symlinked duplicates skipped), {nb / 1e6:.3f} MB")
    else:
        note(f"{LICENSES} does not exist: skipped")
    return docs, used


def replicate(docs: list[str], target_bytes: int) -> list[str]:
    """Distinct str copies of ``docs`` (whole passes) until ``target_bytes`` of UTF-8 is reached."""
    size = sum(len(d.encode()) for d in docs)
    passes = max(1, -(-target_bytes // max(size, 1)))
    # (" " + d)[1:] builds a new object: copies live in their own memory, like a stream of pages.
    return [(" " + d)[1:] for _ in range(passes) for d in docs]


def inject_per_line(docs: list[str], char: str) -> list[str]:
    return ["\n".join(char + line if line.strip() else line for line in d.split("\n")) for d in docs]


def subset(corpus: Corpus, budget_bytes: int, seed: int = SEED) -> Corpus:
    """A seeded sample of the corpus's documents of about ``budget_bytes`` (at least one document)."""
    order = list(range(len(corpus.texts)))
    random.Random(seed).shuffle(order)
    picked, total = [], 0
    for i in order:
        if picked and total >= budget_bytes:
            break
        picked.append(corpus.texts[i])
        total += len(corpus.texts[i].encode())
    return Corpus(corpus.name + "-subset", picked, f"seeded sample of {len(picked)} docs")


# -- timing -------------------------------------------------------------------------------------


@dataclass
class Case:
    """One contender on one corpus: ``fn()`` does the whole timed work once."""

    key: str
    corpus: str
    contender: str
    fn: Callable[[], object]
    docs: int
    nbytes: int
    warm: Callable[[], object] | None = None
    times: list[float] = field(default_factory=list)

    def summary(self) -> dict:
        t = np.array(self.times)
        med = float(np.median(t))
        return {
            "key": self.key,
            "corpus": self.corpus,
            "contender": self.contender,
            "docs": self.docs,
            "mb": self.nbytes / 1e6,
            "repeats": len(t),
            "time_median_s": med,
            "time_p90_s": float(np.percentile(t, 90)),
            "time_min_s": float(t.min()),
            "time_max_s": float(t.max()),
            "mb_per_s": self.nbytes / 1e6 / med,
            "docs_per_s": self.docs / med,
            "mb_per_s_at_p90_time": self.nbytes / 1e6 / float(np.percentile(t, 90)),
        }


def run_interleaved(cases: list[Case], repeat: int) -> None:
    """Warm every case, then run each once per repeat, rotating the order so no case always goes first."""
    for c in cases:
        (c.warm or c.fn)()
    for r in range(repeat):
        k = r % len(cases)
        for c in cases[k:] + cases[:k]:
            gc.collect()
            t0 = time.perf_counter()
            c.fn()
            c.times.append(time.perf_counter() - t0)


def speedup(a: Case, b: Case) -> tuple[float, float]:
    """time(a) / time(b) as a ratio of medians, and best repeat against best repeat.

    On a shared machine the second core is free in some repeats and busy in others; the median says
    what a user gets here, the best-vs-best ratio what the code does when the cores are free.
    """
    return float(np.median(a.times) / np.median(b.times)), float(min(a.times) / min(b.times))


def fmt_speedup(x: tuple[float, float]) -> str:
    return f"{x[0]:.2f}× / {x[1]:.2f}×"


class CpuMeter:
    """Wall time, this process's CPU time, and the whole machine's busy and steal time (/proc/stat)."""

    @staticmethod
    def _proc_stat() -> tuple[int, int, int] | None:
        try:
            with open("/proc/stat") as f:
                parts = [int(x) for x in f.readline().split()[1:]]
        except (OSError, ValueError):
            return None
        idle = parts[3] + (parts[4] if len(parts) > 4 else 0)
        steal = parts[7] if len(parts) > 7 else 0
        total = sum(parts[:8])
        return total, total - idle - steal, steal

    def __enter__(self) -> CpuMeter:
        self.t0 = time.perf_counter()
        ru = resource.getrusage(resource.RUSAGE_SELF)
        self.cpu0 = ru.ru_utime + ru.ru_stime
        self.stat0 = self._proc_stat()
        self.load0 = os.getloadavg()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.perf_counter() - self.t0
        ru = resource.getrusage(resource.RUSAGE_SELF)
        self.cpu = ru.ru_utime + ru.ru_stime - self.cpu0
        self.load1 = os.getloadavg()
        stat1 = self._proc_stat()
        hz = os.sysconf("SC_CLK_TCK")
        if self.stat0 and stat1:
            self.machine_busy = (stat1[1] - self.stat0[1]) / hz
            self.steal = (stat1[2] - self.stat0[2]) / hz
        else:
            self.machine_busy = self.steal = float("nan")

    def summary(self) -> dict:
        return {
            "wall_s": self.wall,
            "this_process_cpu_s": self.cpu,
            "machine_busy_cpu_s": self.machine_busy,
            "steal_cpu_s": self.steal,
            "other_work_cores": (self.machine_busy - self.cpu) / self.wall,
            "this_process_cores": self.cpu / self.wall,
            "loadavg_start": self.load0,
            "loadavg_end": self.load1,
        }


# -- contenders ---------------------------------------------------------------------------------


def simhash_contenders() -> tuple[Callable[[str], int], Callable[[str], int]] | None:
    try:
        from simhash import Simhash
    except ImportError:
        note("PyPI package `simhash` is not installed (pip install simhash): its rows are skipped")
        return None
    word = re.compile(r"\w+")
    cls = Simhash
    try:
        Simhash("ab" * 300)  # a feature weighing over 255 (its 4-gram "abab" occurs ~300 times)
    except OverflowError:
        # simhash 2.1.2 multiplies a uint8 bit array by the weight, which numpy >= 2 refuses for
        # weights over 255 (any text repeating a 4-gram 256 times). Widen that array; the cost is
        # one astype per feature of weight > 50 or per batch of 200 features.
        note(
            "simhash.Simhash overflows uint8 for feature weights > 255 under numpy >= 2: timed with "
            "a subclass whose _bitarray_from_bytes returns int64"
        )

        class _Simhash(Simhash):  # type: ignore[misc, valid-type]
            @staticmethod
            def _bitarray_from_bytes(b):
                return np.unpackbits(np.frombuffer(b, dtype=">B")).astype(np.int64)

        cls = _Simhash

    def default(t: str) -> int:
        return cls(t).value

    def shingles3(t: str) -> int:
        toks = word.findall(t.lower())
        feats = [" ".join(toks[i : i + 3]) for i in range(max(len(toks) - 2, 1))]
        return cls(feats).value

    return default, shingles3


def pipelines() -> dict[str, fpstore.Pipeline]:
    """The default pipeline and the SimHash scheme (plain text, no HTML step)."""
    pipes = {"default": fpstore.Pipeline()}
    try:
        simhash64 = fpstore.Pipeline(kind="simhash64", html="off")
    except TypeError:  # a build from before fingerprint kinds: the default is SimHash
        simhash64 = None
    if simhash64 is not None and simhash64.id != pipes["default"].id:
        pipes["simhash64"] = simhash64
    return pipes


def pipe_label(name: str, pipe: fpstore.Pipeline) -> str:
    cfg = pipe.config
    html = cfg.get("html", "off")
    return f"fpstore {'default ' if name == 'default' else ''}{cfg['kind']}" + (f" (html {html})" if html != "off" else "")


def _kind_number(pipe: fpstore.Pipeline) -> tuple:
    kinds = getattr(_pipeline, "KINDS", None)
    return (kinds[pipe.kind][1],) if kinds else ()


def twin_fingerprint(pipe: fpstore.Pipeline, texts: list[str]) -> list[int]:
    fp = _simhash_py.fingerprint
    prep = getattr(pipe, "prepare", _text.normalize)
    kind = _kind_number(pipe)
    return [fp(prep(t), pipe.seed, pipe.shingle, None, *kind)[0] for t in texts]


def contender_cases(corpus: Corpus, sub: Corpus, threads: int, peers, pipes: dict) -> list[Case]:
    texts, stexts = corpus.texts, sub.texts
    small = texts[:8]
    cases = []
    for name, pipe in pipes.items():
        label = pipe_label(name, pipe)
        cases += [
            Case(
                f"{corpus.name}/{name}/fp1",
                corpus.name,
                f"{label}: `fingerprint_many`, 1 thread",
                lambda p=pipe: p.fingerprint_many(texts, threads=1),
                len(texts),
                corpus.nbytes,
            ),
            Case(
                f"{corpus.name}/{name}/fpN",
                corpus.name,
                f"{label}: `fingerprint_many`, {threads} threads",
                lambda p=pipe: p.fingerprint_many(texts, threads=threads),
                len(texts),
                corpus.nbytes,
            ),
            Case(
                f"{corpus.name}/{name}/loop",
                corpus.name,
                f"{label}: `Pipeline.fingerprint` in a Python loop",
                lambda p=pipe: [p.fingerprint(t) for t in texts],
                len(texts),
                corpus.nbytes,
            ),
        ]
    for name, pipe in pipes.items():
        cases.append(
            Case(
                f"{corpus.name}/{name}/twin",
                corpus.name,
                f"{pipe_label(name, pipe)}: pure-Python twin (subset)",
                lambda p=pipe: twin_fingerprint(p, stexts),
                len(stexts),
                sub.nbytes,
                warm=lambda p=pipe: twin_fingerprint(p, small),
            )
        )
    if peers is not None:
        default, shingles3 = peers
        cases += [
            Case(
                f"{corpus.name}/simhash",
                corpus.name,
                "`simhash` (PyPI), default features: char 4-grams (subset)",
                lambda: [default(t) for t in stexts],
                len(stexts),
                sub.nbytes,
                warm=lambda: [default(t) for t in small],
            ),
            Case(
                f"{corpus.name}/simhash3",
                corpus.name,
                "`simhash` (PyPI), word 3-shingles as features (subset)",
                lambda: [shingles3(t) for t in stexts],
                len(stexts),
                sub.nbytes,
                warm=lambda: [shingles3(t) for t in small],
            ),
        ]
    return cases


def gaoya_contender() -> tuple[str, Callable[[list[str]], object]] | None:
    """gaoya's MinHash signature of each document: (label, function of a list of texts), or None."""
    try:
        from gaoya.minhash import MinHashStringIndex
    except ImportError:
        note("gaoya is not installed (pip install gaoya, or the bench extra): its row is skipped")
        return None
    # 16 bands x 4 = 64 hashes, the nearest to fpstore's 64 one-bit values; lowercased word 3-shingles as fpstore's.
    index = MinHashStringIndex(
        hash_size=32, jaccard_threshold=0.5, num_bands=16, band_size=4, analyzer="word", lowercase=True, ngram_range=(3, 3)
    )
    one = index.minhash_index.tokenize_and_minhash
    return "gaoya 0.2 MinHash, 64 × 32-bit hashes, lowercased word 3-shingles, 1 thread", lambda texts: [one(t) for t in texts]


def batch_bytes(texts: list[str], threads: int) -> list[bytes]:
    """The UTF-8 bytes of ``texts``, one bytes object per batch of ``fingerprint_many(texts, threads)``."""
    n = len(texts)
    size = _pipeline.batch_size(n, threads)
    return [b"".join(t.encode("utf-8", "surrogatepass") for t in texts[lo : lo + size]) for lo in range(0, n, size)]


def _sha_rounds(batch: bytes, rounds: int) -> None:
    for _ in range(rounds):
        hashlib.sha256(batch).digest()  # releases the GIL for buffers over 2 KB


def headline_section(real: Corpus, rich: list[Corpus], threads: int, repeat: int) -> tuple[str, dict]:
    """fingerprint_many on 1 and ``threads`` threads on NFKC-rich text beside the sha256 control
    on the same bytes; fpstore on one thread beside gaoya on the real corpus."""
    pipe = fpstore.Pipeline()
    pool = ThreadPoolExecutor(threads)
    cases: list[Case] = []
    rounds: dict[str, int] = {}
    for corpus in rich:
        texts, name = corpus.texts, corpus.name
        batches = batch_bytes(texts, threads)
        pipe.fingerprint_many(texts, threads=1)  # warm, then time one run of each to size the control
        t0 = time.perf_counter()
        pipe.fingerprint_many(texts, threads=1)
        t_fp = time.perf_counter() - t0
        t0 = time.perf_counter()
        for b in batches:
            _sha_rounds(b, 1)
        rounds[name] = r = max(1, round(t_fp / (time.perf_counter() - t0)))
        cases += [
            Case(f"{name}/fp1", name, "1 thread", lambda t=texts: pipe.fingerprint_many(t, threads=1), len(texts), corpus.nbytes),
            Case(
                f"{name}/fpN",
                name,
                f"{threads} threads",
                lambda t=texts: pipe.fingerprint_many(t, threads=threads),
                len(texts),
                corpus.nbytes,
            ),
            Case(
                f"{name}/sha1", name, "control, 1 thread", lambda b=batches, r=r: [_sha_rounds(x, r) for x in b], len(texts), corpus.nbytes
            ),
            Case(
                f"{name}/shaN",
                name,
                f"control, {threads} threads",
                lambda b=batches, r=r: list(pool.map(lambda x: _sha_rounds(x, r), b)),
                len(texts),
                corpus.nbytes,
            ),
        ]
    peer = gaoya_contender()
    cases.append(
        Case("real/fp1", real.name, "fpstore 1 thread", lambda: pipe.fingerprint_many(real.texts, threads=1), len(real.texts), real.nbytes)
    )
    if peer is not None:
        cases.append(Case("real/gaoya", real.name, peer[0], lambda: peer[1](real.texts), len(real.texts), real.nbytes))
    with CpuMeter() as meter:
        run_interleaved(cases, repeat)
    pool.shutdown()
    get = {c.key: c for c in cases}
    out = [
        f"| text | MB | docs | MB/s 1 thread | MB/s {threads} threads | speedup (medians / best) | control: sha256 of the same bytes, "
        f"speedup (medians / best) | speedup ÷ control's speedup (medians) |",
        "|---|--:|--:|--:|--:|--:|--:|--:|",
    ]
    data: dict = {"cases": [c.summary() for c in cases], "control_rounds": rounds}
    for corpus in rich:
        name = corpus.name
        f1, fN, s1, sN = (get[f"{name}/{k}"] for k in ("fp1", "fpN", "sha1", "shaN"))
        mine, control = speedup(f1, fN), speedup(s1, sN)
        row = {
            "mb": corpus.mb,
            "docs": len(corpus.texts),
            "mb_per_s_1": f1.summary()["mb_per_s"],
            "mb_per_s_n": fN.summary()["mb_per_s"],
            "speedup_medians_best": mine,
            "control_speedup_medians_best": control,
            "control_rounds": rounds[name],
            "ratio_to_control": mine[0] / control[0],
        }
        data[name] = row
        out.append(
            f"| {corpus.description} | {corpus.mb:.1f} | {len(corpus.texts):,} | {fmt_rate(row['mb_per_s_1'])} | {fmt_rate(row['mb_per_s_n'])} | "
            f"{fmt_speedup(mine)} | {fmt_speedup(control)} (× {rounds[name]}) | **{row['ratio_to_control']:.2f}** |"
        )
    m = meter.summary()
    data["machine"] = m
    out.append("")
    out.append(
        f"- target: {threads}-thread speedup ≥ 0.90 of the control's: "
        + ", ".join(f"{c.name} {data[c.name]['ratio_to_control']:.2f} ({verdict(data[c.name])})" for c in rich)
    )
    r1 = get["real/fp1"].summary()
    data["real_fp1_mb_per_s"] = r1["mb_per_s"]
    if peer is not None:
        g = get["real/gaoya"].summary()
        ratio = r1["mb_per_s"] / g["mb_per_s"]
        data["gaoya"] = {"label": peer[0], "mb_per_s": g["mb_per_s"], "fpstore_over_gaoya": ratio}
        out.append(
            f"- real corpus ({real.mb:.1f} MB), one thread: fpstore default {fmt_rate(r1['mb_per_s'])} MB/s (best {fmt_rate(r1['mb'] / r1['time_min_s'])}), "
            f"{peer[0]} {fmt_rate(g['mb_per_s'])} MB/s (best {fmt_rate(g['mb'] / g['time_min_s'])}): **{ratio:.2f}×** "
            f"(target ≥ 3.5×: {'met' if ratio >= 3.5 else 'not met'})"
        )
    out.append(
        f"- during these runs ({len(cases)} cases × {repeat} repeats): this process {m['this_process_cores']:.2f} cores, other work "
        f"{m['other_work_cores']:.2f} cores, steal {m['steal_cpu_s']:.1f} CPU-s; load average {m['loadavg_start'][0]:.2f} → {m['loadavg_end'][0]:.2f}"
    )
    return "\n".join(out), data


def verdict(row: dict) -> str:
    """Met or not; undecided when the control itself did not scale (the other core was busy, so a
    ratio near or above 1 says nothing about fpstore)."""
    if row["control_speedup_medians_best"][0] < 1.5:
        return f"undecided: the control got {row['control_speedup_medians_best'][0]:.2f}×, the other core was busy"
    return "met" if row["ratio_to_control"] >= 0.9 else "not met"


def nfkc_rich_corpora(base_docs: list[str], target: int) -> list[Corpus]:
    """The real documents NFKC changes, and the whole real corpus with "ﬁ" on every line."""
    changed = [d for d in base_docs if unicodedata.normalize("NFKC", d) != d]
    share = sum(len(d.encode()) for d in changed) / sum(len(d.encode()) for d in base_docs)
    out = []
    if changed:
        out.append(
            Corpus(
                "real-nfkc",
                replicate(changed, target),
                f"real, the {len(changed)} documents NFKC changes ({share:.0%} of its bytes), replicated",
            )
        )
    out.append(Corpus("real+ﬁ", replicate(inject_per_line(base_docs, "\ufb01"), target), "real + `ﬁ` (U+FB01) at the start of every line"))
    return out


# -- sections -----------------------------------------------------------------------------------


def fmt_rate(x: float) -> str:
    return f"{x:,.0f}" if x >= 100 else (f"{x:,.1f}" if x >= 10 else f"{x:,.2f}")


def main_table(corpora: list[Corpus], cases: list[Case]) -> tuple[str, list[dict]]:
    rows, out = [], []
    out.append(
        "| corpus | contender | docs timed | MB timed | MB/s (median) | MB/s at p90 time | MB/s (best) | docs/s (median) | × fpstore default, 1 thread |"
    )
    out.append("|---|---|--:|--:|--:|--:|--:|--:|--:|")
    for corpus in corpora:
        mine = [c for c in cases if c.corpus == corpus.name]
        base = next(c for c in mine if c.key.endswith("/default/fp1")).summary()["mb_per_s"]
        for c in mine:
            s = c.summary()
            s["ratio_vs_fpstore_default_1thread"] = s["mb_per_s"] / base
            rows.append(s)
            out.append(
                f"| {corpus.name} | {c.contender} | {c.docs:,} | {s['mb']:.2f} | {fmt_rate(s['mb_per_s'])} | "
                f"{fmt_rate(s['mb_per_s_at_p90_time'])} | {fmt_rate(s['mb'] / s['time_min_s'])} | {s['docs_per_s']:,.0f} | {s['ratio_vs_fpstore_default_1thread']:.3g} |"
            )
    return "\n".join(out), rows


def big_text_section(base_docs: list[str], sizes_mb: list[int], repeat: int, pipes: dict) -> tuple[str, list[dict]]:
    """One text of each size (ASCII real documents, repeated): time of Pipeline.fingerprint."""
    unit = "\n\n".join(base_docs)
    top = sizes_mb[-1] * 10**6
    big = (unit + "\n\n") * (top // (len(unit) + 2) + 1)
    texts = {mb: big[: mb * 10**6] for mb in sizes_mb}  # slices are copies; ASCII, so 1 byte per char
    del big
    cases = [
        Case(
            f"big/{name}/{mb}",
            pipe_label(name, pipe),
            f"{mb} MB",
            (lambda t=t, p=pipe: p.fingerprint(t)),
            1,
            len(t),
            warm=lambda p=pipe: p.fingerprint(unit),
        )
        for name, pipe in pipes.items()
        for mb, t in texts.items()
    ]
    run_interleaved(cases, repeat)
    out = ["| pipeline | text size | time (median) | time p90 | MB/s (median) | time / size (ns per byte) |", "|---|--:|--:|--:|--:|--:|"]
    rows = []
    for c in cases:
        s = c.summary()
        rows.append(s)
        out.append(
            f"| {c.corpus} | {c.contender} | {s['time_median_s'] * 1e3:,.1f} ms | {s['time_p90_s'] * 1e3:,.1f} ms | "
            f"{fmt_rate(s['mb_per_s'])} | {s['time_median_s'] / c.nbytes * 1e9:.2f} |"
        )
    texts.clear()
    return "\n".join(out), rows


def serial_part(pipe: fpstore.Pipeline) -> Callable[..., str]:
    """What fingerprint_many does per text under the GIL: HTML check and decoding (``_decoded``;
    the kernel does NFKC), or in builds before that, ``prepare`` (NFKC included)."""
    return getattr(pipe, "_decoded", None) or getattr(pipe, "prepare", _text.normalize)


def nfkc_section(base_docs: list[str], target: int, threads: int, repeat: int) -> tuple[str, list[dict]]:
    pipe = fpstore.Pipeline()
    prep = serial_part(pipe)
    variants = [
        ("real, ASCII-only (typographic quotes/dashes spelled in ASCII)", [d.translate(_ASCII_FOLD) for d in base_docs]),
        ("real, as found (some curly quotes, dashes, ellipses)", base_docs),
        ("real + `é` at the start of every line (Latin-1, already NFKC)", inject_per_line(base_docs, "\u00e9")),
        ("real + `ﬁ` (U+FB01) at the start of every line (NFKC rewrites it)", inject_per_line(base_docs, "\ufb01")),
    ]
    cases = []
    for i, (label, docs) in enumerate(variants):
        texts = replicate(docs, target)
        nbytes = sum(len(t.encode()) for t in texts)
        cases += [
            Case(f"v{i}/fp1", label, "1 thread", lambda t=texts: pipe.fingerprint_many(t, threads=1), len(texts), nbytes),
            Case(f"v{i}/fpN", label, f"{threads} threads", lambda t=texts: pipe.fingerprint_many(t, threads=threads), len(texts), nbytes),
            Case(f"v{i}/norm", label, "serial part only", lambda t=texts: [prep(x, index=j) for j, x in enumerate(t)], len(texts), nbytes),
        ]
    run_interleaved(cases, repeat)
    out = [
        "| text | MB | MB/s 1 thread | MB/s "
        + str(threads)
        + " threads | speedup (medians / best) | serial part (HTML check, decoding) share of 1-thread time | × ASCII-only, 1 thread |",
        "|---|--:|--:|--:|--:|--:|--:|",
    ]
    rows = []
    base = None
    for i, (label, _) in enumerate(variants):
        c1, cn, cz = (next(c for c in cases if c.key == f"v{i}/{k}") for k in ("fp1", "fpN", "norm"))
        s1, sn, sz = c1.summary(), cn.summary(), cz.summary()
        base = base or s1["mb_per_s"]
        row = {
            "variant": label,
            "mb": s1["mb"],
            "docs": c1.docs,
            "mb_per_s_1": s1["mb_per_s"],
            "mb_per_s_n": sn["mb_per_s"],
            "speedup_medians_best": speedup(c1, cn),
            "normalize_s": sz["time_median_s"],
            "normalize_share": sz["time_median_s"] / s1["time_median_s"],
            "ratio_vs_ascii": s1["mb_per_s"] / base,
        }
        rows.append(row)
        out.append(
            f"| {label} | {row['mb']:.1f} | {fmt_rate(row['mb_per_s_1'])} | {fmt_rate(row['mb_per_s_n'])} | "
            f"{fmt_speedup(row['speedup_medians_best'])} | {row['normalize_share']:.0%} | {row['ratio_vs_ascii']:.2f} |"
        )
    return "\n".join(out), rows


def _hash_work(buf: bytes, rounds: int) -> None:
    for _ in range(rounds):
        hashlib.sha256(buf).digest()  # releases the GIL for buffers over 2 KB


def threads_section(corpora: list[Corpus], threads: int, repeat: int, quick: bool) -> tuple[str, dict]:
    """Where fingerprint_many's time goes, and what a trivial GIL-free workload gets from the threads."""
    pipe = fpstore.Pipeline()
    prep = serial_part(pipe)
    kind = _kind_number(pipe) + ((True,) if hasattr(pipe, "_decoded") else ())  # the kernel normalises
    kernel = _pipeline._kernel
    batch = _pipeline._BATCH
    pool = ThreadPoolExecutor(threads)
    cases: list[Case] = []
    for corpus in corpora:
        texts = corpus.texts
        prepared = [prep(t, index=i) for i, t in enumerate(texts)]
        n = len(prepared)
        bounds = [(lo, min(lo + batch, n)) for lo in range(0, n, batch)]
        fps, ntok, dig = np.zeros(n, np.uint64), np.zeros(n, np.int64), np.zeros((n, 2), np.uint64)

        def kern(b, p=prepared, fps=fps, ntok=ntok, dig=dig):
            kernel.fingerprint_batch(p, b[0], b[1], pipe.seed, pipe.shingle, None, fps, ntok, dig, *kind)

        name = corpus.name
        cases += [
            Case(
                f"{name}/many1", name, "fingerprint_many, 1 thread", lambda t=texts: pipe.fingerprint_many(t, threads=1), n, corpus.nbytes
            ),
            Case(
                f"{name}/manyN",
                name,
                f"fingerprint_many, {threads} threads",
                lambda t=texts: pipe.fingerprint_many(t, threads=threads),
                n,
                corpus.nbytes,
            ),
            Case(f"{name}/norm", name, "serial pass", lambda t=texts: [prep(x, index=i) for i, x in enumerate(t)], n, corpus.nbytes),
            Case(f"{name}/k1", name, "kernel only, serial", lambda bs=bounds, k=kern: [k(b) for b in bs], n, corpus.nbytes),
            Case(
                f"{name}/kN", name, f"kernel only, {threads}-thread pool", lambda bs=bounds, k=kern: list(pool.map(k, bs)), n, corpus.nbytes
            ),
        ]
    buf = os.urandom(1 << 20)
    rounds = 16 if quick else 96  # MB of sha256 per thread
    cases += [
        Case(
            "sha/1",
            "sha256",
            f"{threads} × {rounds} MB sha256, 1 thread",
            lambda: _hash_work(buf, rounds * threads),
            1,
            rounds * threads << 20,
        ),
        Case(
            "sha/N",
            "sha256",
            f"{threads} × {rounds} MB sha256, {threads} threads",
            lambda: list(pool.map(lambda _: _hash_work(buf, rounds), range(threads))),
            1,
            rounds * threads << 20,
        ),
    ]
    with CpuMeter() as meter:
        run_interleaved(cases, repeat)
    pool.shutdown()
    get = {c.key: c for c in cases}
    out = [
        "| work | 1 thread (median) | "
        + f"{threads} threads (median) | speedup (medians / best) | serial part (HTML check, decoding) | kernel (NFKC, fingerprint) serial | kernel on {threads}-thread pool (speedup medians / best) | Amdahl bound |",
        "|---|--:|--:|--:|--:|--:|--:|--:|",
    ]
    data: dict = {"cases": [c.summary() for c in cases]}
    for corpus in corpora:
        name = corpus.name
        m1, mN, nz, k1, kN = (get[f"{name}/{k}"] for k in ("many1", "manyN", "norm", "k1", "kN"))
        tm1, tmN, tz, tk1, tkN = (float(np.median(c.times)) for c in (m1, mN, nz, k1, kN))
        nbatches = -(-m1.docs // batch)
        amdahl = tm1 / (tz + (tm1 - tz) / min(threads, nbatches))
        data[name] = {
            "many1_s": tm1,
            "manyN_s": tmN,
            "speedup_medians_best": speedup(m1, mN),
            "normalize_s": tz,
            "kernel1_s": tk1,
            "kernelN_s": tkN,
            "kernel_speedup_medians_best": speedup(k1, kN),
            "batches": nbatches,
            "amdahl_bound": amdahl,
        }
        out.append(
            f"| {pipe_label('default', pipe)}, {name} ({corpus.mb:.1f} MB, {nbatches} batch{'es' if nbatches != 1 else ''} of ≤{batch} docs) | {tm1 * 1e3:,.0f} ms | {tmN * 1e3:,.0f} ms | "
            f"{fmt_speedup(speedup(m1, mN))} | {tz * 1e3:,.1f} ms ({tz / tm1:.0%}) | {tk1 * 1e3:,.0f} ms | {tkN * 1e3:,.0f} ms "
            f"({fmt_speedup(speedup(k1, kN))}) | {amdahl:.2f}× |"
        )
    s1, sN = get["sha/1"], get["sha/N"]
    data["sha256"] = {"t1_s": float(np.median(s1.times)), "tN_s": float(np.median(sN.times)), "speedup_medians_best": speedup(s1, sN)}
    out.append(
        f"| trivial GIL-free work: sha256 of {threads} × {rounds} MB | {np.median(s1.times) * 1e3:,.0f} ms | "
        f"{np.median(sN.times) * 1e3:,.0f} ms | {fmt_speedup(speedup(s1, sN))} | – | – | – | {threads:.2f}× |"
    )
    data["machine"] = meter.summary()
    return "\n".join(out), data


def latency_section(corpus: Corpus) -> tuple[str, dict]:
    """Per-call latency of the default Pipeline.fingerprint on the (uniform-size) synthetic documents."""
    pipe = fpstore.Pipeline()
    lat = np.empty(len(corpus.texts))
    clock = time.perf_counter_ns
    gc.collect()
    for i, t in enumerate(corpus.texts):
        t0 = clock()
        pipe.fingerprint(t)
        lat[i] = clock() - t0
    p = {q: float(np.percentile(lat, q)) / 1e3 for q in (50, 90, 99)}
    p["max"] = float(lat.max()) / 1e3
    mean_kb = corpus.nbytes / len(corpus.texts) / 1e3
    return (
        f"default `Pipeline.fingerprint` per call on synthetic documents ({mean_kb:.1f} kB each, n = {len(lat):,}): "
        f"p50 {p[50]:.1f} µs, p90 {p[90]:.1f} µs, p99 {p[99]:.1f} µs, max {p['max']:.0f} µs"
    ), p


def machine_info() -> dict:
    model = ""
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout.splitlines():
            if line.startswith("Model name:"):
                model = line.split(":", 1)[1].strip()
    except OSError:
        pass
    return {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "nproc": os.cpu_count(),
        "affinity": len(os.sched_getaffinity(0)),
        "cpu_model": model,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "platform": platform.platform(),
        "fpstore_backend": fpstore.backend if isinstance(getattr(fpstore, "backend", None), str) else str(getattr(fpstore, "backend", "?")),
        "loadavg": os.getloadavg(),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=7, help="repeats per measurement (>= 5; default 7)")
    ap.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    ap.add_argument("--json", metavar="PATH", help="also write every figure to PATH as JSON")
    ap.add_argument("--only", choices=["headline"], help="run this section alone")
    args = ap.parse_args(argv)
    if args.repeat < 5:
        ap.error("--repeat must be at least 5: medians of fewer runs are noise on a shared machine")
    repeat = args.repeat
    q = args.quick
    n_synth = 2_000 if q else 20_000
    real_target = 2_000_000 if q else 30_000_000
    sub_budget = 50_000 if q else 500_000
    big_sizes = [1, 10] if q else [1, 10, 100]
    threads = len(os.sched_getaffinity(0))
    if threads < 2:
        note(f"only {threads} core available to this process; the multi-thread rows use 2 threads anyway")
        threads = 2

    info = machine_info()
    print(f"# fpstore fingerprinting benchmark{' (quick)' if q else ''}\n")
    print(
        f"machine: {info['nproc']} CPUs ({info['affinity']} usable), {info['cpu_model']}; Python {info['python']}, "
        f"numpy {info['numpy']}; fpstore backend {info['fpstore_backend']}; {info['date']}; "
        f"load average {', '.join(f'{x:.2f}' for x in info['loadavg'])}"
    )
    print(f"repeats: {repeat} (medians; order of contenders rotated each repeat)\n", flush=True)

    print("## Corpora\n")
    synth = synthetic_corpus(n_synth)
    base_docs, used = real_documents()
    corpora = [synth]
    if base_docs:
        base = Corpus("real-base", base_docs, "; ".join(used))
        real = Corpus(
            "real",
            replicate(base_docs, real_target),
            f"{'; '.join(used)} = {len(base_docs)} docs, {base.mb:.3f} MB, replicated as distinct copies",
        )
        corpora.append(real)
    else:
        note("no real English text found: the real-corpus rows are skipped")
        base = real = None
    for c in corpora:
        print(
            f"- **{c.name}**: {len(c.texts):,} docs, {c.mb:.2f} MB, {sum(not t.isascii() for t in c.texts):,} non-ASCII docs. {c.description}"
        )
    print(flush=True)

    # Twin must agree with the compiled kernel on what it times (a cheap guard against timing a broken twin).
    _simhash_py.set_fold_table(_text.FOLD)
    peers = simhash_contenders()
    pipes = pipelines()
    for name, pipe in pipes.items():
        print(f"- {pipe_label(name, pipe)}: config {pipe.config}")
    subs = {c.name: subset(c, sub_budget) for c in corpora}
    for c in corpora:
        for name, pipe in pipes.items():
            got = twin_fingerprint(pipe, subs[c.name].texts[:20])
            want = [int(x) for x in pipe.fingerprint_many(subs[c.name].texts[:20], threads=1)]
            if got != want:
                print(f"  WARNING: the pure-Python twin disagrees with the compiled kernel ({name}, {c.name})", flush=True)
            else:
                print(f"- check: pure-Python twin == compiled kernel on {len(got)} {c.name} docs ({name})")

    results: dict = {
        "machine": info,
        "repeat": repeat,
        "quick": q,
        "corpora": [{"name": c.name, "docs": len(c.texts), "mb": c.mb, "description": c.description} for c in corpora],
        "subsets": {k: {"docs": len(s.texts), "mb": s.mb} for k, s in subs.items()},
    }

    if real is not None:
        print("\n## Headline: two threads on NFKC-rich real text; one thread against gaoya\n", flush=True)
        rich = nfkc_rich_corpora(base_docs, real_target // 2)
        for c in rich:
            print(f"- **{c.name}**: {len(c.texts):,} docs, {c.mb:.2f} MB. {c.description}")
        table, data = headline_section(real, rich, threads, 3 * repeat)
        print(f"\n{pipe_label('default', pipes['default'])}, `fingerprint_many`, {3 * repeat} repeats:\n")
        print(table, flush=True)
        results["headline"] = data
    if args.only == "headline":
        return _write_json(args.json, results)

    print("\n## Throughput (paste into docs/benchmarks.md)\n", flush=True)
    cases: list[Case] = []
    for c in corpora:
        cases += contender_cases(c, subs[c.name], threads, peers, pipes)
    with CpuMeter() as meter:
        run_interleaved(cases, repeat)
    table, rows = main_table(corpora, cases)
    print(table)
    print()
    get = {c.key: c for c in cases}
    speedups = {}
    for c in corpora:
        for name, pipe in pipes.items():
            a, b = get[f"{c.name}/{name}/fp1"], get[f"{c.name}/{name}/fpN"]
            med, best = speedup(a, b)
            speedups[f"{c.name}/{name}"] = {"ratio_of_medians": med, "best_vs_best": best}
            print(
                f"- {threads}-thread speedup, {c.name}, {pipe_label(name, pipe)}: {med:.2f}× (ratio of medians); "
                f"{best:.2f}× (best repeat vs best repeat)"
            )
    m = meter.summary()
    print(
        f"- during these runs: this process used {m['this_process_cores']:.2f} cores on average, other work "
        f"{m['other_work_cores']:.2f} cores, steal {m['steal_cpu_s']:.1f} CPU-s; load average "
        f"{m['loadavg_start'][0]:.2f} → {m['loadavg_end'][0]:.2f}"
    )
    if base is not None:
        pipe = fpstore.Pipeline()
        pair = [
            Case("base/1", "real-base", "1 thread", lambda: pipe.fingerprint_many(base.texts, threads=1), len(base.texts), base.nbytes),
            Case(
                "base/N",
                "real-base",
                f"{threads} threads",
                lambda: pipe.fingerprint_many(base.texts, threads=threads),
                len(base.texts),
                base.nbytes,
            ),
        ]
        run_interleaved(pair, repeat)
        r1, rn = (c.summary()["mb_per_s"] for c in pair)
        print(
            f"- the real corpus as found, not replicated ({len(base.texts)} docs, {base.mb:.2f} MB, {len(batch_bytes(base.texts, threads))} "
            f"batches when threaded): 1 thread {r1:.0f} MB/s, {threads} threads {rn:.0f} MB/s (medians)"
        )
        results["real_base_unreplicated"] = {"docs": len(base.texts), "mb": base.mb, "mb_per_s_1": r1, "mb_per_s_n": rn}
    lat_line, lat = latency_section(synth)
    print(f"- {lat_line}")
    print(flush=True)
    results.update(throughput=rows, speedup=speedups, throughput_machine=m, latency_us=lat)

    print("## One large text (linear time)\n", flush=True)
    ascii_docs = [d for d in base_docs if d.isascii()] or synth.texts[:1000]
    what = "the real corpus's ASCII documents" if base_docs else "synthetic documents"
    table, rows = big_text_section(ascii_docs, big_sizes, repeat, pipes)
    print(f"`Pipeline.fingerprint(text)` on one text made of {what}, joined and repeated (no threads: one text is one kernel call):\n")
    print(table)
    print(flush=True)
    results["big_text"] = rows

    if base_docs:
        print("## Non-ASCII text (NFKC cost)\n", flush=True)
        table, rows = nfkc_section(base_docs, real_target // 2, threads, repeat)
        print(f"{pipe_label('default', pipes['default'])}, `fingerprint_many`:\n")
        print(table)
        print(flush=True)
        results["non_ascii"] = rows

    print("## Where fingerprint_many's time goes, and what the threads can do here\n", flush=True)
    diag_corpora = corpora + (
        [Corpus("real+ﬁ", replicate(inject_per_line(base_docs, "\ufb01"), real_target // 2), "")] if base_docs else []
    )
    table, data = threads_section(diag_corpora, threads, repeat, q)
    print(table)
    mm = data["machine"]
    print(
        f"\n- during these runs: this process {mm['this_process_cores']:.2f} cores, other work {mm['other_work_cores']:.2f} cores, "
        f"steal {mm['steal_cpu_s']:.1f} CPU-s; load average {mm['loadavg_start'][0]:.2f} → {mm['loadavg_end'][0]:.2f}"
    )
    print(
        "- Amdahl bound = t(1 thread) / (t(serial) + (t(1 thread) − t(serial)) / min(threads, batches)), where the serial part "
        "(the HTML check and decoding, `Pipeline._decoded`) holds the GIL and the kernel (NFKC and the fingerprint) does not."
    )
    results["threads"] = data
    return _write_json(args.json, results)


def _write_json(path: str | None, results: dict) -> int:
    results["loadavg_end"] = os.getloadavg()
    if path:
        with open(path, "w") as f:
            json.dump(results, f, indent=1, default=float)
        print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
