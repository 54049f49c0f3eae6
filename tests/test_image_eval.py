"""tools/image_eval.py: the evaluation set is deterministic, its ground truth is right, and the
image pipelines separate its positives from its negatives at the recommended k."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("PIL.Image", reason="Pillow is in the test extra")
pytest.importorskip("matplotlib", reason="matplotlib is in the test extra")

from tools import image_eval as ie  # noqa: E402

TRANSFORMS = ("resize", "jpeg", "crop", "watermark", "rotate")


@pytest.fixture(scope="module")
def sources():
    return ie.mpl_sources()


@pytest.fixture(scope="module")
def eval_set(sources):
    return ie.build(sources, transforms=TRANSFORMS)


@pytest.fixture(scope="module")
def phash_fps(eval_set):
    return ie.fingerprints(eval_set, ie.hashers()["phash64"])


def test_sources_are_the_bundled_files(sources):
    names = [n for n, _ in sources]
    assert names == [
        "mpl/grace_hopper",
        "mpl/Minduka_Present_Blue_Pack",
        "mpl/logo2",
        "mpl/s1045_mri",
        "mpl/jacksboro_dem",
        "mpl/topobathy",
        "mpl/bivariate_normal",
    ]
    for name, im in sources:
        assert im.mode in ("RGB", "RGBA", "L"), name
        assert min(im.size) >= 16, name


def test_set_is_deterministic(sources, eval_set):
    again = ie.build(sources, transforms=TRANSFORMS)
    assert again.digest() == eval_set.digest()
    assert [it.name for it in again.items] == [it.name for it in eval_set.items]
    other_seed = ie.build(sources[:1], transforms=("crop",), seed=ie.SEED + 1)
    assert other_seed.digest() != ie.build(sources[:1], transforms=("crop",)).digest()


def test_ground_truth(eval_set):
    bases = eval_set.bases
    # grace_hopper (512x600) and the DEM (403x344) are tiled; the others are under 300 pixels a side
    assert sorted(b.name for b in bases if b.tile) == sorted(
        f"mpl/{s}#q{q}" for s in ("grace_hopper", "jacksboro_dem") for q in (1, 2, 3, 4)
    )
    rel = eval_set.related()
    idx = {b.name: i for i, b in enumerate(bases)}
    assert rel[idx["mpl/grace_hopper"], idx["mpl/grace_hopper#q3"]]  # a tile overlaps its source
    assert not rel[idx["mpl/grace_hopper#q1"], idx["mpl/grace_hopper#q2"]]  # tiles do not overlap
    assert not rel[idx["mpl/grace_hopper"], idx["mpl/jacksboro_dem#q1"]]
    # quadrants partition their source
    gh = bases[idx["mpl/grace_hopper"]].image
    assert sum(
        bases[idx[f"mpl/grace_hopper#q{q}"]].image.size[0] * bases[idx[f"mpl/grace_hopper#q{q}"]].image.size[1] for q in range(1, 5)
    ) == (gh.size[0] * gh.size[1])
    per_base = {t: len(ie.variants(bases[0], t)) for t in TRANSFORMS}
    assert per_base == {"resize": 3, "jpeg": 4, "crop": 3, "watermark": 2, "rotate": 3}
    assert len(eval_set.items) == len(bases) * (1 + sum(per_base.values()))
    for it in eval_set.items:
        if it.transform == "jpeg":
            assert it.data[:2] == b"\xff\xd8"
        elif it.transform != "combo":
            assert it.data[:8] == b"\x89PNG\r\n\x1a\n"


def test_transform_parameters_are_in_range(eval_set):
    import io

    from PIL import Image

    sizes = {i: b.image.size for i, b in enumerate(eval_set.bases)}
    for it in eval_set.items:
        if it.transform == "crop":
            w, h = Image.open(io.BytesIO(it.data)).size
            bw, bh = sizes[it.base]
            frac = int(it.slot.rstrip("%")) / 100
            assert (bw - w, bh - h) == (round(bw * frac), round(bh * frac)), it.name
        elif it.transform == "rotate":
            assert 1.0 <= abs(float(it.params.split()[0])) <= 5.0


def test_scoring_counts_what_it_says(eval_set):
    n = len(eval_set.items)
    base_of = np.array([it.base for it in eval_set.items])
    rng = np.random.default_rng(5)
    # every variant equal to its base, bases far apart: perfect at k = 0
    base_fps = rng.integers(0, 2**63, len(eval_set.bases), dtype=np.uint64)
    s = ie.score(eval_set, base_fps[base_of], "same")
    assert s.prf()[0][1:] == (1.0, 1.0, 1.0)
    # all images equal: every query matches every unrelated base as well
    s = ie.score(eval_set, np.zeros(n, dtype=np.uint64), "flat")
    k, p, r, _ = s.prf()[0]
    assert r == 1.0 and p < 0.2
    assert s.pair_fp[0] == s.pair_negatives > 0


def test_phash64_separates_the_set(eval_set, phash_fps):
    k = ie.RECOMMENDED_K["phash64"]
    s = ie.score(eval_set, phash_fps, "phash64")
    # every resize of every base stays within the recommended k of its base
    assert max(s.own_distance["resize"]) <= k, s.by_params
    # and so do the JPEG re-encodings at quality >= 50
    for q in (50, 75, 95):
        assert max(s.by_params[("jpeg", f"q{q}")]) <= k
    # negatives are far: pair-level false positives within k under the recommendation's cap
    assert s.pair_fp[k] <= ie.FPR_CAP * s.pair_negatives
    assert s.neg_quantiles[-1] >= 26  # median distance of unrelated images near 32
    # rotation is the hardest transformation, resize the easiest
    assert s.prf("resize")[k][2] >= s.prf("rotate")[k][2]
