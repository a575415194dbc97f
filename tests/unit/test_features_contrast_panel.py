"""The Features tab's contrast panel and its several-clamps steering (components.features.contrast,
components.features.steering), called as the tab calls them, on the zoo organism: what a visitor sees
and the refusals before anything is computed."""

import pytest

from components.features import contrast as FC
from components.features import steering as FS


def test_red_against_blue_finds_the_planted_colour_features_and_exports_every_tested_one():
    from backend.sae import contrast_scenes as CS
    from backend.sae import loading

    org = loading.get_organism("zoo")
    head, fig, table, gallery, csv = FC.run("zoo", "red", "blue", None, None, 64)
    assert "tested features" in head and "Benjamini" in head and "Mann" in head
    assert list(table.columns) == FC.COLUMNS and len(table) <= FC.SHOWN_ROWS
    top2 = set(table["feature"][:2])
    assert top2 <= set(CS.concept_features(org, "red")) | set(CS.concept_features(org, "blue")), table.head()
    assert (table["significant"][:2] == "yes").all()
    assert [t.name for t in fig.data] == ["higher in A", "higher in B", "not significant"]
    assert len(gallery) == 10 and gallery[0][1].startswith("A · feature") and gallery[-1][1].startswith("B · ")
    lines = open(csv).read().splitlines()
    assert lines[0].startswith("feature,label,mean_a,mean_b") and len(lines) - 1 >= len(table)


@pytest.mark.parametrize(
    "args, words",
    [
        (("red", "red"), "both sets ask for"),
        (("purple", "blue"), "unknown concept 'purple'"),
    ],
)
def test_bad_filters_are_refused_with_the_known_concepts(args, words):
    with pytest.raises(ValueError, match=words):
        FC.run("zoo", *args, None, None, 64)


def test_a_set_over_the_bound_is_refused_before_any_image_is_read(tmp_path):
    import gradio as gr

    with pytest.raises(ValueError, match="between 2 and 64"):
        FC.run("zoo", "red", "blue", None, None, 65)
    missing = [str(tmp_path / f"{i}.png") for i in range(65)]  # never opened: counted first
    with pytest.raises(gr.Error, match="at most 64 per set"):
        FC.run("zoo", "red", "blue", missing, missing[:3], 64)
    assert "65" not in FC.estimate("zoo", missing[:3], None, 64) and "About" not in FC.estimate("zoo", None, None, 1)


def test_several_clamps_are_parsed_and_refused_clearly():
    import gradio as gr

    assert FS.parse_clamps("12=4, 30=2.5", (1, 3.0)) == [(1, 3.0), (12, 4.0), (30, 2.5)]
    assert FS.parse_ids("7, 9;11") == [7, 9, 11]
    for bad in ("7", "x=2", "7=two"):
        with pytest.raises(gr.Error, match="feature=value"):
            FS.parse_clamps(bad)
    with pytest.raises(gr.Error, match="ids separated by commas"):
        FS.parse_ids("seven")


def test_each_clamp_alone_and_all_together_make_one_row_each():
    from backend.sae import loading
    from backend.sae.contrast_scenes import concept_features

    org = loading.get_organism("zoo")
    red, blue = concept_features(org, "red")[0], concept_features(org, "blue")[0]
    frame, out = FS.steer_many("zoo", None, "0", red, 3.0, f"{blue}=3", "", "prompt", False, False)
    assert list(frame["clamps"])[0] == "no clamp" and len(frame) == 4  # none, each alone, together
    assert "(all together)" in frame["clamps"].iloc[-1] and len(out["alone"]) == 2
    with pytest.raises(ValueError, match="clamped twice"):
        FS.steer_many("zoo", None, "0", red, 3.0, f"{red}=2", "", "prompt", False, False)
