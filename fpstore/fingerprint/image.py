"""Image to fingerprint: perceptual hashes of 64 bits, compared by Hamming distance like text.

Two kinds, each the published algorithm over a small grey thumbnail:

* ``"phash64"`` (the default): the thumbnail is 32×32; its 2-D DCT-II is taken, the 8×8 block of
  lowest frequencies (DC included) is compared with its own median, and each coefficient above the
  median sets a bit (Zauner 2010; the variant of the ``imagehash`` library, whose bits it gives for
  the same 32×32 input).
* ``"dhash64"``: the thumbnail is 9×8 (width × height); each pixel brighter than its left
  neighbour sets a bit (Krawetz's difference hash, also as ``imagehash`` computes it).

Bit ``i`` of the row-major 8×8 result is bit ``63 - i`` of the fingerprint, so that
``int(str(imagehash.phash(img)), 16)`` and this pipeline agree on the same thumbnail.

How the thumbnail is made is part of the pipeline's config and id, because it decides the bits:
Pillow decodes (its major version is recorded: a new major is a new pipeline); transparency is
composited over white and colour becomes ITU-R 601-2 luma; the image is reduced to the means of
boxes of 8, 4 or 2 pixels a side (the largest that leaves the thumbnail's size: JPEG's ``draft``
rule), which a JPEG decoder gives directly from each block's DC coefficient at a fraction of a
full decode's cost, and every other format through Pillow's ``reduce``, so that a JPEG and its
lossless original start from the same boxes; Lanczos-3 in float64, in the pixels' geometry, makes
the thumbnail; EXIF orientation turns the thumbnail. The versions of the decoder
libraries are recorded in the config too, for the record, but left out of the id: golden
fingerprints in the tests catch an upgrade that changes bits.

An image with a side shorter than ``min_side`` pixels (spacer GIFs, tracking pixels, icons) or a
flat thumbnail (every pixel within one grey level: a blank image) is ``short``: its hash says
nothing about its content, so a store matches it only by its content hash (the bytes of the
encoded file), as it matches short texts.
"""

from __future__ import annotations

import functools
import hashlib
import io
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Union

import numpy as np

from fpstore._backend import BACKEND as _BACKEND
from fpstore.errors import FormatError, InputError, PipelineMismatchError
from fpstore.fingerprint.jpeg import dc_scans, eighth_scale_grey
from fpstore.fingerprint.pipeline import Fingerprints, Signature, config_id, config_mismatch
from fpstore.parallel import available_cores, executor

if TYPE_CHECKING:
    from PIL import Image as _PILImage

__all__ = [
    "DEFAULT_IMAGE_K",
    "IMAGE_KINDS",
    "ImageInput",
    "ImagePipeline",
    "dct_matrix",
    "dhash_bits",
    "lanczos_matrix",
    "phash_bits",
    "resample",
]

#: Image kinds: name -> (scheme version, thumbnail (width, height)).
IMAGE_KINDS: dict[str, tuple[int, tuple[int, int]]] = {
    "phash64": (1, (32, 32)),
    "dhash64": (1, (9, 8)),
}
#: The radius a new image store gets when none is given, per kind: the calibrated k of
#: docs/tuning.md ("Images": the best F1 while at most 1 in 10,000 unrelated pairs is within k).
DEFAULT_IMAGE_K = {"phash64": 10, "dhash64": 3}
#: Pillow major versions this build accepts (pinned in the ``image`` extra).
PILLOW_MAJORS = (13,)
#: What a thumbnail's making records in the config (all of it decides the bits).
_THUMBNAIL = {"orientation": "exif", "alpha": "over-white", "colour": "L-601", "resample": "box-draft,lanczos3-f64", "draft": "jpeg"}
#: The libraries whose versions the config records (PIL.features names).
_LIBRARIES = ("libjpeg_turbo", "jpg", "zlib", "libtiff", "webp", "jpg_2000")

#: What :meth:`ImagePipeline.signature` takes: encoded bytes, a path, or a PIL image.
ImageInput = Union[bytes, bytearray, memoryview, str, "os.PathLike[str]", "_PILImage.Image"]

_ORIENTATION = 0x0112  # the EXIF tag
#: The formats Pillow may open (``Image.open(formats=...)``): the image formats of the web. Others
#: (EPS, which starts Ghostscript; PSD, FITS, the many legacy formats) are refused unread.
FORMATS = ("JPEG", "PNG", "GIF", "WEBP", "TIFF", "BMP", "ICO", "AVIF")
_MODES_16 = ("I;16", "I;16B", "I;16L", "I;16N", "I")


def _pil() -> Any:
    """Pillow's ``Image`` module, of a major version this build's fingerprints are defined with."""
    try:
        import PIL
        from PIL import Image
    except ImportError:
        raise InputError("image pipelines need Pillow: pip install 'fpstore[image]'") from None
    major = int(PIL.__version__.split(".")[0])
    if major not in PILLOW_MAJORS:
        raise PipelineMismatchError(
            f"image fingerprints of this build are defined with Pillow {PILLOW_MAJORS}; Pillow {PIL.__version__} is "
            "installed, whose decoding and resampling may differ: install the version the 'image' extra pins"
        )
    return Image


@functools.lru_cache(maxsize=4)
def dct_matrix(n: int, rows: int) -> np.ndarray:
    """The first ``rows`` rows of the unnormalised n-point DCT-II matrix,
    ``2 cos(pi k (2 j + 1) / (2 n))`` (scipy's ``dct(type=2)`` scale)."""
    k = np.arange(rows, dtype=np.float64)[:, None]
    j = np.arange(n, dtype=np.float64)[None, :]
    m = 2.0 * np.cos(np.pi * k * (2.0 * j + 1.0) / (2.0 * n))
    m.setflags(write=False)
    return m


def _bits_to_int(bits: np.ndarray) -> int:
    # Row-major bit i is bit 63 - i: the order of imagehash's hex string.
    return int.from_bytes(np.packbits(bits.reshape(64)).tobytes(), "big")


def _lanczos_rows(out: int, n: int, box: int, length: int) -> list[tuple[int, np.ndarray]]:
    """Each output sample's first input sample and weights (see :func:`lanczos_matrix`)."""
    scale = length / out
    stretch = max(scale, float(box))
    centres = box * (np.arange(n, dtype=np.float64) + 0.5)
    centres[-1] = (box * (n - 1) + length) / 2.0
    rows = []
    for i in range(out):
        centre = (i + 0.5) * scale
        # Only samples within the kernel's support (3 stretches) weigh: find them by their centres.
        lo = int(np.searchsorted(centres, centre - 3.0 * stretch, side="right"))
        hi = int(np.searchsorted(centres, centre + 3.0 * stretch, side="left"))
        x = (centres[lo:hi] - centre) / stretch
        w = np.sinc(x) * np.sinc(x / 3.0)
        rows.append((lo, w / w.sum()))
    return rows


#: Above this many input samples on an axis, the weights are applied row by row instead of as a
#: dense matrix, which would take out × n × 8 bytes (a 200,000-pixel-long image: 51 MB).
_DENSE_MAX = 2048


@functools.lru_cache(maxsize=64)  # at most 64 × 32 × 2048 × 8 bytes = 32 MiB
def lanczos_matrix(out: int, n: int, box: int = 1, length: int | None = None) -> np.ndarray:
    """Weights (``out`` × ``n``) of Lanczos-3 resampling to ``out`` samples from ``n`` samples,
    each the mean of a box of ``box`` pixels along an axis of ``length`` pixels (default
    ``n * box``; the last box is partial when ``length`` is shorter).

    Pillow's kernel, ``sinc(x) sinc(x / 3)``, stretched by the scale when shrinking and centred on
    each output sample's centre, each row normalised to sum 1, but in the geometry of the pixels:
    output sample ``i`` is centred at ``(i + 0.5) length / out`` and input sample ``j`` at its box's
    centre, the partial last box's included. (Placing the ``n`` samples evenly over the image
    instead stretches a box-reduced image by up to a box, and costs resized copies their match.)
    """
    m = np.zeros((out, n), dtype=np.float64)
    for i, (lo, w) in enumerate(_lanczos_rows(out, n, box, n * box if length is None else length)):
        m[i, lo : lo + len(w)] = w
    m.setflags(write=False)
    return m


def _resample_axis0(grey: np.ndarray, out: int, box: int, length: int) -> np.ndarray:
    """``grey`` resampled along its first axis to ``out`` rows."""
    n = grey.shape[0]
    if n <= _DENSE_MAX:
        return lanczos_matrix(out, n, box, length) @ grey
    return np.stack([w @ grey[lo : lo + len(w)] for lo, w in _lanczos_rows(out, n, box, length)])


def resample(grey: np.ndarray, size: tuple[int, int], box: int = 1, extent: tuple[int, int] | None = None) -> np.ndarray:
    """``grey`` (rows × columns) resampled to ``size`` (width, height) with Lanczos-3 in float64,
    both axes at once (no rounding between them): two small matrix products, ~25 us from the
    100×75 of a JPEG decoded at 1/8, where Pillow's resize takes ~120 us. ``box`` and ``extent``
    (the image's width and height in pixels) say that each sample is the mean of ``box`` × ``box``
    pixels (see :func:`lanczos_matrix`)."""
    width, height = size
    rows, cols = grey.shape
    ext_w, ext_h = (cols * box, rows * box) if extent is None else extent
    tall = _resample_axis0(grey, height, box, ext_h)
    return _resample_axis0(tall.T, width, box, ext_w).T


def box_factor(width: int, height: int, size: tuple[int, int]) -> int:
    """The box reduction a thumbnail of ``size`` starts from: JPEG ``draft``'s choice, the largest
    of 8, 4, 2 and 1 that leaves at least the thumbnail's size (Pillow's rule)."""
    scale = min(width // size[0], height // size[1])
    return next((f for f in (8, 4, 2) if scale >= f), 1)


#: EXIF orientation -> what shows the stored pixels upright (ImageOps.exif_transpose's table), as
#: numpy does it to the thumbnail: the resampling is symmetric, so turning the thumbnail equals
#: turning the image first.
_UPRIGHT: dict[int, Callable[[np.ndarray], np.ndarray]] = {
    2: np.fliplr,
    3: lambda a: np.rot90(a, 2),
    4: np.flipud,
    5: np.transpose,
    6: lambda a: np.rot90(a, -1),
    7: lambda a: np.rot90(a, 2).T,
    8: lambda a: np.rot90(a, 1),
}


def phash_bits(grey32: np.ndarray) -> int:
    """pHash of a 32×32 grey thumbnail (any real dtype): the 8×8 lowest DCT-II frequencies against
    their median (of 64 values: the mean of the 32nd and 33rd, as numpy's median)."""
    d = dct_matrix(32, 8)
    low = (d @ np.asarray(grey32, dtype=np.float64) @ d.T).reshape(64)
    mid = np.partition(low, (31, 32))
    return _bits_to_int(low > (mid[31] + mid[32]) * 0.5)


def dhash_bits(grey9x8: np.ndarray) -> int:
    """dHash of an 8-row, 9-column grey thumbnail: each pixel brighter than its left neighbour."""
    px = np.asarray(grey9x8, dtype=np.int16)
    return _bits_to_int(px[:, 1:] > px[:, :-1])


@dataclass(frozen=True)
class ImagePipeline:
    """Parameters that turn an image into a 64-bit perceptual fingerprint (see the module docstring).

    kind: ``"phash64"`` (default) or ``"dhash64"``.
    min_side: images narrower or lower than this many pixels are ``short`` (matched only exactly).

    Limits that refuse an input but never change a fingerprint (not part of the config):
    max_pixels: an image whose header declares more pixels is refused before decoding (a
        decompression bomb; a JPEG is decoded at up to 1/8 scale, other formats in full).
    max_bytes: an encoded image longer than this is refused before decoding.
    """

    kind: str = "phash64"
    min_side: int = 16
    max_pixels: int = 64_000_000
    max_bytes: int = 64 << 20

    # A store asks every pipeline for these; an image pipeline has no sketch.
    sketch_bits = 0
    idf = None

    def __post_init__(self) -> None:
        if not isinstance(self.kind, str) or self.kind not in IMAGE_KINDS:
            raise InputError(f"image kind must be one of {sorted(IMAGE_KINDS)}, got {self.kind!r}")
        for name in ("min_side", "max_pixels", "max_bytes"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < (0 if name == "min_side" else 1):
                raise InputError(f"{name} must be a positive int, got {value!r}")

    # -- identity -----------------------------------------------------------------------------

    @property
    def config(self) -> dict[str, Any]:
        """Every parameter that changes a fingerprint or a verdict, plus ``libraries`` (the decoder
        libraries' versions where the config was made; recorded, not part of the id)."""
        config: dict[str, Any] = {
            "kind": self.kind,
            "scheme": IMAGE_KINDS[self.kind][0],
            "decoder": f"pillow-{PILLOW_MAJORS[-1]}",
            **_THUMBNAIL,
            "min_side": self.min_side,
        }
        config["libraries"] = _library_versions()
        return config

    @functools.cached_property
    def id(self) -> str:
        """16 hex digits: a digest of the canonical msgpack form of :attr:`config` less ``libraries``."""
        return config_id(_identity(self.config))

    def mismatch(self, other: Any) -> str:
        """How ``other``'s config differs from this one's (``libraries`` aside), as
        :meth:`Pipeline.mismatch <fpstore.Pipeline.mismatch>` says it."""
        return config_mismatch(_identity(self.config), _identity(other.config))

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> ImagePipeline:
        """Rebuild an image pipeline from :attr:`config` (read from a store header: untrusted).
        Needs no Pillow: a store of image fingerprints opens, and answers fingerprint queries,
        without it."""
        known = {"kind", "scheme", "decoder", "min_side", "libraries", *_THUMBNAIL}
        unknown = set(config) - known
        if unknown:
            raise FormatError(f"image pipeline config has fields this version does not know: {sorted(unknown)}")
        kind = config.get("kind")
        if not isinstance(kind, str) or kind not in IMAGE_KINDS:
            raise FormatError(f"image pipeline kind {kind!r} is not supported (this build: {sorted(IMAGE_KINDS)})")
        if config.get("scheme") != IMAGE_KINDS[kind][0]:
            raise FormatError(f"image pipeline scheme {config.get('scheme')!r} is not supported (this build: {IMAGE_KINDS[kind][0]})")
        decoders = [f"pillow-{m}" for m in PILLOW_MAJORS]
        if config.get("decoder") not in decoders:
            raise FormatError(
                f"image fingerprints made with decoder {config.get('decoder')!r} are not comparable with this build's ({decoders})"
            )
        for name, expected in _THUMBNAIL.items():
            if config.get(name) != expected:
                raise FormatError(f"image pipeline {name} {config.get(name)!r} is not supported (this build: {expected!r})")
        if not isinstance(config.get("libraries", {}), dict):
            raise FormatError("image pipeline config: libraries must be a map")
        try:
            return cls(kind=kind, min_side=config["min_side"])
        except (KeyError, InputError) as exc:
            raise FormatError(f"image pipeline config is invalid: {exc}") from exc

    # -- fingerprints -------------------------------------------------------------------------

    def thumbnail(self, image: ImageInput, *, index: int | None = None) -> np.ndarray:
        """The grey thumbnail the hash reads (float64 in 0..255, 32×32 for pHash, 8 rows × 9 for
        dHash)."""
        return self._decode(image, index, False)[0]

    def signature(self, image: ImageInput) -> Signature:
        """Fingerprint, short flag and content hash of one image (``tokens`` is the image's pixel
        count as decoded). Undecodable or hostile input raises :class:`~fpstore.errors.InputError`."""
        return self._signature(image, None)

    def fingerprint(self, image: ImageInput) -> int:
        """The 64-bit fingerprint of one image (see :meth:`signature`; no content hash is made)."""
        return self._signature(image, None, False).fingerprint

    def signatures(self, images: Sequence[ImageInput], threads: int | None = None) -> Fingerprints:
        """Signatures of many images, columnar, on ``threads`` threads (None: all cores; Pillow
        decodes without the GIL). The first image that does not decode raises
        :class:`~fpstore.errors.InputError` naming its index; nothing is returned then."""
        if isinstance(images, (str, bytes, bytearray, memoryview)) or not isinstance(images, Sequence):
            raise InputError("images must be a sequence of images (bytes, paths or PIL images)")
        images = list(images)
        n = len(images)
        threads = available_cores() if threads is None else int(threads)
        if threads < 1:
            raise InputError(f"threads must be >= 1, got {threads}")
        indices = range(n)
        sigs = (
            [self._signature(images[i], i) for i in indices]
            if threads == 1 or n < 4
            else list(executor(threads).map(lambda i: self._signature(images[i], i), indices))
        )
        return Fingerprints.of(sigs, self.id)

    def fingerprint_many(self, images: Sequence[ImageInput], threads: int | None = None) -> np.ndarray:
        """uint64 array of the fingerprints of ``images`` (see :meth:`signatures`)."""
        return self.signatures(images, threads).values

    def _signature(self, image: ImageInput, index: int | None, content_hash: bool = True) -> Signature:
        grey, pixels, short, digest = self._decode(image, index, content_hash)
        fp = phash_bits(grey) if self.kind == "phash64" else dhash_bits(grey)
        flat = float(grey.max()) - float(grey.min()) <= 1.0
        return Signature(fp, pixels, short or flat, digest)

    def _decode(self, image: ImageInput, index: int | None, content_hash: bool) -> tuple[np.ndarray, int, bool, bytes]:
        """(thumbnail, pixels, too small, content hash: empty unless ``content_hash``) of one input."""
        Image = _pil()
        where = "" if index is None else f" at index {index}"
        data: bytes | None = None
        if isinstance(image, Image.Image):
            digest = _content_hash(f"{image.mode} {image.size}".encode() + image.tobytes()) if content_hash else b""
        else:
            data = self._read(image, where)
            digest = _content_hash(data) if content_hash else b""
        try:
            img: Any = image if data is None else Image.open(io.BytesIO(data), formats=FORMATS)
            width, height = img.size
            if width * height > self.max_pixels:
                raise InputError(f"image{where} declares {width}×{height} pixels, above max_pixels={self.max_pixels:,}")
            orientation = _orientation(img.getexif().get(_ORIENTATION))
            size = IMAGE_KINDS[self.kind][1]
            stored = size[::-1] if orientation in (5, 6, 7, 8) else size  # the thumbnail before it is turned
            box = box_factor(width, height, stored)
            boxes = (-(-width // box), -(-height // box))
            px = None
            if img.format in ("JPEG", "MPO") and data is not None and box > 1:
                if box == 8 and img.mode in ("L", "RGB") and _BACKEND == "cython":
                    px = eighth_scale_grey(data)  # libjpeg's pixels at 1/8, from the DC coefficients alone
                    if px is not None and px.shape != boxes[::-1]:
                        px = None
                if px is None:
                    img = _draft_jpeg(Image, img, data, box)
            if px is None:
                img.load()
                grey = _to_grey(img, Image)
                if grey.size == (width, height) and box > 1:
                    grey = grey.reduce(box)  # the same boxes as the JPEG's, from full pixels
                elif grey.size != boxes:
                    raise InputError(f"image{where}: the decoder gave {grey.size[0]}×{grey.size[1]} pixels, expected {boxes[0]}×{boxes[1]}")
                px = grey
            out = resample(np.asarray(px, dtype=np.float64), stored, box, (width, height))
            if orientation in _UPRIGHT:
                out = _UPRIGHT[orientation](out)
            if out.shape != size[::-1]:
                raise InputError(f"image{where}: a thumbnail of {out.shape[1]}×{out.shape[0]}, expected {size[0]}×{size[1]}")
        except (InputError, MemoryError):
            raise
        except Exception as exc:  # Pillow's plugins raise many types on hostile input
            raise InputError(f"image{where} does not decode: {type(exc).__name__}: {exc}") from exc
        return out, width * height, min(width, height) < self.min_side, digest

    def _read(self, image: object, where: str) -> bytes:
        if isinstance(image, (bytes, bytearray, memoryview)):
            data = bytes(image)
        elif isinstance(image, (str, os.PathLike)):
            try:
                size = os.path.getsize(image)
                if size > self.max_bytes:
                    raise InputError(f"image file{where} {os.fspath(image)!r} has {size:,} bytes, above max_bytes={self.max_bytes:,}")
                with open(image, "rb") as f:
                    # The size seen, and one byte more to see a file that grew past it: a read of
                    # max_bytes + 1 would allocate 64 MiB for every file, whatever its size.
                    data = f.read(min(size, self.max_bytes) + 1)
                    if len(data) > size:
                        data += f.read(self.max_bytes + 1 - len(data))
            except OSError as exc:
                raise InputError(f"image file{where} cannot be read: {exc}") from exc
        else:
            raise InputError(f"an image{where} must be bytes, a path or a PIL image, not {type(image).__name__}")
        if len(data) > self.max_bytes:
            raise InputError(f"image{where} has {len(data):,} bytes, above max_bytes={self.max_bytes:,}")
        return data


def _draft_jpeg(Image: Any, img: Any, data: bytes, box: int) -> Any:
    """``img`` (a JPEG of ``data``) set to decode at 1/``box`` scale, where libjpeg gives each
    box's mean (from the DC coefficient at 1/8) for most of a full decode's cost; in grey straight
    from the decoder where it can (the Y of YCbCr is 601 luma). A progressive JPEG decoded at 1/8
    reads only its DC scans (:func:`fpstore.fingerprint.jpeg.dc_scans`: the same pixels)."""
    mode = "L" if img.mode in ("L", "RGB") else img.mode
    size = (img.width // box, img.height // box)
    if box == 8 and img.info.get("progressive"):
        dc = dc_scans(data, grey=mode == "L")
        if dc is not None:
            try:
                small = Image.open(io.BytesIO(dc), formats=("JPEG",))
                small.draft(mode, size)
                small.load()
                return small
            except Exception:  # noqa: BLE001 - what the rewrite could not do, the whole file does
                pass
    img.draft(mode, size)
    return img


def _identity(config: dict[str, Any]) -> dict[str, Any]:
    """The part of a config that decides fingerprints: all but the libraries' versions."""
    return {k: v for k, v in config.items() if k != "libraries"}


def _orientation(value: object) -> int:
    """The EXIF orientation tag as ImageOps.exif_transpose reads it: 1..8, stored as any integer
    or a whole RATIONAL or FLOAT (6.0); anything else is upright (1)."""
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return 1
    return int(number) if number.is_integer() and 1 <= number <= 8 else 1


def _content_hash(data: bytes) -> bytes:
    # The first 16 bytes of SHA-256: where the CPU has SHA instructions it runs at twice BLAKE2's
    # speed, and an image file is mostly hashed whole (~60 us for 100 kB).
    return hashlib.sha256(data).digest()[:16]


def _to_grey(img: Any, Image: Any) -> Any:
    """ITU-R 601-2 luma of any mode; transparency over white; 16-bit grey scaled to 8 bits."""
    if img.mode in _MODES_16:
        px = np.asarray(img.convert("I"), dtype=np.int64)
        return Image.fromarray(np.clip(px // 257, 0, 255).astype(np.uint8), "L")
    if img.mode == "F":
        return Image.fromarray(np.clip(np.asarray(img), 0, 255).astype(np.uint8), "L")
    if img.mode in ("RGBA", "LA", "PA", "RGBa", "La") or "transparency" in img.info:  # alpha, or a colour key (P, L, RGB)
        rgba = img.convert("RGBA")
        white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(white, rgba).convert("L")
    if img.mode not in ("L", "RGB"):
        img = img.convert("RGB")  # CMYK, YCbCr, LAB, P, 1, HSV: through RGB, as a browser shows them
    return img.convert("L") if img.mode != "L" else img


@functools.lru_cache(maxsize=1)
def _library_versions() -> dict[str, str]:
    try:
        from PIL import features
    except ImportError:
        return {}
    versions = {}
    for name in _LIBRARIES:
        try:
            v = features.version(name)
        except ValueError:
            continue
        if v:
            versions[name] = str(v)
    return versions
