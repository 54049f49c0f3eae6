"""Image fingerprinting speed: ``ImagePipeline`` against ``imagehash`` on the same files, and the decode floor.

    cd /work/main && PYTHONPATH=/work/main python tools/bench_images.py --skimage /path/to/skimage/data --markdown /tmp/bench_images.md

``--rounds N`` (default 7), ``--profile`` (cProfile of the pipeline on the JPEGs, top entries),
``--keep DIR`` (keep the generated files). Everything runs in one process, contenders alternated
within each round (the order rotated every round), so every ratio compares figures taken seconds
apart on the same, possibly busy, machine. Figures are medians over rounds of the per-image time
(round time / files).

Files (made deterministically, ``random.Random(22)``, in a temporary folder):

* ``jpeg-web``: "typical web JPEGs": each photo among the sources (matplotlib's ``grace_hopper.jpg``;
  with ``--skimage``, scikit-image's bundled photos ``astronaut``, ``chelsea``, ``coffee``,
  ``hubble_deep_field``, ``ihc``, ``motorcycle_left``, ``retina``, ``rocket``) is cropped to the
  aspect of, and resized (Lanczos) to, each of 800x600, 1024x768 and 768x1024, and saved by
  Pillow at a quality drawn from 75-85 (4:2:0), once baseline and once progressive. Upscaled
  photos are smoother than camera photos and compress smaller, so seeded Gaussian grain (sigma
  drawn from 2-5 grey levels per channel) is added first, which brings sizes to the 50-160 kB
  of web photos; the table reports the sizes.
* ``png``: the same photos at 800x600 as PNG (zlib level 6), and the eval set's non-photo bases.

Contenders on each file, from its path:

* ``fpstore phash64`` / ``dhash64``: ``ImagePipeline(kind).fingerprint(path)``.
* ``imagehash.phash`` / ``dhash``: ``imagehash.phash(Image.open(path))`` (full decode).
* ``draft+load (whole file)``: ``im = Image.open(path); im.draft("L", (32, 32)); im.load()``
  (JPEG only; libjpeg-turbo decodes the whole file at 1/8 scale, grey). The pipeline decodes the
  same pixels itself, from the luma's DC coefficients (``fpstore.fingerprint.jpeg.eighth_scale_grey``):
  a baseline file's AC codes are only skipped, a progressive file's AC scans not read.
* ``full decode``: ``Image.open(path).load()``.
* ``simplejpeg 1/8 grey`` (when importable): ``simplejpeg.decode_jpeg(data, colorspace="GRAY",
  min_height=32, min_width=32)`` on bytes read from the file in the same timing: libjpeg-turbo
  with its own scaling, bypassing Pillow, i.e. a lower bound for any Pillow-free decoder path.
* ``read + content hash``: the file's bytes and the pipeline's content hash of them.

Then a breakdown of the pipeline's separable parts on the JPEGs (each timed alone over every
file: read, content hash, ``Image.open``, the EXIF orientation look-up, ``eighth_scale_grey``, the
resampling to 32x32, ``phash_bits``, and libjpeg's draft+load for comparison; see ``breakdown``),
``signatures(paths, threads=1)`` against ``threads=2``, and libjpeg-turbo's
own ``tjbench -scale 1/8`` (when installed: Debian's libjpeg-turbo-progs) on the JPEGs, which
times the decode alone in C, without Python.

Benchmarks are scripts, not tests: nothing here is named for pytest to collect.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from fpstore.fingerprint.jpeg import dc_scans, eighth_scale_grey  # noqa: E402
from tools import image_eval  # noqa: E402

PHOTOS = (
    "mpl/grace_hopper",
    "skimage/astronaut",
    "skimage/chelsea",
    "skimage/coffee",
    "skimage/hubble_deep_field",
    "skimage/ihc",
    "skimage/motorcycle_left",
    "skimage/retina",
    "skimage/rocket",
)
SIZES = ((800, 600), (1024, 768), (768, 1024))


def _fit(im: Any, size: tuple[int, int]) -> Any:
    from PIL import Image

    w, h = im.size
    tw, th = size
    if w * th > h * tw:  # too wide: crop the sides
        nw = round(h * tw / th)
        im = im.crop(((w - nw) // 2, 0, (w - nw) // 2 + nw, h))
    else:
        nh = round(w * th / tw)
        im = im.crop((0, (h - nh) // 2, w, (h - nh) // 2 + nh))
    return im.resize(size, Image.Resampling.LANCZOS)


def _grain(im: Any, rng: random.Random) -> Any:
    from PIL import Image

    a = np.asarray(im.convert("RGB"), dtype=np.float32)
    g = np.random.default_rng(rng.getrandbits(32)).normal(0.0, rng.uniform(2.0, 5.0), a.shape).astype(np.float32)
    return Image.fromarray(np.clip(a + g, 0, 255).astype(np.uint8), "RGB")


def make_files(folder: Path, skimage: str | None) -> dict[str, list[Path]]:
    """Write the benchmark files (see the module docstring); {"jpeg-web": [...], "png": [...]}."""
    sources = image_eval.mpl_sources()
    sk = image_eval.skimage_dir(skimage)
    if sk is not None and sk.is_dir():
        sources += image_eval.skimage_sources(sk)
    by_name = dict(sources)
    rng = random.Random(22)
    out: dict[str, list[Path]] = {"jpeg-web": [], "png": []}
    for name in PHOTOS:
        if name not in by_name:
            continue
        photo = by_name[name].convert("RGB")
        stem = name.replace("/", "_")
        for size in SIZES:
            im = _grain(_fit(photo, size), rng)
            for progressive in (False, True):
                q = rng.randint(75, 85)
                p = folder / f"{stem}_{size[0]}x{size[1]}_q{q}_{'prog' if progressive else 'base'}.jpg"
                im.save(p, "JPEG", quality=q, progressive=progressive, optimize=progressive)
                out["jpeg-web"].append(p)
        p = folder / f"{stem}_800x600.png"
        _fit(photo, (800, 600)).save(p, "PNG")
        out["png"].append(p)
    for name, im in sources:
        if name in PHOTOS:
            continue
        p = folder / f"{name.replace('/', '_')}.png"
        im.save(p, "PNG")
        out["png"].append(p)
    return out


def contenders(kind_set: str) -> dict[str, Callable[[Path], object]]:
    from PIL import Image

    from fpstore.fingerprint.image import ImagePipeline

    ph, dh = ImagePipeline(kind="phash64"), ImagePipeline(kind="dhash64")
    c: dict[str, Callable[[Path], object]] = {"fpstore phash64": ph.fingerprint, "fpstore dhash64": dh.fingerprint}
    try:
        import imagehash

        c["imagehash.phash"] = lambda p: imagehash.phash(Image.open(p))
        c["imagehash.dhash"] = lambda p: imagehash.dhash(Image.open(p))
    except ImportError:
        pass

    def full(p: Path) -> object:
        with Image.open(p) as im:
            im.load()
            return im.size

    c["full decode"] = full
    from fpstore.fingerprint import image as mod

    c["read + content hash"] = lambda p: mod._content_hash(p.read_bytes())
    if kind_set == "jpeg":

        def draft(p: Path) -> object:
            with Image.open(p) as im:
                im.draft("L", (32, 32))
                im.load()
                return im.size

        c["draft+load (whole file)"] = draft
        try:
            import simplejpeg

            c["simplejpeg 1/8 grey"] = lambda p: (
                simplejpeg.decode_jpeg(p.read_bytes(), colorspace="GRAY", min_height=32, min_width=32).shape
            )
        except ImportError:
            pass
    return c


def time_rounds(files: Sequence[Path], funcs: dict[str, Callable[[Path], object]], rounds: int) -> dict[str, list[float]]:
    """Per-image seconds of each contender in each round; contenders alternated, order rotated."""
    names = list(funcs)
    for f in funcs.values():  # warm: imports, caches, page cache
        for p in files[:3]:
            f(p)
    out: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for n in order:
            f = funcs[n]
            t0 = time.perf_counter()
            for p in files:
                f(p)
            out[n].append((time.perf_counter() - t0) / len(files))
    return out


def breakdown(files: Sequence[Path], rounds: int) -> list[tuple[str, float, bool]]:
    """Median per-image seconds of the separable parts of ``ImagePipeline("phash64")`` on
    ``files``, each timed alone (its inputs prepared outside the timing), and whether the step is
    part of ``fingerprint(bytes)``. Only public steps and Pillow calls are timed, so the table stays
    right while the pipeline's internals change; the row "rest" is the whole minus the parts
    (Python overhead, mostly), and the cProfile table (``--profile``) splits it by function."""
    from PIL import Image

    from fpstore.fingerprint import image as mod

    pipe = mod.ImagePipeline(kind="phash64")
    datas = [p.read_bytes() for p in files]
    opened = lambda: [Image.open(io.BytesIO(d)) for d in datas]
    grey = lambda: [np.asarray(eighth_scale_grey(d), dtype=np.float64) for d in datas]

    steps: list[tuple[str, Callable[[], Any], Callable[[Any], Any], bool]] = [
        ("read file", lambda: None, lambda _: [p.read_bytes() for p in files], False),
        ("content hash of the bytes (signatures only)", lambda: None, lambda _: [mod._content_hash(d) for d in datas], False),
        ("Image.open (header parse)", lambda: None, lambda _: [Image.open(io.BytesIO(d)).size for d in datas], True),
        ("getexif (orientation check)", opened, lambda ims: [im.getexif().get(0x0112, 1) for im in ims], True),
        ("eighth_scale_grey (the luma's DC coefficients: fpstore's decoder)", lambda: None, lambda _: [eighth_scale_grey(d) for d in datas], True),
        ("fpstore resample to 32x32 (float64 Lanczos)", grey, lambda arrs: [mod.resample(a, (32, 32), 8) for a in arrs], True),
        ("phash_bits of a 32x32 thumbnail", lambda: [pipe.thumbnail(d) for d in datas], lambda ths: [mod.phash_bits(t) for t in ths], True),
        (
            "libjpeg instead: draft + load at 1/8, grey (progressive files: their DC scans only)",
            lambda: [Image.open(io.BytesIO(dc_scans(d, grey=True) or d)) for d in datas],
            lambda ims: [(im.draft("L", (32, 32)), im.load()) for im in ims],
            False,
        ),
        ("whole: pipe.fingerprint(bytes)", lambda: None, lambda _: [pipe.fingerprint(d) for d in datas], False),
        ("whole: pipe.fingerprint(path)", lambda: None, lambda _: [pipe.fingerprint(p) for p in files], False),
    ]
    res = []
    for name, prep, run, part in steps:
        ts = []
        for _ in range(rounds):
            x = prep()
            t0 = time.perf_counter()
            run(x)
            ts.append((time.perf_counter() - t0) / len(files))
        res.append((name, statistics.median(ts), part))
    return res


def threads_rate(files: Sequence[Path], rounds: int) -> list[tuple[str, int, float, float]]:
    """(kind, threads, median images/s, best images/s) of ``signatures(paths, threads=)``."""
    from fpstore.fingerprint.image import ImagePipeline

    out = []
    many = list(files) * max(1, 256 // len(files))
    for kind in ("phash64", "dhash64"):
        pipe = ImagePipeline(kind=kind)
        pipe.signatures(many[:8], threads=2)
        ts: dict[int, list[float]] = {1: [], 2: []}
        for r in range(rounds):
            for t in (1, 2) if r % 2 == 0 else (2, 1):
                t0 = time.perf_counter()
                pipe.signatures(many, threads=t)
                ts[t].append(time.perf_counter() - t0)
        for t in (1, 2):
            out.append((kind, t, len(many) / statistics.median(ts[t]), len(many) / min(ts[t])))
    return out


def tjbench(files: Sequence[Path]) -> list[tuple[str, float]]:
    """(file, decode ms at 1/8 scale) from libjpeg-turbo's tjbench, when installed."""
    exe = shutil.which("tjbench")
    if exe is None:
        return []
    out = []
    for p in files:
        try:
            r = subprocess.run(
                [exe, str(p), "-scale", "1/8", "-benchtime", "1", "-warmup", "0", "-quiet", "-nowrite"],
                capture_output=True,
                text=True,
                timeout=60,
            )
        except (OSError, subprocess.TimeoutExpired):
            continue
        # quiet output: a line "<fmt> <subsamp> <qual> <w> <h> <comp perf> <comp ratio> <decomp perf>" (Mpixels/s)
        for line in r.stdout.splitlines():
            parts = line.split()
            if len(parts) >= 5 and parts[0] in ("RGB", "BGR", "RGBX", "BGRX", "XBGR", "XRGB", "GRAY", "CMYK"):
                try:
                    mpix = float(parts[-1])
                except ValueError:
                    continue
                from PIL import Image

                with Image.open(p) as im:
                    w, h = im.size
                out.append((p.name, w * h / (mpix * 1e6) * 1e3))
                break
    return out


def profile(files: Sequence[Path], top: int = 18) -> str:
    from fpstore.fingerprint.image import ImagePipeline

    pipe = ImagePipeline(kind="phash64")
    many = list(files) * max(1, 400 // len(files))
    pr = cProfile.Profile()
    pr.enable()
    for p in many:
        pipe.fingerprint(p)
    pr.disable()
    buf = io.StringIO()
    st = pstats.Stats(pr, stream=buf)
    st.sort_stats("tottime").print_stats(top)
    return f"cProfile of ImagePipeline('phash64').fingerprint(path) over {len(many)} JPEG calls\n" + buf.getvalue()


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--skimage", default="auto", help="folder of scikit-image's bundled images, 'auto' or 'off'")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--keep", help="write the files here and keep them")
    ap.add_argument("--markdown", help="write the tables here (else stdout)")
    args = ap.parse_args(argv)
    import PIL
    from PIL import features

    folder = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench_images_"))
    folder.mkdir(parents=True, exist_ok=True)
    lines: list[str] = []
    try:
        files = make_files(folder, args.skimage)
        jpeg_sizes = sorted(p.stat().st_size for p in files["jpeg-web"])
        png_sizes = sorted(p.stat().st_size for p in files["png"])
        lines.append(
            f"Pillow {PIL.__version__}, libjpeg-turbo {features.version('libjpeg_turbo')}, numpy {np.__version__}, "
            f"python {sys.version.split()[0]}, {os.cpu_count()} cpus, load {os.getloadavg()[0]:.2f}; rounds {args.rounds}."
        )
        lines.append("")
        lines.append(
            f"Files: {len(files['jpeg-web'])} JPEGs (800x600, 1024x768, 768x1024; q75-85; half progressive), sizes kB "
            f"min {jpeg_sizes[0] / 1e3:.0f} / median {statistics.median(jpeg_sizes) / 1e3:.0f} / max {jpeg_sizes[-1] / 1e3:.0f}; "
            f"{len(files['png'])} PNGs, kB min {png_sizes[0] / 1e3:.0f} / median {statistics.median(png_sizes) / 1e3:.0f} / "
            f"max {png_sizes[-1] / 1e3:.0f}."
        )
        lines.append("")
        for kind_set, key in (("jpeg", "jpeg-web"), ("png", "png")):
            for subset, sel in (
                ("all", files[key]),
                ("baseline", [p for p in files[key] if p.stem.endswith("_base")]),
                ("progressive", [p for p in files[key] if p.stem.endswith("_prog")]),
            ):
                if not sel or (kind_set == "png" and subset != "all"):
                    continue
                res = time_rounds(sel, contenders(kind_set), args.rounds)
                ref = statistics.median(res["fpstore phash64"])
                ih = statistics.median(res["imagehash.phash"]) if "imagehash.phash" in res else None
                lines.append(f"### {key} ({subset}, {len(sel)} files): per-image time, median of {args.rounds} rounds")
                lines.append("")
                lines.append(
                    "| contender | ms / image (median) | best round | images/s (median) | x fpstore phash64 time | imagehash.phash / this |"
                )
                lines.append("|---|---:|---:|---:|---:|---:|")
                for n, ts in res.items():
                    m = statistics.median(ts)
                    lines.append(
                        f"| {n} | {m * 1e3:.3f} | {min(ts) * 1e3:.3f} | {1 / m:,.0f} | {m / ref:.2f} | {'' if ih is None else f'{ih / m:.2f}'} |"
                    )
                lines.append("")
        lines.append(f"### Breakdown of ImagePipeline('phash64') on the {len(files['jpeg-web'])} JPEGs (each step alone)")
        lines.append("")
        lines.append("| step | ms / image (median) |")
        lines.append("|---|---:|")
        bd = breakdown(files["jpeg-web"], args.rounds)
        star = " \\*"
        for name, t, part in bd:
            lines.append(f"| {name}{star if part else ''} | {t * 1e3:.3f} |")
        parts = sum(t for _, t, part in bd if part)
        whole = {n: t for n, t, _ in bd}["whole: pipe.fingerprint(bytes)"]
        lines.append(f"| sum of the parts marked \\* (the steps of fingerprint(bytes)) | {parts * 1e3:.3f} |")
        lines.append(f"| rest: whole(bytes) - parts | {(whole - parts) * 1e3:.3f} |")
        lines.append("")
        lines.append("### signatures(paths, threads=) on the JPEGs (images/s)")
        lines.append("")
        lines.append("| kind | threads | median | best |")
        lines.append("|---|---:|---:|---:|")
        for kind, t, med, best in threads_rate(files["jpeg-web"], args.rounds):
            lines.append(f"| {kind} | {t} | {med:,.0f} | {best:,.0f} |")
        lines.append("")
        tj = tjbench(files["jpeg-web"])
        if tj:
            lines.append("### libjpeg-turbo tjbench -scale 1/8 (decode only, C, no Python), per file")
            lines.append("")
            lines.append("| file | kB | ms / decode |")
            lines.append("|---|---:|---:|")
            for name, ms in tj:
                lines.append(f"| {name} | {(folder / name).stat().st_size / 1e3:.0f} | {ms:.3f} |")
            lines.append(f"| median | | {statistics.median(ms for _, ms in tj):.3f} |")
            lines.append("")
        if args.profile:
            lines.append("```")
            lines.append(profile(files["jpeg-web"]))
            lines.append("```")
    finally:
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)
    text = "\n".join(lines)
    if args.markdown:
        Path(args.markdown).write_text(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
