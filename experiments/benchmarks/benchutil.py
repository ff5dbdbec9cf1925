"""What every side-by-side benchmark records next to its numbers: the machine, the library versions, the commit, the
load, the peak memory; and how a result line is written. Imported by the bench_*.py modules beside it."""
from __future__ import annotations

import datetime
import hashlib
import json
import os
import platform
import resource
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path


def machine_info(machine: str = "") -> dict:
    """The run's context: machine (`machine`, e.g. "2-core shared CPU", else "<n>-core CPU"), CPU model, the CPU's
    vector and matrix features that set fp32 / bf16 speed (`cpu_flags`: avx2, avx512f, avx512_bf16, amx_bf16 where
    present), cores, RAM (GiB), `versions` of Python, torch, transformers, trl, peft; torch threads,
    OMP_WAIT_POLICY, git commit, UTC time."""
    import torch

    from agentrl_lib.hardware import cpu_flags, cpu_model
    from agentrl_lib.paths import git_commit

    def ver(pkg: str) -> str:
        try:
            return version(pkg)
        except PackageNotFoundError:
            return ""

    cpu = cpu_model() or platform.processor()
    flags = cpu_flags() or []
    mem_kb = next((int(line.split()[1]) for line in _read("/proc/meminfo").splitlines()
                   if line.startswith("MemTotal:")), 0)
    return {"device": machine or f"{os.cpu_count()}-core CPU", "cpu": cpu,
            "cpu_flags": [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if f in flags],
            "cpus": os.cpu_count(),
            "ram_gib": round(mem_kb / 1024 ** 2, 1), "arch": platform.machine(),
            "versions": {"python": platform.python_version(), "torch": torch.__version__,
                         "transformers": ver("transformers"), "trl": ver("trl"), "peft": ver("peft")},
            "torch_threads": torch.get_num_threads(), "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", ""),
            "commit": git_commit(), "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def peak_rss_gib() -> float:
    """Peak resident memory of this process so far (ru_maxrss), in GiB (1024^3 bytes); child processes (env
    workers) are not counted."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 ** 2  # Linux: ru_maxrss is in KiB


def cpu_seconds() -> float:
    """CPU seconds (user + system, every thread) of this process and of its descendants so far: the ended children
    (getrusage) and every live descendant read from /proc (the env pool's workers, children of a forkserver that is
    this process's child); Linux. Differences of two calls time a stage's work, which a shared machine's load changes
    less than its wall time. A descendant that ended without being waited for by this process is missed."""
    ended = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = time.process_time() + ended.ru_utime + ended.ru_stime
    tick, todo = os.sysconf("SC_CLK_TCK"), ["self"]
    while todo:
        for children in Path(f"/proc/{todo.pop()}/task").glob("*/children"):
            for pid in _read(str(children)).split():
                todo.append(pid)
                fields = _read(f"/proc/{pid}/stat").rsplit(")", 1)[-1].split()  # after the command name: field 3 on
                if len(fields) > 12:
                    total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime (fields 14, 15) in ticks
    return total


def sampled_hash(trajs) -> str:
    """The first 16 hex digits of the SHA-256 of every episode's sampled (policy-mask) token ids, in episode order:
    two rollouts that sampled the same tokens have the same hash (bench_rollout.py, bench_sweep_step.py)."""
    sampled = [[i for i, m in zip(t.ids, t.mask) if m] for t in trajs]
    return hashlib.sha256(repr(sampled).encode()).hexdigest()[:16]


def load1() -> float:
    """The 1-minute load average (how busy a shared machine was), rounded to 0.01."""
    return round(os.getloadavg()[0], 2)


def write_result(path: str | None, row: dict, args=None, seed: int | str = 0) -> None:
    """Append `row` as one JSON line to `path` (parent folders created); nothing when path is None or ''.

    Every results line says how to regenerate it: `config` (the script's parsed arguments, `args`, an
    argparse.Namespace, less --out) and `seed` (the torch / game seed the script fixes; "per repeat" where each
    repeat r seeds r) are added to `row` when absent."""
    if args is not None:
        row.setdefault("config", {k: v for k, v in vars(args).items() if k != "out" and not k.startswith("_")})
    row.setdefault("seed", seed)
    if not path:
        return
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        f.write(json.dumps(row) + "\n")


def game_subset(games_dir: str, names: list[str], out: str) -> str:
    """A game set at `out` holding only the games `names` (manifest names, e.g. game_100002) of `games_dir`, in that
    order: a manifest.json whose paths point at the original files (nothing is copied). Returns `out`.

    Raises: KeyError naming a game that `games_dir` does not hold."""
    from agentrl_lib.envs.base import load_game_set, write_manifest

    games = load_game_set(games_dir)
    by_name = {g.name: g for g in games.games}
    missing = [n for n in names if n not in by_name]
    if missing:
        raise KeyError(f"{games.root} has no game named {', '.join(missing)}; it holds {', '.join(by_name)}")
    Path(out).mkdir(parents=True, exist_ok=True)
    write_manifest(Path(out), games.family, [by_name[n] for n in names],
                   {**games.params, "subset_of": str(games.root), "names": list(names)})
    return out
