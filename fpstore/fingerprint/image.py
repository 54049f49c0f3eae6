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
Pillow decodes (its major version is recorded: a new major is a new pipeline), JPEGs are decoded
at a reduced scale (``draft``: libjpeg scales by 1/2, 1/4 or 1/8 inside its IDCT, which is most
of the speed), EXIF orientation is applied, transparency is composited over white, colour becomes
ITU-R 601-2 luma, and Lanczos-3 resampling in float64 makes the thumbnail (after an integer box
reduction of images more than four times its size, as Pillow's ``reducing_gap=2``). The versions of the decoder
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
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Union

import msgpack
import numpy as np

from fpstore.errors import FormatError, InputError, PipelineMismatchError
from fpstore.fingerprint.pipeline import Fingerprints, Signature
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
#: The radius a new image store gets when none is given: pHash's calibrated k (docs/tuning.md).
DEFAULT_IMAGE_K = 8
#: Pillow major versions this build accepts (pinned in the ``image`` extra).
PILLOW_MAJORS = (13,)
#: What a thumbnail's making records in the config (all of it decides the bits).
_THUMBNAIL = {"orientation": "exif", "alpha": "over-white", "colour": "L-601", "resample": "box-gap2,lanczos3-f64", "draft": "jpeg"}
#: An image more than this many times the thumbnail's size (per axis, after the JPEG draft) is
#: first reduced by an integer factor in box averages (Pillow's ``reduce``; what its
#: ``reducing_gap=2`` does), so that the Lanczos step below reads at most ~4x the thumbnail.
_REDUCING_GAP = 2.0
#: The libraries whose versions the config records (PIL.features names).
_LIBRARIES = ("libjpeg_turbo", "jpg", "zlib", "libtiff", "webp", "jpg_2000")

#: What :meth:`ImagePipeline.signature` takes: encoded bytes, a path, or a PIL image.
ImageInput = Union[bytes, bytearray, memoryview, str, "os.PathLike[str]", "_PILImage.Image"]

_ORIENTATION = 0x0112  # the EXIF tag
_MODES_16 = ("I;16", "I;16B", "I;16L", "I;16N", "I")


def _pil() -> Any:
    try:
        import PIL
        from PIL import Image, ImageOps
    except ImportError:
        raise InputError("image pipelines need Pillow: pip install 'fpstore[image]'") from None
    major = int(PIL.__version__.split(".")[0])
    if major not in PILLOW_MAJORS:
        raise PipelineMismatchError(
            f"image fingerprints of this build are defined with Pillow {PILLOW_MAJORS}; Pillow {PIL.__version__} is "
            "installed, whose decoding and resampling may differ: install the version the 'image' extra pins"
        )
    return PIL, Image, ImageOps


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


@functools.lru_cache(maxsize=512)
def lanczos_matrix(out: int, n: int) -> np.ndarray:
    """Weights (``out`` × ``n``) of Lanczos-3 resampling from ``n`` samples to ``out``, as Pillow
    defines it: the kernel ``sinc(x) sinc(x / 3)`` stretched by the scale when shrinking, centred
    on each output sample's centre, each row normalised to sum 1."""
    scale = n / out
    stretch = max(scale, 1.0)
    support = 3.0 * stretch
    m = np.zeros((out, n), dtype=np.float64)
    for i in range(out):
        centre = (i + 0.5) * scale
        lo, hi = max(int(centre - support + 0.5), 0), min(int(centre + support + 0.5), n)
        x = (np.arange(lo, hi) - centre + 0.5) / stretch
        w = np.where(np.abs(x) < 3.0, np.sinc(x) * np.sinc(x / 3.0), 0.0)
        m[i, lo:hi] = w / w.sum()
    m.setflags(write=False)
    return m


def resample(grey: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """``grey`` (rows × columns) resampled to ``size`` (width, height) with Lanczos-3, both axes
    at once in float64 (no rounding between them): two small matrix products, ~25 us from the
    100×75 of a JPEG decoded at 1/8, where Pillow's resize takes ~120 us."""
    width, height = size
    return lanczos_matrix(height, grey.shape[0]) @ grey @ lanczos_matrix(width, grey.shape[1]).T


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
    modality = "image"

    def __post_init__(self) -> None:
        if self.kind not in IMAGE_KINDS:
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
        config = {k: v for k, v in self.config.items() if k != "libraries"}
        canonical = msgpack.packb(sorted(config.items()), use_bin_type=True)
        return hashlib.blake2b(canonical, digest_size=8).hexdigest()

    def mismatch(self, other: Any) -> str:
        """How ``other``'s config differs from this one's (``libraries`` aside), as
        :meth:`Pipeline.mismatch <fpstore.Pipeline.mismatch>` says it."""
        mine = {k: v for k, v in self.config.items() if k != "libraries"}
        theirs = {k: v for k, v in other.config.items() if k != "libraries"}
        return ", ".join(
            f"{f}: store has {mine.get(f)!r}, given {theirs.get(f)!r}"
            for f in sorted(set(mine) | set(theirs))
            if mine.get(f) != theirs.get(f)
        )

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
        if kind not in IMAGE_KINDS:
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
        return self._decode(image, index)[0]

    def signature(self, image: ImageInput) -> Signature:
        """Fingerprint, short flag and content hash of one image (``tokens`` is the image's pixel
        count as decoded). Undecodable or hostile input raises :class:`~fpstore.errors.InputError`."""
        return self._signature(image, None)

    def fingerprint(self, image: ImageInput) -> int:
        """The 64-bit fingerprint of one image (see :meth:`signature`)."""
        return self._signature(image, None).fingerprint

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

    def _signature(self, image: ImageInput, index: int | None) -> Signature:
        grey, pixels, short, digest = self._decode(image, index)
        fp = phash_bits(grey) if self.kind == "phash64" else dhash_bits(grey)
        flat = float(grey.max()) - float(grey.min()) <= 1.0
        return Signature(fp, pixels, short or flat, digest)

    def _decode(self, image: ImageInput, index: int | None) -> tuple[np.ndarray, int, bool, bytes]:
        """(thumbnail, pixels, too small, content hash) of one input."""
        _, Image, ImageOps = _pil()
        where = "" if index is None else f" at index {index}"
        data: bytes | None = None
        if isinstance(image, Image.Image):
            digest = _content_hash(f"{image.mode} {image.size}".encode() + image.tobytes())
        else:
            data = self._read(image, where)
            digest = _content_hash(data)
        try:
            img: Any = image if data is None else Image.open(io.BytesIO(data))
            width, height = img.size
            if width * height > self.max_pixels:
                raise InputError(f"image{where} declares {width}×{height} pixels, above max_pixels={self.max_pixels:,}")
            size = IMAGE_KINDS[self.kind][1]
            if img.format == "JPEG" and data is not None:
                # Grey straight from the decoder where it can (the Y of YCbCr is 601 luma).
                img.draft("L" if img.mode in ("L", "RGB") else img.mode, size)
            img.load()
            if img.getexif().get(_ORIENTATION, 1) != 1:  # exif_transpose would copy an upright image too
                img = ImageOps.exif_transpose(img)
            grey = _to_grey(img, Image)
            factor = (max(1, int(grey.width / size[0] / _REDUCING_GAP)), max(1, int(grey.height / size[1] / _REDUCING_GAP)))
            if factor != (1, 1):
                grey = grey.reduce(factor)
            out = resample(np.asarray(grey, dtype=np.float64), size)
        except InputError:
            raise
        except MemoryError:
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
                    data = f.read(self.max_bytes + 1)
            except OSError as exc:
                raise InputError(f"image file{where} cannot be read: {exc}") from exc
        else:
            raise InputError(f"an image{where} must be bytes, a path or a PIL image, not {type(image).__name__}")
        if len(data) > self.max_bytes:
            raise InputError(f"image{where} has {len(data):,} bytes, above max_bytes={self.max_bytes:,}")
        return data


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
    if img.mode in ("RGBA", "LA", "PA", "RGBa", "La") or (img.mode == "P" and "transparency" in img.info):
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
