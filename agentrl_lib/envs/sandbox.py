"""Run agent-written commands in a bubblewrap sandbox: no network, one writable directory, resource limits.

Every command of the `swe` family (the agent's bash commands and every test run) goes through `run_sandboxed`:

    bwrap  --unshare-net --unshare-pid --unshare-ipc --unshare-uts   no network (only a private loopback), own pids
           --ro-bind /usr /usr  (+ /bin /lib /lib64 /sbin symlinks)  the system's programs, read-only
           --ro-bind <python prefix> /opt/python                     this interpreter, its site-packages hidden
           --ro-bind <each module of `site`> /opt/swe/site/...       e.g. pytest and its dependencies, read-only
           --bind <workdir> /repo                                    the ONLY writable path (plus a private /tmp)
           --dev /dev --proc /proc --size 256M --tmpfs /tmp --clearenv   a /tmp of Limits.tmp_mb (bwrap has --size)
           --seccomp FD                                              no user namespaces inside (no_userns_filter)
      setpriv --reuid U --regid U --clear-groups                     an unprivileged uid, no capabilities
        setarch -R                                                   address-space randomisation off (NO_ASLR)
          bash -c COMMAND                                            under RLIMIT_CPU / AS / NPROC / FSIZE, in a
                                                                     cgroup: memory and processes of all together

Nothing else of the host is visible: not /work, /root, /home or /etc (so neither the task's gold patch nor the
installed, unmutated package can be read). The uid U is drawn from the workdir's path (100000-199999), so that
concurrent sandboxes rarely share a process count (RLIMIT_NPROC counts per uid; root is exempt from it, which is
why the command does not run as root). The wall-clock limit kills the whole sandbox (bwrap's pid namespace dies with
its init); output past `Limits.output_bytes` kills it too.

Host resources (issue 52; envs/hostlimits.py): the command's processes together hold at most
Limits.total_memory_mb and Limits.processes (a cgroup per command, where cgroups can be made: cgroup_parents), the
swe family's working copies and grading copies live on a tmpfs of hostlimits.REPO_MB (bounded_workdir, where a tmpfs
can be mounted: tmpfs_problem), /tmp is Limits.tmp_mb where bwrap has --size (bwrap_features), and no user namespace
can be made inside (a seccomp filter on x86_64 and aarch64: bwrap's --disable-userns needs --unshare-user, which as
root would map the sandbox's uid to the host's root). Each is detected; where one is missing the rlimits remain.

Where bubblewrap cannot run (not installed, no permission to create namespaces), `sandbox_problem()` says why in one
line and `require_sandbox()` raises SandboxUnavailable with that line: the `swe` family refuses to start rather
than run agent code unconfined.

Sources: bubblewrap (github.com/containers/bubblewrap); mini-swe-agent's `extra/bubblewrap.py` environment (one
bwrap call per command); NOTES.md "Sandboxing agent-written code". Introduced for issue 26 (the `swe` family).
"""
from __future__ import annotations

import functools
import hashlib
import os
import resource
import selectors
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from .base import GameLoadError
from .hostlimits import CommandCgroup, bounded_workdir, release_workdir  # noqa: F401 (swe's imports)

SANDBOX_ROOT = "/repo"
"""Where the workdir appears inside the sandbox (the command's working directory)."""
SITE = "/opt/swe/site"
"""Where the modules passed as `site` appear inside the sandbox (on PYTHONPATH)."""


class SandboxUnavailable(GameLoadError):
    """No sandbox can be made on this machine; the message says why in one line (a GameLoadError, so the CLI and
    the game check report it as one line)."""


@dataclass(frozen=True)
class Limits:
    """Resource limits of one sandboxed command (each is enforced by the kernel or by this process)."""

    wall_s: float = 30.0
    """Wall-clock seconds before the whole sandbox is killed (the Practitioner's Guide: 30 s per command)."""
    cpu_s: int = 30
    """CPU seconds per process (RLIMIT_CPU; SIGXCPU/SIGKILL past it)."""
    memory_mb: int = 2048
    """Address space per process in MiB (RLIMIT_AS); a Python test run needs ~100-300."""
    processes: int = 64
    """Processes and threads of the sandbox's uid (RLIMIT_NPROC): a fork bomb stops here."""
    file_mb: int = 64
    """Largest file a process may write, MiB (RLIMIT_FSIZE; SIGXFSZ past it)."""
    output_bytes: int = 1_000_000
    """Bytes of stdout+stderr read; past it the sandbox is killed and the output marked capped."""
    total_memory_mb: int = 4096
    """Memory of the whole command, every process together, MiB (a per-command cgroup's memory limit, where cgroups
    can be made here: `hostlimits.cgroup_parents()` says why not); RLIMIT_AS bounds each process only, 64 of them
    at 2 GiB each."""
    tmp_mb: int = 256
    """Size of the sandbox's private /tmp, MiB (bwrap --size, where the installed bwrap has it: `bwrap_features()`);
    without it /tmp is a tmpfs as large as half the host's memory."""


@dataclass
class RunResult:
    """What one sandboxed command did."""

    output: str
    """stdout and stderr interleaved, decoded as UTF-8 (bad bytes replaced), at most Limits.output_bytes bytes."""
    returncode: int | None
    """The command's exit status (negative: killed by that signal; None when this process killed the sandbox)."""
    timed_out: bool
    """Killed at Limits.wall_s."""
    output_capped: bool
    """Killed because it wrote more than Limits.output_bytes."""
    seconds: float
    """Wall time of the whole call, sandbox start included."""


def _uid_for(workdir: Path) -> int:
    return 100000 + int(hashlib.sha1(str(workdir).encode()).hexdigest(), 16) % 100000


def _own(workdir: Path, uid: int) -> None:
    """Give the sandbox's uid the workdir tree (files copied in by this process are root's)."""
    if workdir.stat().st_uid == uid:
        return
    for root, dirs, files in os.walk(workdir):
        os.chown(root, uid, uid, follow_symlinks=False)
        for name in dirs + files:
            os.chown(os.path.join(root, name), uid, uid, follow_symlinks=False)


def _python_mounts() -> list[str]:
    """This interpreter's install, read-only at /opt/python, with its site-packages hidden (a tmpfs over it)."""
    prefix = Path(sys.base_prefix)
    ver = f"python{sys.version_info.major}.{sys.version_info.minor}"
    args = ["--perms", "0755", "--dir", "/opt", "--ro-bind", str(prefix), "/opt/python"]
    for sub in (f"lib/{ver}/site-packages", f"lib/{ver}/dist-packages"):
        if (prefix / sub).is_dir():
            args += ["--tmpfs", f"/opt/python/{sub}"]
    return args


def _site_mounts(site: dict[str, Path]) -> list[str]:
    args = ["--perms", "0755", "--dir", "/opt/swe", "--perms", "0755", "--dir", SITE]
    for name, path in site.items():
        args += ["--ro-bind", str(path), f"{SITE}/{name}"]
    return args


@functools.lru_cache(maxsize=1)
def bwrap_features() -> frozenset[str]:
    """The optional bwrap options the installed bwrap has, of --size (tmpfs size: 0.5.0+) and --disable-userns
    (0.8.0+), read from `bwrap --help` once per process."""
    try:
        text = subprocess.run(["bwrap", "--help"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return frozenset()
    return frozenset(opt for opt in ("--size", "--disable-userns") if opt in text)


_SYSCALLS = {"x86_64": (0xC000003E, {"clone": 56, "unshare": 272, "clone3": 435}),
             "aarch64": (0xC00000B7, {"clone": 220, "unshare": 97, "clone3": 435})}
"""Machine → (its AUDIT_ARCH, the syscall numbers the no-user-namespace filter inspects)."""


def no_userns_filter() -> bytes | None:
    """A seccomp BPF program (bwrap --seccomp) that makes unshare and clone with CLONE_NEWUSER fail with EPERM,
    clone3 with ENOSYS (its flags sit in memory a filter cannot read; glibc then falls back to clone), and any
    syscall of another ABI (x32, i386) with EPERM; None on a machine not in _SYSCALLS (no filter there).

    Why a filter: the sandboxed uid could create user namespaces (`unshare -U -r` made it "root" in one: a larger
    kernel surface; issue 52). bwrap's own --disable-userns (0.8.0+, see bwrap_features) requires --unshare-user,
    which, run as root, maps the sandbox's uid to the host's root: the processes would no longer count in their own
    uid's RLIMIT_NPROC and their files would be root's. The filter keeps the unprivileged host uid."""
    import platform
    import struct

    if (entry := _SYSCALLS.get(platform.machine())) is None:
        return None
    arch, nr = entry
    allow, eperm, enosys = 0x7FFF0000, 0x00050000 | 1, 0x00050000 | 38
    ld, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    prog = [(ld, 0, 0, 4), (jeq, 0, 9, arch), (ld, 0, 0, 0), (jge, 7, 0, 0x40000000), (jeq, 7, 0, nr["clone3"]),
            (jeq, 2, 0, nr["unshare"]), (jeq, 1, 0, nr["clone"]), (ret, 0, 0, allow),
            (ld, 0, 0, 16), (jset, 1, 0, 0x10000000), (ret, 0, 0, allow),  # args[0] & CLONE_NEWUSER
            (ret, 0, 0, eperm), (ret, 0, 0, enosys)]
    return b"".join(struct.pack("<HBBI", *ins) for ins in prog)


def bwrap_args(workdir: Path, uid: int, site: dict[str, Path] | None = None, limits: Limits = Limits(),
               seccomp_fd: int | None = None) -> list[str]:
    """The bwrap command line (up to, not including, the command) for `workdir` and uid `uid` (module docstring).
    /tmp is `limits.tmp_mb` in size where bwrap has --size (bwrap_features)."""
    args = ["bwrap", "--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            "--die-with-parent", "--new-session", "--hostname", "sandbox",
            "--ro-bind", "/usr", "/usr"]
    for link in ("bin", "lib", "lib64", "sbin"):
        target = os.readlink(f"/{link}") if os.path.islink(f"/{link}") else None
        if target is not None:
            args += ["--symlink", target, f"/{link}"]
        elif os.path.isdir(f"/{link}"):
            args += ["--ro-bind", f"/{link}", f"/{link}"]
    args += _python_mounts() + _site_mounts(site or {})
    tmp_size = ["--size", str(limits.tmp_mb << 20)] if "--size" in bwrap_features() else []
    args += ["--dev", "/dev", "--proc", "/proc", "--perms", "1777", *tmp_size, "--tmpfs", "/tmp",
             "--bind", str(workdir), SANDBOX_ROOT, "--chdir", SANDBOX_ROOT, "--clearenv"]
    env = {"PATH": "/opt/python/bin:/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8", "TERM": "dumb",
           "PAGER": "cat", "GIT_PAGER": "cat", "LD_LIBRARY_PATH": "/opt/python/lib", "PYTHONPATH": SITE,
           "PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0"}
    for k, v in env.items():
        args += ["--setenv", k, v]
    if seccomp_fd is not None:
        args += ["--seccomp", str(seccomp_fd)]
    args += ["--", "setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--"]
    return args


def _set_limits(limits: Limits, cgroup: "CommandCgroup | None" = None):
    def apply() -> None:  # runs in the child between fork and exec
        if cgroup is not None:
            cgroup.enter()  # this process and every descendant (bwrap, the command) count in its limits
        mb = 1024 * 1024
        resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_s, limits.cpu_s + 1))
        resource.setrlimit(resource.RLIMIT_AS, (limits.memory_mb * mb, limits.memory_mb * mb))
        resource.setrlimit(resource.RLIMIT_NPROC, (limits.processes, limits.processes))
        resource.setrlimit(resource.RLIMIT_FSIZE, (limits.file_mb * mb, limits.file_mb * mb))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    return apply


NO_ASLR = ["setarch", "-R"] if shutil.which("setarch") else []
"""The command's prefix that turns address-space layout randomisation off inside the sandbox (util-linux's setarch;
nothing where it is missing). CPython's object addresses, which pytest prints in assertion messages (whole, "at
0x7f58...>", or cut by its repr limit, "....x7f58...>"), then repeat from run to run on one machine, and so do an
swe episode's observations. ASLR hardens privileged targets against memory exploits; the sandbox holds none (an
unprivileged uid, no network, one writable directory)."""


def _filter_fd() -> int | None:
    """A file descriptor (at offset 0) holding no_userns_filter()'s program for bwrap --seccomp, or None."""
    prog = no_userns_filter()
    if prog is None:
        return None
    fd = os.memfd_create("agentrl-seccomp")
    os.write(fd, prog)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def run_sandboxed(command: str, workdir: str | Path, limits: Limits = Limits(),
                  site: dict[str, Path] | None = None, stdin: bytes | None = None) -> RunResult:
    """Run `command` with bash in a sandbox whose only writable path is `workdir` (seen as /repo, the cwd).

    Args:
        command: a bash command line (any text; run as `bash -c command`).
        workdir: an existing directory; its tree is chowned to the sandbox's uid on first use.
        limits: wall, CPU, memory, process, file-size and output limits (Limits).
        site: module name → file or directory, bound read-only under /opt/swe/site (on PYTHONPATH), e.g. pytest.
        stdin: bytes the command reads on its standard input (at most a pipe's buffer, 64 KiB), then end of file;
            None: no input. The swe grader passes its per-run nonce this way: unlike the environment, a consumed pipe
            leaves no copy that the code under test could read back (/proc/self/environ keeps the environment).
    Returns: RunResult (output, return code, timed_out, output_capped, seconds).
    Raises: SandboxUnavailable when bubblewrap cannot run here (`sandbox_problem`); NotADirectoryError for a
        missing workdir.
    """
    require_sandbox()
    return _run(command, Path(workdir), limits, site, stdin)


def _run(command: str, workdir: Path, limits: Limits, site: dict[str, Path] | None,
         stdin: bytes | None = None) -> RunResult:
    workdir = workdir.resolve()
    if not workdir.is_dir():
        raise NotADirectoryError(f"sandbox workdir {workdir} is not a directory")
    uid = _uid_for(workdir)
    _own(workdir, uid)
    t0 = time.perf_counter()
    cgroup = CommandCgroup.make(limits.total_memory_mb, limits.processes)
    seccomp = _filter_fd()
    try:
        proc = subprocess.Popen(bwrap_args(workdir, uid, site, limits, seccomp) + NO_ASLR + ["bash", "-c", command],
                                stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, preexec_fn=_set_limits(limits, cgroup),
                                start_new_session=True, pass_fds=() if seccomp is None else (seccomp,))
    finally:
        if seccomp is not None:
            os.close(seccomp)
    if stdin is not None:  # small: fits the pipe's buffer, so the write never waits on the child
        try:
            proc.stdin.write(stdin[:65536])
            proc.stdin.close()
        except BrokenPipeError:  # the command exited without reading it
            pass
    chunks, size, timed_out, capped = [], 0, False, False
    deadline = t0 + limits.wall_s
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    try:
        while True:
            left = deadline - time.perf_counter()
            if left <= 0:
                timed_out = True
                break
            if not sel.select(timeout=min(left, 1.0)):
                continue
            data = os.read(proc.stdout.fileno(), 65536)
            if not data:
                break
            chunks.append(data[:limits.output_bytes - size])
            size += len(data)
            if size > limits.output_bytes:
                capped = True
                break
    finally:
        sel.close()
        killed = timed_out or capped
        if killed:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        if cgroup is not None:
            cgroup.close()
    return RunResult(output=b"".join(chunks).decode("utf-8", "replace"),
                     returncode=None if killed else proc.returncode, timed_out=timed_out, output_capped=capped,
                     seconds=time.perf_counter() - t0)


@functools.lru_cache(maxsize=1)
def sandbox_problem() -> str | None:
    """None when a sandbox can be made here; else one line saying why not (cached for the process)."""
    if not sys.platform.startswith("linux"):
        return f"the swe sandbox needs Linux (bubblewrap); this is {sys.platform}"
    for tool, pkg in (("bwrap", "bubblewrap"), ("setpriv", "util-linux"), ("bash", "bash")):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed (Debian: apt-get install -y {pkg}, or `make sandbox`)"
    if os.geteuid() != 0:
        return ("the swe sandbox runs bubblewrap as root (it drops to an unprivileged uid inside, so that "
                "RLIMIT_NPROC applies); this process is not root")
    import tempfile
    with tempfile.TemporaryDirectory(prefix="agentrl-sandbox-check-") as d:
        try:
            r = _run("echo ok", Path(d), Limits(wall_s=20), None)
        except OSError as e:
            return f"bubblewrap could not start: {e}"
        if r.returncode != 0 or r.output.strip() != "ok":
            detail = " ".join(r.output.split())[:200] or f"exit status {r.returncode}"
            return f"bubblewrap cannot make a sandbox here: {detail}"
    return None


def require_sandbox() -> None:
    """Raise SandboxUnavailable (one line: why) unless `sandbox_problem()` is None."""
    problem = sandbox_problem()
    if problem is not None:
        raise SandboxUnavailable(problem)
