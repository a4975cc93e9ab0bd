"""The reference plan: which measurements train and which evaluate, and that they never mix."""

from __future__ import annotations

from collections import Counter

from ccscope.classifier.conditions import GROUPS, split_of_seed
from ccscope.classifier.reference import MILD_P, mild_groups, plan
from ccscope.classifier.train import sample_set


def test_sets_never_share_a_draw_except_held_out_runs() -> None:
    p = plan(scale=0.2)
    ids = {k: {j.draw.id for j in v} for k, v in p.items()}
    evaluated = ("unseen", "variants", "variants_design", "other_profiles", "demo")
    for k in evaluated:
        assert not ids[k] & ids["train"], k
    # held-out runs are new runs of training draws: a path trained on, a run never seen
    assert ids["heldout_runs"] <= ids["train"]
    assert all(j.run == 1 for j in p["heldout_runs"]) and all(j.run == 0 for j in p["train"])
    assert {split_of_seed(j.draw.seed) for j in p["train"]} == {"train"}
    assert {split_of_seed(j.draw.seed) for j in p["unseen"]} == {"eval"}
    assert {split_of_seed(j.draw.seed) for j in p["variants_design"]} == {"calib"}


def test_one_cca_per_draw_and_every_cca_planned() -> None:
    p = plan(scale=0.2)
    per_draw = Counter(j.draw.id for j in p["train"])
    assert set(per_draw.values()) == {1}
    assert len({j.cca for j in p["train"]}) >= 18


def test_mild_groups_are_independent_and_about_mild_p() -> None:
    picks = [mild_groups(i, "cubic") for i in range(4000)]
    for g in GROUPS:
        share = sum(g in p for p in picks) / len(picks)
        assert abs(share - MILD_P) < 0.03, (g, share)
    assert mild_groups(7, "cubic") == mild_groups(7, "cubic")


def test_collected_records_land_in_their_sets() -> None:
    assert sample_set({"split": "train", "space": "full", "run": 0}) == "train"
    assert sample_set({"split": "train", "space": "full", "run": 1}) == "heldout_runs"
    assert sample_set({"split": "eval", "space": "full", "run": 0}) == "unseen"
    assert sample_set({"split": "eval", "space": "other-profiles", "run": 0}) == "other_profiles"
    assert sample_set({"split": "eval", "space": "full", "is_variant": True}) == "variants"
    assert sample_set({"split": "calib", "space": "full", "is_variant": True}) == "variants_design"


def test_more_training_draws_extend_the_same_stream_and_leave_evaluation_alone() -> None:
    small, big = plan(scale=0.2), plan(scale=0.2, train_per_cca=30)
    n_ccas = len({j.cca for j in small["train"]})
    assert len(big["train"]) == 30 * n_ccas
    # the smaller set is the larger one's prefix: same draws, same mild groups
    assert [j.key for j in big["train"][: len(small["train"])]] == [j.key for j in small["train"]]
    assert len({j.draw.id for j in big["train"]}) == len(big["train"])
    assert {split_of_seed(j.draw.seed) for j in big["train"]} == {"train"}
    for k in small:
        if k != "train":
            assert [j.key for j in big[k]] == [j.key for j in small[k]], k
