"""Container limits: sized from the machine and the number of containers at once, overridable, and the
writable-layer quota used only where the storage driver has one."""

import pytest
from docker.errors import APIError

from pipeline.errors import SwepipeError
from pipeline.runtime import limits
from pipeline.runtime.limits import GIB, MIB, container_limits, fill_defaults, parse_size, with_disk_quota
from pipeline.settings.config import Containers, RunConfig


@pytest.fixture
def machine(monkeypatch):
    """A 16-CPU, 64 GiB machine with the usual 4M pid_max."""
    monkeypatch.setattr(limits, "machine_cpus", lambda: 16)
    monkeypatch.setattr(limits, "machine_memory", lambda: 64 * GIB)
    monkeypatch.setattr(limits, "machine_pid_max", lambda: 4_194_304)


def test_defaults_share_the_machine_between_the_containers_at_once(machine):
    alone, crowd = container_limits(None, 1), container_limits(None, 16)
    assert alone.cpus == 16 and crowd.cpus == 1
    assert alone.memory == 48 * GIB and crowd.memory == 3 * GIB  # 3/4 of the machine, shared
    assert crowd.tmp_size == 768 * MIB and alone.tmp_size == 2 * GIB  # a quarter of memory, at most 2g
    assert alone.pids == crowd.pids == 1024 and crowd.file_size == 2 * GIB
    many = container_limits(None, 400)  # more containers than CPUs: each still gets one CPU, 512m at least
    assert many.cpus == 1 and many.memory >= 512 * MIB


def test_small_pid_max_bounds_the_process_limit(machine, monkeypatch):
    monkeypatch.setattr(limits, "machine_pid_max", lambda: 32_768)
    assert container_limits(None, 32).pids == 512  # half of the kernel's ids shared by 32 containers
    assert container_limits(None, 1000).pids == 256


def test_the_config_wins_and_sizes_are_read_in_every_spelling(machine):
    chosen = container_limits(Containers(cpus=0.5, memory="1.5G", pids_limit=64, tmp_size="100mb",
                                         file_size="1g", disk="20g"), 16)
    assert (chosen.cpus, chosen.memory, chosen.pids, chosen.tmp_size, chosen.file_size, chosen.disk) == (
        0.5, 1536 * MIB, 64, 100 * MIB, GIB, 20 * GIB)
    assert container_limits(Containers(memory="1g"), 1).tmp_size == 256 * MIB  # follows the memory chosen
    assert parse_size("1048576", "memory") == MIB and parse_size("2KiB", "memory") == 2048
    for bad in ("lots", "4 gigs", "-1g", "0"):
        with pytest.raises(SwepipeError, match="containers.memory"):
            parse_size(bad, "memory")


def test_a_run_records_the_limits_its_containers_get(machine):
    filled = fill_defaults(Containers(memory="2g"), concurrent=8)
    assert filled.memory == "2g" and filled.cpus == 2 and filled.pids_limit == 1024
    assert filled.tmp_size == "512m" and filled.file_size == "2g" and filled.disk == "10g"
    assert "pids_limit: 1024" in RunConfig(containers=filled).to_yaml()
    assert container_limits(filled) == container_limits(Containers(memory="2g"), 8)


def test_docker_options_drop_privileges_and_bound_tmp(machine):
    options = container_limits(Containers(tmp_size="64m"), 4).docker_options()
    assert options["cap_drop"] == ["ALL"] and "SYS_ADMIN" not in options["cap_add"]
    assert set(options["cap_add"]) == {"CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "SETUID", "SETGID", "KILL"}
    assert options["security_opt"] == ["no-new-privileges"]
    assert options["memswap_limit"] == options["mem_limit"] == 12 * GIB and options["nano_cpus"] == 4 * 10**9
    assert options["tmpfs"] == {"/tmp": f"rw,exec,nosuid,nodev,mode=1777,size={64 * MIB}"}
    assert options["ulimits"][0]["Name"] == "fsize" and options["ulimits"][0]["Hard"] == 2 * GIB
    assert "ulimits" not in container_limits(None, 4).docker_options(file_size=False)


class FakeEngine:
    """Answers `docker info` like an engine on the given storage driver."""

    def __init__(self, driver, backing=None):
        self.driver, self.backing = driver, backing

    def info(self):
        status = [["Backing Filesystem", self.backing]] if self.backing else []
        return {"Driver": self.driver, "DriverStatus": status}


@pytest.fixture
def fresh_quota_state(monkeypatch):
    monkeypatch.setattr(limits, "_quota_supported", None)


def test_disk_quota_only_where_the_driver_has_one(fresh_quota_state):
    calls = []

    def create(**options):
        calls.append(options)
        if "storage_opt" in options:
            raise APIError("--storage-opt is supported only for overlay over xfs with 'pquota' mount option")
        return "container"

    sizes = container_limits(Containers(disk="5g"), 1)
    # overlay2 on ext4: known to have no quota, so never tried.
    assert with_disk_quota(create, sizes, FakeEngine("overlay2", "extfs"), image="i") == "container"
    assert calls == [{"image": "i"}]
    # overlay2 on xfs: only trying tells (pquota); refused once, then remembered.
    limits._quota_supported = None
    calls.clear()
    assert with_disk_quota(create, sizes, FakeEngine("overlay2", "xfs"), image="i") == "container"
    assert calls == [{"image": "i", "storage_opt": {"size": str(5 * GIB)}}, {"image": "i"}]
    calls.clear()
    with_disk_quota(create, sizes, FakeEngine("overlay2", "xfs"), image="i")
    assert calls == [{"image": "i"}]


def test_disk_quota_is_used_when_the_driver_takes_it(fresh_quota_state):
    seen = []
    assert with_disk_quota(lambda **options: seen.append(options) or "ok", container_limits(None, 1),
                           FakeEngine("btrfs"), image="i") == "ok"
    assert seen == [{"image": "i", "storage_opt": {"size": str(10 * GIB)}}]


def test_other_engine_errors_are_not_taken_for_a_missing_quota(fresh_quota_state):
    def create(**options):
        raise APIError("No such image: i")

    with pytest.raises(APIError, match="No such image"):
        with_disk_quota(create, container_limits(None, 1), FakeEngine("zfs"), image="i")
    assert limits._quota_supported is None
