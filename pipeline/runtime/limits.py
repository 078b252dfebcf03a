"""What every container swepipe starts may use: CPUs, memory, processes, /tmp, file sizes, privileges.

Agents and test runs execute untrusted code, so no container gets the host's defaults (no process limit,
every capability, unbounded memory). The defaults are sized from this machine (``os.cpu_count()``,
``MemTotal`` in /proc/meminfo, ``kernel.pid_max``) and from how many containers run at once (K rollouts
x task workers), so that all of them together leave the host room; the config (``containers``)
overrides each.

What bounds the disk: a command's own timeout; the file-size limit (RLIMIT_FSIZE, ``file_size``) on every
file a process writes, anywhere (``yes > /app/big`` dies at that size with "File size limit exceeded"); the
size of the /tmp tmpfs (``tmp_size``, counted in the container's memory); and, where the storage driver
supports quotas (overlay2 on xfs with pquota, btrfs, zfs, devicemapper), the whole writable layer
(``disk``). Without a quota, many files each below ``file_size`` written within one command's timeout are
not bounded; the container's layer is removed with the container.
"""

from __future__ import annotations

import os
import re
import threading
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Callable

from pipeline.errors import InfrastructureFault, SwepipeError

if TYPE_CHECKING:
    from pipeline.settings.config import Containers

KIB, MIB, GIB = 1024, 1024**2, 1024**3
# Root in the container keeps only what git, pip, npm and go test runs need: owning and moving files of
# any user, setting ids for test suites that drop privileges, and signalling their own children.
CAPABILITIES = ("CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "SETUID", "SETGID", "KILL")
# The share of the machine's memory all containers together may have; the rest is the host's.
MEMORY_SHARE = 0.75
# The share of the kernel's process ids all containers together may hold.
PIDS_SHARE = 0.5
DEFAULT_FILE_SIZE = 2 * GIB
DEFAULT_DISK = 10 * GIB
TMP_PATH = "/tmp"


class ResourceLimitHit(SwepipeError):
    """A command ran into its container's limits (processes, memory, /tmp, file size). What it started
    was killed; the agent that ran it is ended with ``resource_limit`` (its own doing, a final outcome)."""

    def __init__(self, message: str, limits: list[str], result=None):
        super().__init__(message)
        self.limits, self.result = limits, result


@dataclass(frozen=True)
class ContainerLimits:
    cpus: float
    memory: int  # bytes; swap is not allowed on top
    pids: int
    tmp_size: int  # bytes of the /tmp tmpfs
    file_size: int | None  # bytes any one file may reach (RLIMIT_FSIZE), None: unlimited
    disk: int | None  # bytes of the writable layer where the storage driver supports a quota

    def describe(self) -> dict:
        """A JSON-able record of the limits, sizes in readable units."""
        record = asdict(self)
        for key in ("memory", "tmp_size", "file_size", "disk"):
            if record[key] is not None:
                record[key] = format_size(record[key])
        return record

    def docker_options(self, *, file_size: bool = True) -> dict:
        """Keyword arguments for docker-py's ``containers.run``/``create``: every limit but the disk quota
        (``with_disk_quota`` adds it where the driver allows). ``file_size=False`` leaves RLIMIT_FSIZE unset
        (the sanitise step writes the repository's whole history as one pack)."""
        from docker.types import Ulimit

        options = {
            "nano_cpus": int(self.cpus * 1e9), "mem_limit": self.memory, "memswap_limit": self.memory,
            "pids_limit": self.pids, "security_opt": ["no-new-privileges"], "cap_drop": ["ALL"],
            "cap_add": list(CAPABILITIES),
            "tmpfs": {TMP_PATH: f"rw,exec,nosuid,nodev,mode=1777,size={self.tmp_size}"},
        }
        if file_size and self.file_size:
            options["ulimits"] = [Ulimit(name="fsize", soft=self.file_size, hard=self.file_size)]
        return options


def parse_size(value: str | int | float | None, field: str) -> int | None:
    """Bytes from ``512m``, ``4g``, ``1.5G``, ``2gb``, ``1048576``; None stays None."""
    if value is None:
        return None
    if isinstance(value, (int, float)):
        size = int(value)
    else:
        match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*", str(value), re.IGNORECASE)
        if not match:
            raise SwepipeError(f"containers.{field}: {value!r} is not a size (e.g. 512m, 4g)")
        size = int(float(match.group(1)) * {"": 1, "k": KIB, "m": MIB, "g": GIB, "t": 1024 * GIB}[
            match.group(2).lower()])
    if size <= 0:
        raise SwepipeError(f"containers.{field}: {value!r} must be above 0")
    return size


def format_size(size: int) -> str:
    for unit, factor in (("g", GIB), ("m", MIB), ("k", KIB)):
        if size >= factor and size % factor == 0:
            return f"{size // factor}{unit}"
    return str(size)


def machine_cpus() -> int:
    return os.cpu_count() or 1


def machine_memory() -> int:
    """Total memory in bytes (MemTotal of /proc/meminfo; sysconf elsewhere; 8 GiB if neither answers)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * KIB
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return 8 * GIB


def machine_pid_max() -> int:
    try:
        with open("/proc/sys/kernel/pid_max", encoding="ascii") as pid_max:
            return int(pid_max.read().strip())
    except (OSError, ValueError):
        return 32_768


def container_limits(config: object = None, concurrent: int = 1) -> ContainerLimits:
    """The limits of one container when ``concurrent`` containers run at once; the config's values win. ``config``
    is a Containers, or anything with some of its fields (DockerEnvironment's cpus and memory): read with getattr."""
    concurrent = max(1, concurrent)
    cpus_total = machine_cpus()
    cpus = getattr(config, "cpus", None) or round(min(cpus_total, max(1.0, cpus_total / concurrent)), 2)
    memory = parse_size(getattr(config, "memory", None), "memory") or \
        max(512 * MIB, int(machine_memory() * MEMORY_SHARE / concurrent) // MIB * MIB)
    pids = getattr(config, "pids_limit", None) or \
        max(256, min(max(1024, 32 * cpus_total), int(machine_pid_max() * PIDS_SHARE / concurrent)))
    tmp_size = parse_size(getattr(config, "tmp_size", None), "tmp_size") or \
        max(64 * MIB, min(memory // 4, 2 * GIB) // MIB * MIB)
    file_size = parse_size(getattr(config, "file_size", None), "file_size") or DEFAULT_FILE_SIZE
    disk = parse_size(getattr(config, "disk", None), "disk") or DEFAULT_DISK
    return ContainerLimits(cpus=float(cpus), memory=memory, pids=int(pids), tmp_size=tmp_size,
                           file_size=file_size, disk=disk)


def fill_defaults(config: Containers, concurrent: int) -> Containers:
    """``config`` with every limit it leaves unset given its default for ``concurrent`` containers, so the
    run's config.yaml records the limits its containers really had."""
    limits = container_limits(config, concurrent)
    return config.model_copy(update={
        "cpus": config.cpus or limits.cpus, "memory": config.memory or format_size(limits.memory),
        "pids_limit": config.pids_limit or limits.pids, "tmp_size": config.tmp_size or format_size(limits.tmp_size),
        "file_size": config.file_size or _size_text(limits.file_size), "disk": config.disk or _size_text(limits.disk)})


def _size_text(size: int | None) -> str | None:
    return None if size is None else format_size(size)


# -- the writable layer's quota: only some storage drivers have one ------------------------------------

_quota_lock = threading.Lock()
_quota_supported: bool | None = None  # None: not known yet
QUOTA_DRIVERS = ("btrfs", "zfs", "devicemapper", "windowsfilter")


def disk_quota_supported(client) -> bool | None:
    """Whether ``storage_opt={"size": ...}`` can work: False when the driver surely cannot (overlay2 on
    anything but xfs, vfs, ...), None when only trying tells (xfs needs the pquota mount option)."""
    global _quota_supported
    with _quota_lock:
        if _quota_supported is not None:
            return _quota_supported
        try:
            info = client.info()
        except InfrastructureFault:
            raise
        except Exception:  # noqa: BLE001 - an engine that cannot say gets no quota
            _quota_supported = False
            return False
        driver = info.get("Driver", "")
        status = {str(key): str(value) for key, value in (info.get("DriverStatus") or [])}
        if driver == "overlay2" and status.get("Backing Filesystem", "").lower() == "xfs":
            return None
        if driver in QUOTA_DRIVERS:
            return None
        _quota_supported = False
        return False


def with_disk_quota(create: Callable[..., object], limits: ContainerLimits, client, **options):
    """``create(**options)`` with the writable layer bounded to ``limits.disk`` where the driver allows it.

    A driver that refuses the option is remembered (and the container created without it): detected, never
    a failure.
    """
    global _quota_supported
    from docker.errors import APIError

    if limits.disk and disk_quota_supported(client) is not False:
        try:
            created = create(**options, storage_opt={"size": str(limits.disk)})
        except APIError as error:
            if "storage" not in str(error).lower() and "quota" not in str(error).lower():
                raise
            with _quota_lock:
                _quota_supported = False
        else:
            with _quota_lock:
                _quota_supported = True
            return created
    return create(**options)
