"""A run owns its directory's lock from entering to leaving, whatever ends it: an exception in its body, a stop
(KeyboardInterrupt), SystemExit, or a refusal while it opens; a model without a price stops it before its directory
exists. Scripted models, no Docker."""

import fcntl
import os

import pytest
from run_sessions import request
from test_run_dataset import scripted_config, task_file

from pipeline.errors import SwepipeError
from pipeline.run.lifecycle import Run, new_run_id
from pipeline.run.setup import resolve_config


def held(run: Run) -> bool:
    """Whether some open file description holds the run's flock (a second descriptor cannot take it)."""
    fd = os.open(run.layout.lock_file, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


@pytest.fixture
def config(tmp_path):
    return resolve_config(scripted_config(tmp_path))


@pytest.mark.parametrize("ending", [RuntimeError("a bug"), KeyboardInterrupt(), SystemExit(3)])
def test_leaving_the_run_gives_its_lock_back_whatever_ends_it(tmp_path, config, ending):
    run = Run.open(request(config, "r", tmp_path / "runs"))
    with pytest.raises(type(ending)):
        with run:
            assert held(run) and run.settings.layout.config.is_file()
            raise ending
    assert not held(run)
    with pytest.raises(RuntimeError, match="closed"):
        run.settings  # noqa: B018 - the property refuses a closed run
    with Run.open(request(config, "r", tmp_path / "runs")) as again:  # the next session opens it
        assert held(again)


def test_a_run_refused_while_it_opens_gives_its_lock_back(tmp_path, config):
    with Run.open(request(config, "r", tmp_path / "runs", dataset=str(task_file(tmp_path)))):
        pass
    run = Run.open(request(config, "r", tmp_path / "runs", dataset="bundled"))
    with pytest.raises(SwepipeError, match="holds tasks of"):
        with run:
            pass
    assert not held(run)


def test_a_run_is_entered_once(tmp_path, config):
    run = Run.open(request(config, "r", tmp_path / "runs"))
    with pytest.raises(RuntimeError, match="unopened"):
        run.settings  # noqa: B018 - not entered yet
    with run:
        with pytest.raises(RuntimeError, match="opened"):
            run.__enter__()
    with pytest.raises(RuntimeError, match="closed"):
        run.__enter__()
    assert not held(run)


def test_an_unpriced_model_stops_the_run_before_its_directory_exists(tmp_path, config):
    models = {**config.models, "senior": config.models["senior"].model_copy(
        update={"model": "openai/no-such-model-anywhere", "prices": None})}
    with pytest.raises(SwepipeError, match="the senior model 'openai/no-such-model-anywhere' has no known price"):
        Run.open(request(config.model_copy(update={"models": models}), "r", tmp_path / "runs"))
    assert not (tmp_path / "runs").exists()


def test_a_default_run_id_names_its_kind_and_time():
    assert new_run_id().startswith("run-") and new_run_id("sweep").startswith("sweep-")
    assert len(new_run_id()) == len("run-20260101-120000")
