"""Checks of what callers give the store: raw fingerprints, the pipeline id that made them, and
batches of texts or fingerprints."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fpstore.errors import InputError, PipelineMismatchError
from fpstore.fingerprint.pipeline import Fingerprints, Pipeline
from fpstore.fingerprint.text import Text
from fpstore.hamming import RawFingerprints, as_fingerprint_array

__all__ = ["check_pipeline_id", "fingerprint_int", "signatures"]


def fingerprint_int(value: object) -> int:
    """One fingerprint as a Python int, checked (no numpy on the single-query path)."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)) and 0 <= int(value) < 1 << 64:
        return int(value)
    raise InputError(f"fingerprint must be an int in 0..2**64-1, got {value!r}")


def check_pipeline_id(pipeline: Pipeline, pipeline_id: object) -> None:
    """PipelineMismatchError unless raw fingerprints come with ``pipeline``'s id."""
    if pipeline_id is None:
        raise PipelineMismatchError(
            "raw fingerprints need the id of the pipeline that made them: pass pipeline_id= "
            f"(this store's is {pipeline.id}) or a Fingerprints object"
        )
    if pipeline_id != pipeline.id:
        raise PipelineMismatchError(f"fingerprints from pipeline {pipeline_id!r} cannot enter this store, whose pipeline is {pipeline.id}")


def signatures(
    pipeline: Pipeline,
    n: int | None,
    texts: Sequence[Text] | None,
    fingerprints: RawFingerprints | Fingerprints | None,
    pipeline_id: object,
) -> Fingerprints:
    """One :class:`Fingerprints` batch from exactly one of ``texts`` and ``fingerprints``."""
    if (texts is None) == (fingerprints is None):
        raise InputError("pass exactly one of texts= and fingerprints=")
    if texts is not None:
        if isinstance(texts, (str, bytes)):
            raise InputError("texts must be a sequence of texts; use add() for one document")
        sigs = pipeline.signatures(texts)
    elif isinstance(fingerprints, Fingerprints):
        check_pipeline_id(pipeline, fingerprints.pipeline_id)
        if pipeline_id is not None and pipeline_id != fingerprints.pipeline_id:
            raise PipelineMismatchError("pipeline_id= differs from the Fingerprints object's pipeline id")
        sigs = fingerprints
        as_fingerprint_array(sigs.values)
    else:
        check_pipeline_id(pipeline, pipeline_id)
        sigs = Fingerprints(as_fingerprint_array(fingerprints), pipeline.id)
    if n is not None and len(sigs) != n:
        raise InputError(f"{n} keys but {len(sigs)} {'texts' if texts is not None else 'fingerprints'}")
    return sigs
