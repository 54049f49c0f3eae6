"""JPEG files for the decoder tests, made by Pillow from numpy pictures."""

from __future__ import annotations

import io

import numpy as np


def picture(width: int, height: int, seed: int, kind: str = "smooth") -> np.ndarray:
    """An RGB picture: "smooth" (waves and a little noise), "noise" (large AC and DC values
    everywhere), "black" or "white"."""
    rng = np.random.default_rng(seed)
    if kind == "noise":
        return rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
    if kind == "black":
        return np.zeros((height, width, 3), dtype=np.uint8)
    if kind == "white":
        return np.full((height, width, 3), 255, dtype=np.uint8)
    yy, xx = np.mgrid[0:height, 0:width]
    base = 128 + 90 * np.sin(xx / rng.uniform(5, 40)) * np.cos(yy / rng.uniform(5, 40)) + 40 * np.sin((xx + yy) / 11.0)
    rgb = np.stack([base, 255 - base, base * 0.5 + 60], axis=-1) + rng.normal(0, 8, (height, width, 3))
    return np.clip(rgb, 0, 255).astype(np.uint8)


def encode(array: np.ndarray, mode: str = "RGB", **save: object) -> bytes:
    """``array`` as a JPEG of ``mode`` with Pillow's ``save`` options (a large buffer: Pillow's
    default one is too small for some progressive files)."""
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(array).convert(mode).save(buf, "JPEG", bufsize=1 << 22, **save)
    return buf.getvalue()
