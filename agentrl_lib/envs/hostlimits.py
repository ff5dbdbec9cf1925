"""Host resources an agent's command may use, beyond the per-process rlimits of sandbox.py: a cgroup per command
(memory and process count of all its processes together) and a size-capped working copy (a tmpfs per episode and per
grading copy). Each is detected: where this process cannot make cgroups or mount a tmpfs (a container without
them, no root), `cgroup_parents()` / `tmpfs_problem()` say why in one line and the command runs under the rlimits
alone. Introduced for issue 52 (one agent command must not exhaust the host).

Where this was written (a 2-core container, root, cgroup v1, bubblewrap 0.8.0) both are available.
"""
from __future__ import annotations

import functools
import logging
import os
import signal
import subprocess
import time
from pathlib import Path

_CGROUP_FS = Path("/sys/fs/cgroup")
log = logging.getLogger(__name__)


@functools.lru_cache(maxsize=None)
def _warn_once(what: str) -> None:
    """Say once per process that a host bound is missing here (the sandbox runs under the rlimits alone for it)."""
    log.warning("sandbox: %s; agent commands run without that bound here (book/when_things_go_wrong.md)", what)


@functools.lru_cache(maxsize=1)
def cgroup_parents() -> dict[str, Path] | str:
    """Where this process may make per-command cgroups: {"memory": dir, "pids": dir} (cgroup v1: each controller's
    hierarchy at this process's own cgroup; v2: the unified hierarchy at this process's cgroup, both controllers
    enabled for its children), or one line saying why not (no writable cgroup filesystem: a container without
    one; then only the per-process rlimits bound a command). Probed once per process by making and removing a dir."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError as e:
        return f"/proc/self/cgroup is unreadable ({e.strerror or e})"
    own = {}
    for line in lines:
        _, controllers, path = line.split(":", 2)
        for c in controllers.split(","):
            own[c] = path
    if (_CGROUP_FS / "memory").is_dir() and (_CGROUP_FS / "pids").is_dir() and "memory" in own and "pids" in own:
        parents = {c: _CGROUP_FS / c / own[c].lstrip("/") for c in ("memory", "pids")}  # v1
    elif (_CGROUP_FS / "cgroup.controllers").is_file() and "" in own:  # v2
        base = _CGROUP_FS / own[""].lstrip("/")
        try:
            enabled = (base / "cgroup.subtree_control").read_text().split()
        except OSError as e:
            return f"cgroup v2 at {base} is unreadable ({e.strerror or e})"
        if not {"memory", "pids"} <= set(enabled):
            return f"cgroup v2 at {base} does not enable memory and pids for its children ({' '.join(enabled)})"
        parents = {"memory": base, "pids": base}
    else:
        return "no cgroup memory and pids controllers are mounted at /sys/fs/cgroup"
    for parent in set(parents.values()):
        probe = parent / f"agentrl-sbx-probe-{os.getpid()}"
        try:
            probe.mkdir()
            probe.rmdir()
        except OSError as e:
            return f"cannot make a cgroup under {parent} ({e.strerror or e})"
    return parents


class CommandCgroup:
    """One sandboxed command's cgroup(s): its processes together hold at most sandbox.Limits.total_memory_mb of
    memory and sandbox.Limits.processes processes (the pids controller; RLIMIT_NPROC counts per uid, across every
    sandbox that shares it). `make` returns None where cgroups cannot be made here (cgroup_parents says why); the
    child joins with `enter` (between fork and exec), and `close` kills what is left in it and removes it."""

    _count = 0

    def __init__(self, dirs: dict[str, Path]):
        self.dirs = dirs

    @classmethod
    def make(cls, memory_mb: int, processes: int) -> "CommandCgroup | None":
        """A new cgroup (per controller) limited to `memory_mb` MiB (swap included) and `processes` processes, or
        None where none can be made (cgroup_parents)."""
        parents = cgroup_parents()
        if isinstance(parents, str):
            _warn_once(f"no per-command cgroup: {parents}")
            return None
        cls._count += 1
        name = f"agentrl-sbx-{os.getpid()}-{cls._count}"
        dirs = {c: parents[c] / name for c in ("memory", "pids")}
        v2 = dirs["memory"] == dirs["pids"]
        settings = {"memory": [("memory.max" if v2 else "memory.limit_in_bytes", memory_mb << 20),
                               ("memory.swap.max" if v2 else "memory.memsw.limit_in_bytes", 0 if v2 else
                                memory_mb << 20)],
                    "pids": [("pids.max", processes)]}
        group = cls(dirs)
        try:
            for c, d in dirs.items():
                d.mkdir(exist_ok=True)
                for key, value in settings[c]:
                    if (d / key).exists():
                        (d / key).write_text(str(value))
        except OSError as e:
            group.close()
            _warn_once(f"no per-command cgroup: cannot write its limits ({e})")
            return None
        return group

    def enter(self) -> None:
        for d in set(self.dirs.values()):
            with open(d / "cgroup.procs", "w") as f:
                f.write(str(os.getpid()))

    def close(self) -> None:
        for d in set(self.dirs.values()):
            for _ in range(50):
                try:
                    pids = (d / "cgroup.procs").read_text().split()
                except OSError:
                    break
                for pid in pids:
                    try:
                        os.kill(int(pid), signal.SIGKILL)
                    except (ProcessLookupError, ValueError):
                        pass
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.02)


REPO_MB = 256
"""Size of an episode's working copy (/repo), MiB: `bounded_workdir` mounts a tmpfs of this size (and
REPO_INODES entries) for it. The source repositories take 1-5 MB; RLIMIT_FSIZE alone (64 MiB a file) let one
30-second command fill the host's disk with files."""
REPO_INODES = 50_000
"""Files and directories an episode's working copy may hold (the tmpfs's nr_inodes)."""


@functools.lru_cache(maxsize=1)
def tmpfs_problem() -> str | None:
    """None when this process can mount a size-capped tmpfs (root with CAP_SYS_ADMIN); else one line why not, and
    working copies are plain directories (bounded per file by RLIMIT_FSIZE only). Probed once per process."""
    import tempfile

    d = tempfile.mkdtemp(prefix="agentrl-tmpfs-check-")
    try:
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,nr_inodes=64", "tmpfs", d], capture_output=True,
                           text=True, timeout=20)
        if r.returncode != 0:
            return f"cannot mount a tmpfs here ({' '.join(r.stderr.split())[:120] or r.returncode})"
        subprocess.run(["umount", d], capture_output=True, timeout=20)
        return None
    except (OSError, subprocess.SubprocessError) as e:
        return f"cannot mount a tmpfs here ({e})"
    finally:
        try:
            os.rmdir(d)
        except OSError:
            pass


def bounded_workdir(prefix: str, size_mb: int = REPO_MB, inodes: int = REPO_INODES) -> Path:
    """A new temporary directory for agent-run code, on a tmpfs of `size_mb` MiB and `inodes` entries where one can
    be mounted (tmpfs_problem), else a plain one. Remove it with `release_workdir` (never raises)."""
    import tempfile

    d = Path(tempfile.mkdtemp(prefix=prefix))
    if (why := tmpfs_problem()) is None:
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m,nr_inodes={inodes},mode=0755", "tmpfs",
                            str(d)], capture_output=True, text=True, timeout=20)
        if r.returncode != 0:
            _warn_once(f"no size-capped working copy: mount failed ({' '.join(r.stderr.split())[:120]})")
    else:
        _warn_once(f"no size-capped working copy: {why}")
    return d


def release_workdir(d: str | Path) -> bool:
    """Unmount (if mounted) and remove a `bounded_workdir`; never raises; whether it is gone."""
    from ..fsio import remove_tree

    d = Path(d)
    if os.path.ismount(d):
        r = subprocess.run(["umount", str(d)], capture_output=True, timeout=60)
        if r.returncode != 0:
            subprocess.run(["umount", "-l", str(d)], capture_output=True, timeout=60)
    return remove_tree(d)
