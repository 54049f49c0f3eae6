"""What a store's pipeline can be: a text :class:`~fpstore.fingerprint.pipeline.Pipeline` or an
:class:`~fpstore.fingerprint.image.ImagePipeline`, told apart by the ``kind`` of a config.

Fingerprints of the two are not comparable, so a store holds one kind, and the store's inputs
(``text=`` or ``image=``) must be of its pipeline's kind.
"""

from __future__ import annotations

from typing import Any, TypeAlias

from fpstore.errors import FormatError, InputError
from fpstore.fingerprint.image import IMAGE_KINDS, ImagePipeline
from fpstore.fingerprint.pipeline import IdfTable, Pipeline

__all__ = ["AnyPipeline", "content_of", "is_image", "pipeline_from_config"]

AnyPipeline: TypeAlias = Pipeline | ImagePipeline


def is_image(pipeline: object) -> bool:
    """Whether ``pipeline`` fingerprints images."""
    return isinstance(pipeline, ImagePipeline)


def pipeline_from_config(config: object, idf: IdfTable | None = None) -> AnyPipeline:
    """The pipeline a config (read from a store header or a stream: untrusted) describes."""
    if not isinstance(config, dict):
        raise FormatError("pipeline config must be a dict")
    kind = config.get("kind")
    if isinstance(kind, str) and kind in IMAGE_KINDS:
        if idf is not None:
            raise FormatError("an image pipeline takes no idf table")
        return ImagePipeline.from_config(config)
    return Pipeline.from_config(config, idf)


def content_of(pipeline: AnyPipeline, text: object, image: object, plural: str = "") -> Any:
    """The one content argument given (``text=`` or ``image=``, or None; ``texts=`` and
    ``images=`` with ``plural="s"``), refused when it is not of the kind ``pipeline``
    fingerprints."""
    t, i = f"text{plural}=", f"image{plural}="
    if image is not None:
        if text is not None:
            raise InputError(f"pass {t} or {i}, not both")
        if not is_image(pipeline):
            raise InputError(f"this store's pipeline ({pipeline.kind}) fingerprints text: pass {t}, not {i}")
        return image
    if text is not None and is_image(pipeline):
        raise InputError(f"this store's pipeline ({pipeline.kind}) fingerprints images: pass {i}, not {t}")
    return text
