"""A closed vocabulary's field (records.base.Word) on disk: its word becomes the enum's member, a word the enum
does not know (an older or newer swepipe's, a hand-edited file) is kept as read, and a writer must use a known one."""

from __future__ import annotations

import json

import pytest
from fuzzing import fuzz
from hypothesis import given
from hypothesis import strategies as st

from pipeline.records import EvalResult, Pool, Prediction, RecordError, SoloResult, Unreadable
from pipeline.records.evaluation import EvalCategory
from pipeline.records.pool import ScheduleDecision
from pipeline.records.trajectory import ExitReason

SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30)
WORDS = st.sampled_from([*EvalCategory, *ExitReason, *ScheduleDecision])


@fuzz
@given(value=SCALARS | WORDS.map(str))
def test_any_category_read_back_is_its_member_or_kept_as_read(tmp_path_factory, value):
    path = tmp_path_factory.mktemp("words") / "result.json"
    path.write_text(json.dumps({"format": 1, "instance_id": "i", "category": value}))
    record = EvalResult.read(path)
    assert not isinstance(record, Unreadable), record.why
    assert record.category == value
    known = isinstance(value, str) and value in {c.value for c in EvalCategory}
    assert isinstance(record.category, EvalCategory) is known


def test_words_are_written_as_the_same_strings_and_read_back_as_members(tmp_path):
    EvalResult.of({"instance_id": "i", "category": "infra_error"}).write(tmp_path / "e.json")
    SoloResult.of({"exit_reason": ExitReason.STEP_LIMIT}).write(tmp_path / "s.json")
    Pool.of({"schedule": {"decisions": [{"wave": 1, "decision": "go on"}]}}).write(tmp_path / "p.json")
    assert json.loads((tmp_path / "e.json").read_text())["category"] == "infra_error"
    assert json.loads((tmp_path / "s.json").read_text())["exit_reason"] == "step_limit"
    assert json.loads((tmp_path / "p.json").read_text())["schedule"]["decisions"][0]["decision"] == "go on"
    assert EvalResult.read(tmp_path / "e.json").category is EvalCategory.INFRA_ERROR
    assert SoloResult.read(tmp_path / "s.json").exit_reason is ExitReason.STEP_LIMIT
    assert Pool.read(tmp_path / "p.json").schedule.decisions[0].decision is ScheduleDecision.GO_ON


@pytest.mark.parametrize("record, data", [
    (EvalResult, {"instance_id": "i", "category": "sort_of_resolved"}),
    (Prediction, {"instance_id": "i", "model_patch": "", "exit_reason": "gave_up"}),
])
def test_a_writer_with_an_unknown_word_is_refused(record, data):
    with pytest.raises(RecordError, match="Input should be"):
        record.of(data)


def test_sources_are_written_as_their_words_and_a_plug_in_s_own_word_is_kept(tmp_path):
    """A patch's and a brief's source name their stage by enum member in swepipe's code; on disk the word is the
    same string, and since a plug-in principal or a replay writes words of its own, any text is kept."""
    from pipeline.records import Brief, PrincipalResult
    from pipeline.records.sources import BriefSource, PatchSource

    for number, source in enumerate([*PatchSource, "merge"]):
        path = tmp_path / f"result-{number}.json"
        PrincipalResult.of({"source": source, "patch": ""}).write(path)
        assert json.loads(path.read_text())["source"] == str(source)
        assert PrincipalResult.read(path).source == source
    for source in BriefSource:
        Brief.of({"source": source, "analysis": "a"}).write(tmp_path / "brief.json")
        assert json.loads((tmp_path / "brief.json").read_text())["source"] == source.value
    assert {s.value for s in PatchSource} >= {"principal", "fallback:junior_top", "senior_choice", "junior_top",
                                               "skip:junior_top", "solo", "team", "vote", "none"}
