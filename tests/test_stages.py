"""The pipeline's stage plug-ins: every built-in senior and principal stage (and the example plug-in) has its
protocol's interface (pipeline.strategies.base.SeniorStage, PrincipalStage), and a configured class without it is
refused before anything is spent."""

from __future__ import annotations

import inspect
import sys
from pathlib import Path

import pytest

from pipeline.errors import SwepipeError
from pipeline.principal.choice import SubmitSeniorCandidate
from pipeline.principal.skip import SubmitTopCandidate
from pipeline.principal.stage import Principal
from pipeline.senior.skipped import SkippedBrief
from pipeline.senior.stage import Senior
from pipeline.strategies.base import STAGE_PROTOCOLS, PrincipalStage, SeniorStage, stage_class

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "plugins"


def merge_principal():
    sys.path.insert(0, str(EXAMPLES))
    try:
        from merge_principal import MergePrincipal
    finally:
        sys.path.remove(str(EXAMPLES))
    return MergePrincipal


def parameters(function) -> list[str]:
    return list(inspect.signature(function).parameters)


@pytest.mark.parametrize(("stage", "protocol", "configured"), [
    (Senior, SeniorStage, True), (SkippedBrief, SeniorStage, False),
    (Principal, PrincipalStage, True), (SubmitSeniorCandidate, PrincipalStage, True),
    (SubmitTopCandidate, PrincipalStage, False),
    (merge_principal(), PrincipalStage, True)])
def test_each_built_in_stage_has_its_protocols_interface(stage, protocol, configured):
    method = "brief" if protocol is SeniorStage else "write"
    assert parameters(getattr(stage, method)) == parameters(getattr(protocol, method)), stage
    assert stage.role in ("senior", "principal", None), stage
    if configured:  # the pipeline constructs it from the config alone (the skip stages are made with a decision)
        assert parameters(stage.__init__) == parameters(protocol.__init__), stage


def test_the_protocols_say_what_a_plug_in_returns():
    for protocol, method in STAGE_PROTOCOLS.values():
        assert protocol.__doc__ and getattr(protocol, method).__doc__
    assert "pipeline.records.Brief" in SeniorStage.__doc__ and "context" in SeniorStage.__doc__
    assert "pipeline.records.PrincipalResult" in PrincipalStage.__doc__ and "patch" in PrincipalStage.__doc__


def test_a_configured_stage_without_its_method_is_refused(tmp_path, monkeypatch):
    (tmp_path / "broken_stages.py").write_text("class Senior:\n    role = None\n    def __init__(self, config):\n"
                                               "        pass\n\n\nclass Principal(Senior):\n    brief = None\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(SwepipeError, match=r"senior.impl 'broken_stages:Senior' is not a SeniorStage: it has no "
                                           r"brief\(job, pool\) method"):
        stage_class("broken_stages:Senior", "pipeline.senior.stage:Senior", "senior.impl")
    with pytest.raises(SwepipeError, match=r"is not a PrincipalStage: it has no write\(job, pool, brief\) method"):
        stage_class("broken_stages:Principal", "pipeline.principal.stage:Principal", "principal.impl")
    assert stage_class(None, "pipeline.senior.stage:Senior", "senior.impl") is Senior
