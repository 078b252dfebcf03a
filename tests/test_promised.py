"""A dependency the README promises (Chromium, the local model's llama.cpp) fails CI when missing, and skips a
developer's run."""

import conftest
import pytest


def test_ci_fails_naming_what_to_install(monkeypatch):
    monkeypatch.setattr(conftest, "IN_CI", True)
    with pytest.raises(pytest.fail.Exception, match=r"CI must run this test, but chromium is missing: apt-get"):
        conftest.promised_but_missing("chromium", "apt-get install chromium")


def test_a_local_run_skips_naming_what_to_install(monkeypatch):
    monkeypatch.setattr(conftest, "IN_CI", False)
    with pytest.raises(pytest.skip.Exception, match=r"chromium is missing: apt-get install chromium"):
        conftest.promised_but_missing("chromium", "apt-get install chromium")


def test_a_missing_module_is_named(monkeypatch):
    monkeypatch.setattr(conftest, "IN_CI", True)
    with pytest.raises(pytest.fail.Exception, match=r"the Python module no_such_module_here .*swepipe\[local\]"):
        conftest.import_promised("no_such_module_here", conftest.LOCAL_EXTRA)
    assert conftest.import_promised("json", conftest.LOCAL_EXTRA).dumps([]) == "[]"
