"""Image evaluation set with ground truth, and precision/recall per k of the image fingerprints.

    cd /work/main && PYTHONPATH=/work/main python tools/image_eval.py --markdown /tmp/image_eval.md
    # with scikit-image's bundled images as well (an installed skimage, or its wheel's data folder):
    PYTHONPATH=/work/main python tools/image_eval.py --skimage /path/to/skimage/data --markdown /tmp/image_eval.md

A script with importable functions (``tests/test_image_eval.py`` builds a reduced set through them).
Nothing is downloaded: every base image ships inside a package installed from PyPI.

Base images ("sources")
-----------------------
* matplotlib's ``mpl-data/sample_data`` (matplotlib is in the test extra): ``grace_hopper.jpg``
  (photo, 512x600), ``Minduka_Present_Blue_Pack.png`` (RGBA icon, 128x128), ``logo2.png`` (RGBA
  logo, 542x130), and 2-D arrays rendered to 8-bit images: ``s1045.ima.gz`` (MRI slice, 256x256
  uint16, scaled by its maximum to grey), ``jacksboro_fault_dem.npz`` ``elevation`` (344x403,
  colormap ``gist_earth``), ``topobathy.npz`` ``topo`` (91x120, colormap ``terrain``) and
  ``axes_grid/bivariate_normal.npy`` (15x15, colormap ``RdBu``, upscaled 10x bicubic to 150x150).
  Arrays are min-max normalised before the colormap; the colormap's RGB is used (alpha dropped).
* Optionally (``--skimage DIR`` or an importable ``skimage``): the images that scikit-image's wheel
  bundles in ``skimage/data`` (most of ``skimage.data`` is fetched at run time; these files are in
  the wheel itself). Left out: ``chessboard_RGB.png`` (the same board as ``chessboard_GRAY.png``),
  ``motorcycle_right.png`` (the stereo partner of ``motorcycle_left.png``: a near-duplicate with no
  ground truth), and files under 16 pixels a side or not single images (``multipage*.tif``,
  ``no_time_for_that_tiny.gif``, ``lfw_subset.npy``, ``motorcycle_disp.npz``).

Tiles. A source whose both sides are at least ``TILE_MIN_SIDE`` (300) pixels also gives its four
quadrants as bases: ``(0, 0, w//2, h//2)``, ``(w//2, 0, w, h//2)``, ``(0, h//2, w//2, h)``,
``(w//2, h//2, w, h)`` (PIL boxes; they do not overlap). A quadrant and its own full source overlap,
so that pair is *related*: neither a positive nor a negative. Two quadrants of one source share no
pixel and are negatives like any two different images.

Every base is RGB, RGBA (kept where the source has alpha) or L, and is stored as PNG (lossless).

Transformations (ground truth: each variant is a near-duplicate of its base)
---------------------------------------------------------------------------
Parameters are drawn from ``random.Random(f"{seed}:{base name}:{transform}")`` (seed 22 by
default), so a base's variants do not change when other bases are added. Variants are PNG except
``jpeg`` and ``combo``; images with alpha are composited over white before JPEG encoding.

* ``resize``: factors 0.5, 0.75 and one drawn from [1.2, 1.6]; Lanczos, bicubic and bilinear
  respectively (the output side at least 16 pixels).
* ``jpeg``: qualities 30, 50, 75, 95 (4:2:0, baseline, Pillow's encoder).
* ``crop``: 2, 5 and 10 % of the width and of the height removed, the split between the two
  opposite sides drawn uniformly.
* ``brightness_contrast``: three (brightness, contrast) factors drawn from [0.7, 1.3] each
  (``ImageEnhance.Brightness`` then ``ImageEnhance.Contrast``).
* ``watermark``: "(c) fpstore 2024" in ``ImageFont.load_default(size)`` (Pillow's default font;
  size = height/12, at least 10), white at alpha 180 with a black 1-pixel stroke, at a drawn
  position in the bottom third; two variants (second: size height/8, top third).
* ``rotate``: angles drawn from [1, 5] degrees, sign drawn, three variants; bicubic, same canvas
  (``expand=False``), corners filled with white.
* ``combo``: crop 3 % (drawn split), resize to 0.8, JPEG quality 75 (a typical re-share).

Pairs
-----
Retrieval (the per-transformation tables): every variant is a query against every base; its own
base within k is a true positive, another unrelated base within k a false positive, its own base
beyond k a false negative. precision = TP / (TP + FP), recall = TP / queries, F1 their harmonic
mean; per transformation and pooled. Beside it, the pair-level false-positive rate: over every pair
of images (bases and variants) from different, unrelated bases, the share within k (many more
negatives than the retrieval tables have).

Fingerprints: ``ImagePipeline(kind).fingerprint(bytes)`` for ``phash64``/``dhash64``, and
``imagehash.phash``/``imagehash.dhash`` of ``Image.open(bytes)`` (the library as users call it),
as 64-bit ints, compared by Hamming distance for k = 0..16.

Diagnostic hashers: ``phash64 no-draft`` / ``dhash64 no-draft`` are the same pipelines given
``Image.open(bytes)`` (a PIL image) instead of the bytes, so a JPEG is decoded at full scale
rather than through ``draft``: the difference isolates what reduced-scale decoding costs in bits.

Recommended k: among the k whose pair-level false-positive rate is at most ``FPR_CAP`` (1e-4),
the k of the best pooled retrieval F1, the smallest among ties. The retrieval tables have only as
many negatives per query as there are bases (a store of millions of images has many more); the
pair-level rate is the bound that carries over. ``distinct base pairs`` counts the unrelated base
pairs with at least one pair of images within k: few means the false positives come from a few
look-alike images (e.g. two quarter discs on black), not from the hash at large.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import os
import random
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

SEED = 22
KS = tuple(range(17))
TILE_MIN_SIDE = 300
TRANSFORMS = ("resize", "jpeg", "crop", "brightness_contrast", "watermark", "rotate", "combo")
HASHERS = ("phash64", "dhash64", "imagehash.phash", "imagehash.dhash", "phash64 no-draft", "dhash64 no-draft")
#: The recommendation's bound on the pair-level false-positive rate (see the module docstring).
FPR_CAP = 1e-4
#: The k this script recommends on the full set (matplotlib's and scikit-image 0.26's bundled
#: images, seed 22, Pillow 13); tests/test_image_eval.py holds the pipelines to it on a reduced set.
RECOMMENDED_K = {"phash64": 10, "dhash64": 4}
SKIMAGE_SKIP = frozenset(
    {
        "chessboard_RGB.png",
        "motorcycle_right.png",
        "multipage.tif",
        "multipage_rgb.tif",
        "no_time_for_that_tiny.gif",
    }
)
WATERMARK = "(c) fpstore 2024"


@dataclass
class Base:
    name: str  # e.g. "mpl/grace_hopper", "mpl/grace_hopper#q1"
    image: Any  # PIL image, mode RGB, RGBA or L
    family: str  # the source it came from
    tile: bool  # a quadrant of its source


@dataclass
class Item:
    """One encoded image of the set."""

    name: str
    base: int  # index into EvalSet.bases
    transform: str  # "base" or one of TRANSFORMS
    params: str  # the parameters drawn for this variant
    slot: str  # which variant of its transform (the same for every base), e.g. "q30", "up 1.2-1.6 bilinear"
    data: bytes = field(repr=False)


@dataclass
class EvalSet:
    bases: list[Base]
    items: list[Item]

    def digest(self) -> str:
        """blake2b of every item's name, params and bytes: equal digests mean an identical set."""
        h = hashlib.blake2b(digest_size=16)
        for it in self.items:
            h.update(f"{it.name}|{it.transform}|{it.params}|{len(it.data)}".encode())
            h.update(it.data)
        return h.hexdigest()

    def related(self) -> np.ndarray:
        """bool matrix over bases: same base, or a tile and its own full source."""
        n = len(self.bases)
        rel = np.eye(n, dtype=bool)
        for i, a in enumerate(self.bases):
            for j, b in enumerate(self.bases):
                if a.family == b.family and (a.tile != b.tile):
                    rel[i, j] = True
        return rel


# -- base images -------------------------------------------------------------------------------


def mpl_sample_dir() -> Path:
    import matplotlib

    return Path(matplotlib.get_data_path()) / "sample_data"


def _colormap(arr: np.ndarray, name: str) -> Any:
    from matplotlib import colormaps
    from PIL import Image

    a = np.asarray(arr, dtype=np.float64)
    lo, hi = float(np.nanmin(a)), float(np.nanmax(a))
    norm = (a - lo) / (hi - lo if hi > lo else 1.0)
    rgba = colormaps[name](norm, bytes=True)
    return Image.fromarray(np.ascontiguousarray(rgba[..., :3]), "RGB")


def mpl_sources() -> list[tuple[str, Any]]:
    """(name, PIL image) of matplotlib's sample data, as the module docstring lists them."""
    from PIL import Image

    d = mpl_sample_dir()
    out: list[tuple[str, Any]] = []
    with Image.open(d / "grace_hopper.jpg") as im:
        out.append(("mpl/grace_hopper", im.convert("RGB")))
    for f in ("Minduka_Present_Blue_Pack.png", "logo2.png"):
        with Image.open(d / f) as im:
            out.append((f"mpl/{f.rsplit('.', 1)[0]}", im.convert("RGBA") if "A" in im.getbands() else im.convert("RGB")))
    with gzip.open(d / "s1045.ima.gz") as f:
        mri = np.frombuffer(f.read(), np.uint16).reshape(256, 256)
    out.append(("mpl/s1045_mri", Image.fromarray((mri.astype(np.float64) * (255.0 / max(1, int(mri.max())))).astype(np.uint8), "L")))
    with np.load(d / "jacksboro_fault_dem.npz") as z:
        out.append(("mpl/jacksboro_dem", _colormap(z["elevation"], "gist_earth")))
    with np.load(d / "topobathy.npz") as z:
        out.append(("mpl/topobathy", _colormap(z["topo"], "terrain")))
    bn = _colormap(np.load(d / "axes_grid" / "bivariate_normal.npy"), "RdBu")
    out.append(("mpl/bivariate_normal", bn.resize((150, 150), Image.Resampling.BICUBIC)))
    return out


def skimage_dir(spec: str | None) -> Path | None:
    """The folder of scikit-image's bundled images: ``spec`` itself, or (``"auto"``) an installed
    skimage's ``data`` folder; None when there is none."""
    if spec in (None, "off"):
        return None
    if spec != "auto":
        return Path(spec)
    try:
        import importlib.util

        found = importlib.util.find_spec("skimage")
    except (ImportError, ValueError):
        return None
    if found is None or not found.submodule_search_locations:
        return None
    return Path(list(found.submodule_search_locations)[0]) / "data"


def skimage_sources(folder: Path) -> list[tuple[str, Any]]:
    from PIL import Image

    out: list[tuple[str, Any]] = []
    for p in sorted(folder.iterdir()):
        if p.suffix.lower() not in (".png", ".jpg", ".jpeg", ".gif", ".tif") or p.name in SKIMAGE_SKIP:
            continue
        with Image.open(p) as im:
            if min(im.size) < 16:
                continue
            bands = im.getbands()
            mode = "RGBA" if "A" in bands or "transparency" in im.info else ("L" if bands == ("L",) else "RGB")
            out.append((f"skimage/{p.stem}", im.convert(mode)))
    return out


def make_bases(sources: Iterable[tuple[str, Any]], tiles: bool = True) -> list[Base]:
    bases: list[Base] = []
    for name, im in sources:
        bases.append(Base(name, im, name, False))
        w, h = im.size
        if tiles and min(w, h) >= TILE_MIN_SIDE:
            boxes = [(0, 0, w // 2, h // 2), (w // 2, 0, w, h // 2), (0, h // 2, w // 2, h), (w // 2, h // 2, w, h)]
            for q, box in enumerate(boxes, 1):
                bases.append(Base(f"{name}#q{q}", im.crop(box), name, True))
    return bases


# -- transformations ---------------------------------------------------------------------------


def _png(im: Any) -> bytes:
    buf = io.BytesIO()
    im.save(buf, "PNG", compress_level=1)
    return buf.getvalue()


def _flatten(im: Any) -> Any:
    from PIL import Image

    if im.mode == "RGBA":
        white = Image.new("RGBA", im.size, (255, 255, 255, 255))
        return Image.alpha_composite(white, im).convert("RGB")
    return im


def _jpeg(im: Any, quality: int) -> bytes:
    buf = io.BytesIO()
    _flatten(im).save(buf, "JPEG", quality=quality)
    return buf.getvalue()


def _resize(im: Any, factor: float, resample: Any) -> Any:
    w, h = im.size
    return im.resize((max(16, round(w * factor)), max(16, round(h * factor))), resample)


def _crop(im: Any, frac: float, rng: random.Random) -> Any:
    w, h = im.size
    dx, dy = round(w * frac), round(h * frac)
    left, top = round(dx * rng.random()), round(dy * rng.random())
    return im.crop((left, top, w - (dx - left), h - (dy - top)))


def _watermark(im: Any, rng: random.Random, size_div: int, band: int) -> Any:
    from PIL import Image, ImageDraw, ImageFont

    base = im.convert("RGBA")
    w, h = base.size
    font = ImageFont.load_default(size=max(10, h // size_div))
    layer = Image.new("RGBA", base.size, (0, 0, 0, 0))
    draw = ImageDraw.Draw(layer)
    left, top, right, bottom = draw.textbbox((0, 0), WATERMARK, font=font, stroke_width=1)
    tw, th = right - left, bottom - top
    x = round(rng.random() * max(0, w - tw))
    y0 = band * h // 3
    y = y0 + round(rng.random() * max(0, h // 3 - th))
    draw.text((x - left, y - top), WATERMARK, font=font, fill=(255, 255, 255, 180), stroke_width=1, stroke_fill=(0, 0, 0, 180))
    out = Image.alpha_composite(base, layer)
    return out if im.mode == "RGBA" else out.convert(im.mode if im.mode != "L" else "L")


def _rotate(im: Any, angle: float) -> Any:
    from PIL import Image

    fill: Any = 255 if im.mode == "L" else ((255, 255, 255, 255) if im.mode == "RGBA" else (255, 255, 255))
    return im.rotate(angle, resample=Image.Resampling.BICUBIC, expand=False, fillcolor=fill)


def variants(base: Base, transform: str, seed: int = SEED) -> list[tuple[str, str, bytes]]:
    """(slot, params, encoded bytes) of one transformation of one base (see the module docstring)."""
    from PIL import Image, ImageEnhance

    rng = random.Random(f"{seed}:{base.name}:{transform}")
    im = base.image
    R = Image.Resampling
    out: list[tuple[str, str, bytes]] = []
    if transform == "resize":
        up = round(rng.uniform(1.2, 1.6), 3)
        for slot, factor, rs in (
            ("x0.5 lanczos", 0.5, R.LANCZOS),
            ("x0.75 bicubic", 0.75, R.BICUBIC),
            ("x1.2-1.6 bilinear", up, R.BILINEAR),
        ):
            out.append((slot, f"x{factor}", _png(_resize(im, factor, rs))))
    elif transform == "jpeg":
        for q in (30, 50, 75, 95):
            out.append((f"q{q}", f"q{q}", _jpeg(im, q)))
    elif transform == "crop":
        for frac in (0.02, 0.05, 0.10):
            out.append((f"{round(frac * 100)}%", f"{round(frac * 100)}%", _png(_crop(im, frac, rng))))
    elif transform == "brightness_contrast":
        for _ in range(3):
            b, c = round(rng.uniform(0.7, 1.3), 3), round(rng.uniform(0.7, 1.3), 3)
            if im.mode == "RGBA":  # enhance the colour, keep the alpha
                rgb, alpha = im.convert("RGB"), im.getchannel("A")
                rgb = ImageEnhance.Contrast(ImageEnhance.Brightness(rgb).enhance(b)).enhance(c)
                done = rgb.convert("RGBA")
                done.putalpha(alpha)
            else:
                done = ImageEnhance.Contrast(ImageEnhance.Brightness(im).enhance(b)).enhance(c)
            out.append(("b,c in 0.7-1.3", f"b{b} c{c}", _png(done)))
    elif transform == "watermark":
        out.append(("h/12 bottom", "h/12 bottom", _png(_watermark(im, rng, 12, 2))))
        out.append(("h/8 top", "h/8 top", _png(_watermark(im, rng, 8, 0))))
    elif transform == "rotate":
        for _ in range(3):
            angle = round(rng.uniform(1.0, 5.0), 2) * rng.choice((-1, 1))
            out.append(("1-5 deg", f"{angle:+.2f} deg", _png(_rotate(im, angle))))
    elif transform == "combo":
        done = _resize(_crop(im, 0.03, rng), 0.8, R.LANCZOS)
        out.append(("crop 3% x0.8 q75", "crop 3% x0.8 q75", _jpeg(done, 75)))
    else:
        raise ValueError(f"unknown transform {transform!r}")
    return out


def build(sources: Iterable[tuple[str, Any]], transforms: Sequence[str] = TRANSFORMS, tiles: bool = True, seed: int = SEED) -> EvalSet:
    bases = make_bases(sources, tiles)
    items: list[Item] = []
    for i, b in enumerate(bases):
        items.append(Item(b.name, i, "base", "png", "base", _png(b.image)))
    for i, b in enumerate(bases):
        for t in transforms:
            for slot, params, data in variants(b, t, seed):
                items.append(Item(f"{b.name}~{t}~{params}", i, t, params, slot, data))
    return EvalSet(bases, items)


# -- fingerprints and scores -------------------------------------------------------------------


def hashers() -> dict[str, Callable[[bytes], int]]:
    from PIL import Image

    from fpstore.fingerprint.image import ImagePipeline

    out: dict[str, Callable[[bytes], int]] = {}
    for kind in ("phash64", "dhash64"):
        out[kind] = ImagePipeline(kind=kind).fingerprint
    try:
        import imagehash
    except ImportError:
        return out
    out["imagehash.phash"] = lambda data: int(str(imagehash.phash(Image.open(io.BytesIO(data)))), 16)
    out["imagehash.dhash"] = lambda data: int(str(imagehash.dhash(Image.open(io.BytesIO(data)))), 16)
    return out


def diagnostic_hashers() -> dict[str, Callable[[bytes], int]]:
    """The pipelines given a PIL image (full-scale JPEG decoding, no ``draft``)."""
    from PIL import Image

    from fpstore.fingerprint.image import ImagePipeline

    def full_decode(kind: str) -> Callable[[bytes], int]:
        pipe = ImagePipeline(kind=kind)
        return lambda data: pipe.fingerprint(Image.open(io.BytesIO(data)))

    return {f"{kind} no-draft": full_decode(kind) for kind in ("phash64", "dhash64")}


def fingerprints(es: EvalSet, hasher: Callable[[bytes], int]) -> np.ndarray:
    return np.fromiter((hasher(it.data) for it in es.items), dtype=np.uint64, count=len(es.items))


def distances(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Hamming distances, len(a) x len(b), uint8."""
    x = np.bitwise_xor(a[:, None], b[None, :])
    return np.unpackbits(x.view(np.uint8).reshape(*x.shape, 8), axis=-1).sum(axis=-1, dtype=np.uint8)


@dataclass
class Scores:
    hasher: str
    # retrieval, per transform and "all": arrays over KS
    tp: dict[str, np.ndarray]
    fp: dict[str, np.ndarray]
    queries: dict[str, int]
    pair_fp: np.ndarray  # negatives within k, over KS
    pair_negatives: int
    own_distance: dict[str, list[int]]  # each query's distance to its base, per transform
    by_params: dict[tuple[str, str], list[int]]  # (transform, slot) -> distances to own base
    neg_quantiles: tuple[int, ...]  # min, 0.01 %, 0.1 %, 1 %, median of negative pair distances
    neg_base_pairs: np.ndarray  # over KS: distinct unrelated base pairs with an image pair within k

    def prf(self, t: str = "all") -> list[tuple[int, float, float, float]]:
        rows = []
        for i, k in enumerate(KS):
            tp, fp, n = int(self.tp[t][i]), int(self.fp[t][i]), self.queries[t]
            p = tp / (tp + fp) if tp + fp else 1.0
            r = tp / n if n else 0.0
            f1 = 2 * p * r / (p + r) if p + r else 0.0
            rows.append((k, p, r, f1))
        return rows

    def recommended_k(self, fpr_cap: float = FPR_CAP) -> int:
        rows = [row for row in self.prf() if self.pair_fp[row[0]] <= fpr_cap * self.pair_negatives] or self.prf()[:1]
        best = max(f1 for _, _, _, f1 in rows)
        return min(k for k, _, _, f1 in rows if f1 >= best - 1e-12)


def score(es: EvalSet, fps: np.ndarray, name: str) -> Scores:
    items = es.items
    base_rows = [i for i, it in enumerate(items) if it.transform == "base"]
    base_fp = fps[base_rows]
    base_of = np.array([it.base for it in items])
    assert [items[i].base for i in base_rows] == list(range(len(es.bases)))
    rel = es.related()
    ks = np.array(KS)
    tp: dict[str, np.ndarray] = {}
    fp: dict[str, np.ndarray] = {}
    queries: dict[str, int] = {}
    own: dict[str, list[int]] = {}
    by_params: dict[tuple[str, str], list[int]] = {}
    for t in ["all", *dict.fromkeys(it.transform for it in items if it.transform != "base")]:
        rows = [i for i, it in enumerate(items) if it.transform != "base" and (t == "all" or it.transform == t)]
        d = distances(fps[rows], base_fp)  # queries x bases
        qb = base_of[rows]
        own_d = d[np.arange(len(rows)), qb]
        other = ~rel[qb]  # unrelated bases of each query
        tp[t] = (own_d[None, :] <= ks[:, None]).sum(axis=1)
        fp[t] = np.array([int(((d <= k) & other).sum()) for k in KS])
        queries[t] = len(rows)
        own[t] = own_d.tolist()
        if t != "all":
            for r, dist in zip(rows, own_d.tolist()):
                by_params.setdefault((t, items[r].slot), []).append(dist)
    # pair level: every pair of items from unrelated bases
    d_all = distances(fps, fps)
    neg = ~rel[base_of][:, base_of]
    iu = np.triu_indices(len(items), 1)
    neg_d = d_all[iu][neg[iu]]
    hist = np.bincount(neg_d, minlength=65)
    pair_fp = np.cumsum(hist)[: len(KS)]
    bi, bj = base_of[iu[0]][neg[iu]], base_of[iu[1]][neg[iu]]
    lo, hi = np.minimum(bi, bj), np.maximum(bi, bj)
    nb = len(es.bases)
    neg_base_pairs = np.array([np.unique((lo * nb + hi)[neg_d <= k]).size for k in KS])
    quant = (int(neg_d.min()), *(int(x) for x in np.quantile(neg_d, [0.0001, 0.001, 0.01, 0.5], method="lower")))
    return Scores(name, tp, fp, queries, pair_fp, int(neg_d.size), own, by_params, quant, neg_base_pairs)


def evaluate(es: EvalSet, names: Sequence[str] | None = None) -> dict[str, Scores]:
    hs = hashers()
    out = {}
    for name in names or list(hs):
        if name in hs:
            out[name] = score(es, fingerprints(es, hs[name]), name)
    return out


# -- report ------------------------------------------------------------------------------------


def markdown(es: EvalSet, results: dict[str, Scores], ks_shown: Sequence[int] = KS) -> str:
    lines: list[str] = []
    n_tiles = sum(b.tile for b in es.bases)
    fams = sorted({b.family.split("/")[0] for b in es.bases})
    lines.append(
        f"Set: {len(es.bases)} bases ({len(es.bases) - n_tiles} sources from {', '.join(fams)}, {n_tiles} quadrant tiles), "
        f"{len(es.items) - len(es.bases)} variants, {len(es.items)} images; digest {es.digest()}."
    )
    lines.append("")
    lines.append(f"### Recommended k (best pooled retrieval F1 among k with pair-level FP rate <= {FPR_CAP:g}; smallest among ties)")
    lines.append("")
    lines.append("| hasher | k | precision | recall | F1 | pair-level FP rate at k | negative pairs |")
    lines.append("|---|---:|---:|---:|---:|---:|---:|")
    for name, s in results.items():
        k = s.recommended_k()
        _, p, r, f1 = s.prf()[k]
        lines.append(f"| {name} | {k} | {p:.4f} | {r:.4f} | {f1:.4f} | {s.pair_fp[k] / s.pair_negatives:.2e} | {s.pair_negatives:,} |")
    lines.append("")
    for name, s in results.items():
        lines.append(f"### {name}: pooled retrieval (every variant against every base) per k")
        lines.append("")
        lines.append("| k | TP | FP | FN | precision | recall | F1 | pair FP | pair FP rate | distinct base pairs |")
        lines.append("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for k, p, r, f1 in s.prf():
            if k not in ks_shown:
                continue
            tp, fp = int(s.tp["all"][k]), int(s.fp["all"][k])
            lines.append(
                f"| {k} | {tp} | {fp} | {s.queries['all'] - tp} | {p:.4f} | {r:.4f} | {f1:.4f} | {int(s.pair_fp[k])} | "
                f"{s.pair_fp[k] / s.pair_negatives:.2e} | {int(s.neg_base_pairs[k])} |"
            )
        lines.append("")
    transforms = [t for t in results[next(iter(results))].queries if t != "all"]
    for metric in ("recall", "precision", "F1"):
        lines.append(f"### {metric} per transformation (rows) and k (columns)")
        lines.append("")
        col = {"precision": 1, "recall": 2, "F1": 3}[metric]
        lines.append("| transform (queries) | hasher | " + " | ".join(str(k) for k in ks_shown) + " |")
        lines.append("|---|---|" + "---:|" * len(ks_shown))
        for t in transforms:
            for name, s in results.items():
                prf = s.prf(t)
                cells = [f"{prf[k][col]:.3f}" for k in ks_shown]
                lines.append(f"| {t} ({s.queries[t]}) | {name} | " + " | ".join(cells) + " |")
        lines.append("")
    lines.append("### Distance of each variant to its own base, by parameter (median / max)")
    lines.append("")
    lines.append("| transform | variant | n | " + " | ".join(results) + " |")
    lines.append("|---|---|---:|" + "---:|" * len(results))
    first = results[next(iter(results))]
    for t, slot in first.by_params:
        cells = []
        for s in results.values():
            d = s.by_params[(t, slot)]
            cells.append(f"{int(np.median(d))} / {max(d)}")
        lines.append(f"| {t} | {slot} | {len(first.by_params[(t, slot)])} | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append("### Distance distribution of negative pairs (unrelated bases, all images)")
    lines.append("")
    lines.append("| hasher | min | 0.01 % | 0.1 % | 1 % | median |")
    lines.append("|---|---:|---:|---:|---:|---:|")
    for name, s in results.items():
        lines.append(f"| {name} | " + " | ".join(map(str, s.neg_quantiles)) + " |")
    lines.append("")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--skimage", default="auto", help="folder of scikit-image's bundled images, 'auto' (an installed skimage) or 'off'")
    ap.add_argument("--no-tiles", action="store_true")
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--no-diagnostics", action="store_true", help="leave out the no-draft columns")
    ap.add_argument("--markdown", help="write the tables here")
    ap.add_argument("--json", help="write the scores here")
    ap.add_argument("--save-dir", help="write every image of the set here (for looking at)")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    sources = mpl_sources()
    sk = skimage_dir(args.skimage)
    if sk is not None and sk.is_dir():
        sources += skimage_sources(sk)
    es = build(sources, tiles=not args.no_tiles, seed=args.seed)
    t1 = time.perf_counter()
    print(f"built {len(es.items)} images on {len(es.bases)} bases in {t1 - t0:.1f} s; digest {es.digest()}", file=sys.stderr)
    if args.save_dir:
        os.makedirs(args.save_dir, exist_ok=True)
        for i, it in enumerate(es.items):
            ext = "jpg" if it.data[:2] == b"\xff\xd8" else "png"
            safe = it.name.replace("/", "_").replace("~", "__").replace(" ", "_").replace("%", "pc")
            Path(args.save_dir, f"{i:05d}_{safe}.{ext}").write_bytes(it.data)
    hs = hashers()
    if not args.no_diagnostics:
        hs.update(diagnostic_hashers())
    results: dict[str, Scores] = {}
    for name, h in hs.items():
        fps = fingerprints(es, h)
        s = score(es, fps, name)
        results[name] = s
        print(f"{name}: recommended k {s.recommended_k()}", file=sys.stderr)
    print(f"scored in {time.perf_counter() - t1:.1f} s", file=sys.stderr)
    md = markdown(es, results)
    if args.markdown:
        Path(args.markdown).write_text(md)
    else:
        print(md)
    if args.json:
        out = {
            name: {
                "recommended_k": s.recommended_k(),
                "prf": {t: s.prf(t) for t in s.queries},
                "pair_fp": s.pair_fp.tolist(),
                "pair_negatives": s.pair_negatives,
            }
            for name, s in results.items()
        }
        out["_set"] = {"bases": [b.name for b in es.bases], "items": len(es.items), "digest": es.digest()}  # type: ignore[assignment]
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
