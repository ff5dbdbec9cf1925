"""The `swe` family: fix a planted bug in a real Python repository with one bash command per turn, in a sandbox.

A game is a task directory made by `agentrl make-games swe` (envs/swe_tasks.py): task.json (the SWE-Gym fields, the
gold patch, the test lists) and repo/ (the buggy repository). An episode:

    reset(task dir)   a fresh copy of repo/ becomes the episode's working copy, seen as /repo in the sandbox;
                      the observation is the problem statement at the set's difficulty level
    step(reply)       the reply's first ```bash fenced block (mini-swe-agent's text convention) runs in the sandbox
                      (envs/sandbox.py: no network, /repo the only writable path, 30 s, rlimits); the observation is
                      its exit code and output (pytest's wall time and object addresses masked:
                      swe_tasks.mask_run_details), the middle elided past `max_output_chars`
    submit            the command `submit` (or the turn limit, `max_turns`: auto-submit) ends the episode: the agent's
                      diff is applied to a fresh copy with the task's tests restored and the tests run
                      (swe_tasks.score_submission); reward = the run's reward kind, info.won = resolved

Reward kinds (REWARD_KINDS, swe_tasks.reward_kinds): "pass_ratio" (the fraction of FAIL_TO_PASS + PASS_TO_PASS tests
that pass: the Practitioner's Guide's), "resolved" (1 iff every one passes: SWE-Gym's and SWE-smith's success,
SkyRL's binary reward) and "relative" (the pass ratio above the unpatched baseline: a no-op or test-deleting
submission earns 0). The run picks one with reward.kind, the selector of every family (`--reward pass_ratio`,
configs/swe.yaml): the family declares them (EnvFamily.reward_kinds), so the run's envs are built with
`reward=KIND` and the trainer takes their rewards as given (rewards.get_reward). The env's default, without a kind,
is pass_ratio (`agentrl eval` without --reward). All three are written for every submission to
<games dir>/episodes.jsonl. The generic kinds are refused in one line before any model loads (REFUSED_REWARDS,
EnvFamily.check_reward): sparse and env, which the family's own kinds name exactly (sparse is resolved: 1 on the
submission iff won; env is the env's reward as given), and dense, whose win cap (rewards.dense_turn_rewards) rescales
a non-won episode's total to 1 - m/2, m its smallest positive step: a submission is the episode's one step, so a pass
ratio p > 2/3 becomes 1 - p/2, which falls as p rises. Before issue 50 the kind was a second selector,
env.swe_reward / --swe-reward (and a task set's own kind); config.fold_swe_reward reads the records made then.

A reply without a fenced block is an invalid turn (info.valid False: reward.format_penalty applies) and costs a turn.
Env faults (the sandbox or a copy fails) raise, so the pool ends that episode as an env error, never rewarded.

Sources: mini-swe-agent (the one-bash-block reply format, output truncation with a note), SWE-agent / SWE-Gym
(the task fields), the Practitioner's Guide (arXiv 2510.01132) §SWE: 8 turns, 30 s per command, auto-submit at
the turn limit, reward = fraction of FAIL_TO_PASS and PASS_TO_PASS tests passing. Introduced for issue 26.
"""
from __future__ import annotations

import json
import logging
import os
import re
import shutil
import time
from pathlib import Path

from . import EnvFamily, register_family
from .base import GameLoadError, reuse_game_set, write_manifest
from .protocol import GameRecord, GameSet, StepInfo, StepResult
from .sandbox import Limits, bounded_workdir, release_workdir, require_sandbox, run_sandboxed
from .swe_tasks import mask_run_details, pytest_site, score_submission

log = logging.getLogger(__name__)

REWARD_KINDS = ("pass_ratio", "resolved", "relative")
"""The env's reward kinds (swe_tasks.reward_kinds), the reward.kind values a run on swe games takes
(EnvFamily.reward_kinds); the first is the env's default."""
LEVELS = (1, 2, 3)
"""Difficulty levels of the problem statement (swe_tasks module docstring)."""
COMMAND_TIMEOUT_S = 30.0
"""Wall-clock seconds per agent command (the Practitioner's Guide)."""
STEP_TIMEOUT_S = 2 * COMMAND_TIMEOUT_S + 10.0
"""The pool watchdog one swe step needs (EnvFamily.step_timeout_s), seconds: the turn-limit step runs a command
(30 s) and then the auto-submit's test run (swe_tasks.TEST_WALL_S, 30 s), plus 10 s for the copies. Under the
default EnvConfig.step_timeout_s (30 s) a run's pool uses this; a larger --step-timeout wins."""
SUBMIT = "submit"

SYSTEM_PROMPT = ("You are a software engineer fixing a bug in a Python repository, the current directory. Each "
                 "reply is one bash command in a fenced block, for example:\n```bash\npython -m pytest -q "
                 "tests/test_x.py\n```\nIts output comes back as the next message. Commands run in a sandbox "
                 "without network, 30 seconds each; edit files with sed, patch or python. Do not edit the tests. "
                 "When the bug is fixed, reply:\n```bash\nsubmit\n```")

_FENCE = re.compile(r"```(?:bash|sh|shell)?[ \t]*\n(.*?)```", re.S)


def parse_command(reply: str) -> str | None:
    """The bash command of a reply: the content of its first ``` fenced block (```bash, ```sh or bare),
    stripped; a reply that is just the word `submit` is a submission too. None when there is no block (or it is
    empty): the turn is invalid.

    Source: mini-swe-agent's `action_regex` (one ```bash block per reply; it rejects replies with none)."""
    m = _FENCE.search(reply)
    if m is None:
        return SUBMIT if reply.strip().strip("`").strip().lower() == SUBMIT else None
    command = m.group(1).strip()
    return command or None


def truncate(text: str, limit: int) -> str:
    """`text` when it has at most `limit` characters; else its head and tail (limit/2 each) around a note that says
    how many characters were elided and how to see them (mini-swe-agent's output truncation)."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return (f"{text[:half]}\n[... {len(text) - 2 * half} characters elided: the output is longer than {limit}; "
            f"use head, tail, grep or sed -n to see parts of it ...]\n{text[-half:]}")


def _load_task(game: str) -> tuple[dict, Path, dict]:
    d = Path(game)
    try:
        task = json.loads((d / "task.json").read_text())
        manifest = json.loads((d.parents[1] / "manifest.json").read_text())
    except (OSError, ValueError, IndexError) as e:
        raise GameLoadError(f"swe task {game} cannot be read ({e}); regenerate the set with agentrl make-games swe")
    if not (d / "repo").is_dir():
        raise GameLoadError(f"swe task {game} has no repo/ directory; regenerate the set")
    return task, d / "repo", manifest.get("params", {})


class SweEnv:
    """One software-engineering episode at a time (module docstring).

    Args:
        max_turns: turns before auto-submit (EnvConfig.max_turns; the paper's 8). Use the run's max_turns.
        reward: a REWARD_KINDS entry, the reward of each submission (StepResult.reward, info.score); None / "" for
            the first, pass_ratio. A run passes its reward.kind (EnvFamily.env_kwargs: `agentrl train --reward
            resolved`).
        command_timeout_s: wall-clock limit of one command, seconds.
        step_timeout_s: the pool's watchdog per step (EnvFamily.watchdog_s of EnvConfig.step_timeout_s, at least
            STEP_TIMEOUT_S in a run): when given, a command and the test run of an auto-submit each get at most
            (step_timeout_s - 5) / 2 s, so a step ends before the watchdog (70 s: the full 30 s per command).
        max_output_chars: longest observation of a command's output before the middle is elided.
        log: append each submission's rewards to <games dir>/episodes.jsonl.
    Raises: sandbox.SandboxUnavailable (one line: why) when no sandbox can be made here; ValueError for a bad
        argument.
    """

    def __init__(self, max_turns: int = 8, reward: str | None = None, command_timeout_s: float = COMMAND_TIMEOUT_S,
                 step_timeout_s: float | None = None, max_output_chars: int = 2000, log: bool = True):
        reward = reward or REWARD_KINDS[0]
        if reward not in REWARD_KINDS:
            raise ValueError(f"swe reward must be one of {REWARD_KINDS} (got {reward!r})")
        if max_turns < 1 or max_output_chars < 100 or command_timeout_s <= 0:
            raise ValueError("swe env: max_turns >= 1, max_output_chars >= 100 and command_timeout_s > 0 are needed")
        require_sandbox()

        self.max_turns, self.reward, self.max_output_chars, self.log = max_turns, reward, max_output_chars, log
        self.wall_s = command_timeout_s
        if step_timeout_s is not None:
            self.wall_s = max(1.0, min(command_timeout_s, (step_timeout_s - 5.0) / 2.0))
        self.site = pytest_site()
        self.work: Path | None = None
        self.done = True

    # plumbing: the episode's working copy
    def _clean(self) -> None:
        """Remove the episode's working copy, whatever the agent made in it (sandbox.release_workdir: unmounted,
        then fsio.remove_tree: any depth, any permissions; it never raises, so one agent's tree cannot break this
        slot's later resets)."""
        if self.work is not None:
            if not release_workdir(self.work.parent):
                log.warning("swe: could not remove the episode's working copy %s; left behind", self.work.parent)
            self.work = None

    def reset(self, game: str) -> StepResult:
        """Start the task in directory `game`: a fresh working copy, the problem statement as observation.
        Raises GameLoadError when the task cannot be read."""
        self._clean()
        self.game = game
        self.task, self.base, params = _load_task(game)
        self.kind = self.reward
        self.level = str(params.get("level", 1))
        self.work = bounded_workdir("agentrl-swe-ep-") / "repo"  # a size-capped tmpfs where one can be mounted
        shutil.copytree(self.base, self.work, symlinks=True)
        self.turns, self.done, self.score = 0, False, 0.0
        statement = self.task["problem_statement"][self.level]
        obs = (f"{statement}\n\nThe repository is the current directory. You have {self.max_turns} turns; one bash "
               "command per reply in a ```bash block; reply ```bash\nsubmit\n``` when done.")
        return StepResult(obs, 0.0, False, self._info(True, False))

    def _info(self, valid: bool, won: bool) -> StepInfo:
        return StepInfo(won=won, lost=self.done and not won, score=self.score, max_score=1.0, admissible=[],
                        valid=valid, expert_action=None, objective="Fix the bug so that the repository's tests pass.")

    def step(self, action: str) -> StepResult:
        """Run the bash command in the reply `action` (parse_command), or submit. Raises (an env fault) when the
        sandbox cannot run; an agent's command that fails, hangs or floods is an observation, not a fault."""
        if self.done:
            return StepResult("The episode is over.", 0.0, True, self._info(False, False))
        self.turns += 1
        command = parse_command(action)
        valid = command is not None
        if command == SUBMIT or command is not None and command.splitlines()[0].strip() == SUBMIT:
            return self._submit("agent", "")
        if command is None:
            obs = ("No command found: reply with exactly one bash command in a fenced block, ```bash\n<command>\n"
                   "```, or ```bash\nsubmit\n``` to submit.")
        else:
            r = run_sandboxed(command, self.work, Limits(wall_s=self.wall_s), site=self.site)
            note = (f"[killed: the command ran longer than {self.wall_s:g} s]" if r.timed_out else
                    "[killed: the command wrote too much output]" if r.output_capped else f"exit code {r.returncode}")
            obs = f"{note}\n{truncate(mask_run_details(r.output), self.max_output_chars)}".rstrip()
        if self.turns >= self.max_turns:
            return self._submit("auto", obs + f"\n\nTurn limit ({self.max_turns}) reached: submitted automatically.",
                                valid)
        return StepResult(obs, 0.0, False, self._info(valid, False))

    def _submit(self, how: str, obs: str, valid: bool = True) -> StepResult:
        t0 = time.perf_counter()
        res = score_submission(self.task, self.base, self.work, self.site)
        reward = res[self.kind]
        won = bool(res["resolved"])
        self.done, self.score = True, reward
        self._write_log(how, res, time.perf_counter() - t0)
        self._clean()
        text = (f"Submitted ({how}). Tests passing: {res['n_pass']}/{res['n_total']} "
                f"(pass_ratio {res['pass_ratio']:.3f}, relative {res['relative']:.3f}, resolved "
                f"{'yes' if won else 'no'}).")
        if res["dropped"]:
            text += f" Changes to protected files were ignored: {', '.join(res['dropped'][:5])}."
        if res["skipped"]:
            text += f" Not part of the submission (over the grader's bounds): {'; '.join(res['skipped'][:3])}."
        return StepResult(f"{obs}\n\n{text}".strip(), reward, True, self._info(valid, won))

    def _write_log(self, how: str, res: dict, seconds: float) -> None:
        if not self.log:
            return
        row = {"instance_id": self.task["instance_id"], "submitted": how, "turns": self.turns,
               "reward_kind": self.kind, **{k: res[k] for k in ("pass_ratio", "resolved", "relative", "n_pass",
                                                                   "n_total", "fail_to_pass_passed", "dropped",
                                                                   "test_seconds", "cached")},
               "diff_chars": len(res["diff"]), "submit_seconds": round(seconds, 3), "time": time.time()}
        try:
            fd = os.open(Path(self.game).parents[1] / "episodes.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, (json.dumps(row) + "\n").encode())
            finally:
                os.close(fd)
        except OSError:  # a read-only games dir: the observation still carries the rewards
            pass

    def close(self) -> None:
        self._clean()


# ---------------------------------------------------------------------------------------------------------------
# the walkthrough (SFT) and the game maker

def walkthrough(task: dict) -> list[str]:
    """Expert replies for a task, from its gold patch: run a failing test → read the function around the bug →
    apply the fix (`patch -p1` with the gold diff) → run the tests → submit. Each reply: a short sentence and one
    ```bash block (the format parse_command reads)."""
    lo, hi = task["function_lines"]
    line = task["mutation"]["line"]
    a, b = max(lo, line - 12), min(hi, line + 12)
    test_files = " ".join(task["test_files"])
    return [
        f"Let me run a failing test.\n```bash\npython -m pytest -q -p no:cacheprovider {task['FAIL_TO_PASS'][0]} "
        "2>&1 | tail -n 25\n```",
        f"Let me read the code of `{task['function']}`.\n```bash\nsed -n '{a},{b}p' {task['files'][0]}\n```",
        f"I will fix the bug.\n```bash\npatch -p1 <<'EOF'\n{task['patch']}EOF\n```",
        f"Let me run the tests.\n```bash\npython -m pytest -q -p no:cacheprovider {test_files} 2>&1 | tail -n 3\n```",
        f"The tests pass.\n```bash\n{SUBMIT}\n```",
    ]


def task_files(path: str) -> list[Path]:
    """The files a swe game needs (EnvFamily.game_files): task.json and repo/. Raises GameLoadError when `path`
    is not a task directory."""
    p = Path(path)
    if p.suffix or p.parent.name != "tasks":
        raise GameLoadError(f"{path} is not a swe task directory (games dir/tasks/<instance_id>)")
    return [p / "task.json", p / "repo"]


def make_swe_games(out, n: int, seed: int = 0, force: bool = False, split: str = "train", level: int = 1,
                   packages: str = "") -> GameSet:
    """Make `n` validated swe tasks (swe_tasks.generate_tasks) in `out`: tasks/<instance_id>/{task.json, repo/}
    and manifest.json (walkthrough = `walkthrough(task)`; params n, seed, split, level, packages + generation
    stats). A set has no reward kind: the run's reward.kind picks it (sets made before issue 50 carry a param
    "reward", which nothing reads).

    Args:
        split: "train" / "valid_seen" (train functions) or "valid_unseen" (held-out functions; swe_tasks.SPLITS).
        level: the problem statement's difficulty level (LEVELS): 1 names file, function and failing tests;
            2 shows the failing tests' output; 3 an issue-style text.
        packages: comma-separated source packages (swe_tasks.SOURCES: toolz, mpmath, boltons); "" = all of them.
    Raises: ValueError for a bad level / split / package; sandbox.SandboxUnavailable (no sandbox here);
        swe_tasks.TaskGenerationError (a source package missing or at another version)."""
    from .base import load_game_set
    from .swe_tasks import SOURCES, SPLITS, generate_tasks, max_tasks

    if level not in LEVELS:
        raise ValueError(f"swe --level must be one of {LEVELS} (got {level!r})")
    if split not in SPLITS:
        raise ValueError(f"swe --split must be one of {SPLITS} (got {split!r})")
    names = tuple(p.strip() for p in (packages or ",".join(SOURCES)).split(",") if p.strip())
    if unknown := [p for p in names if p not in SOURCES]:
        raise ValueError(f"swe --packages: unknown {unknown}; known: {', '.join(SOURCES)}")
    require_sandbox()
    out = Path(out)
    params = {"n": n, "seed": seed, "split": split, "level": level, "packages": ",".join(names)}
    if (old := reuse_game_set(out, "swe", params, force)) is not None:
        return old
    if n > (most := max_tasks(split, names)):
        raise ValueError(f"swe --n {n} is more than the {most} tasks the {split} split of {', '.join(names)} can give "
                         "(one per function and mutation site; fewer pass validation): pass --n at most "
                         f"{most}, or more --packages")
    if (out / "tasks").exists():
        shutil.rmtree(out / "tasks")
    for stale in ("episodes.jsonl", ".agentrl-game-check.json"):
        (out / stale).unlink(missing_ok=True)
    tasks, stats = generate_tasks(out, n, seed, split, packages=names)
    games = [GameRecord(path=str(out / "tasks" / t["instance_id"]), name=t["instance_id"], seed=seed + i,
                        max_score=1.0, walkthrough=walkthrough(t),
                        params={"function": f"{t['module']}:{t['function']}", "mutation": t["mutation"]["kind"],
                                "n_tests": len(t["FAIL_TO_PASS"]) + len(t["PASS_TO_PASS"]),
                                "tests_source": t["tests_source"]})
             for i, t in enumerate(tasks)]
    write_manifest(out, "swe", games, {**params, "generation": stats})
    return load_game_set(out)


REFUSED_REWARDS = {
    "dense": "its win cap rescales a submission's pass ratio p > 2/3 that did not resolve the task to 1 - p/2, so a "
             "no-op scores above a partial fix",
    "sparse": "on swe games it is exactly resolved (1 on the submission iff every listed test passes): name it so",
    "env": "the env's reward is the kind the run names: name it",
}
"""Generic reward.kind values a run on swe games refuses, with why (EnvFamily.refused_rewards; module docstring);
any other kind but REWARD_KINDS is refused too (EnvFamily.check_reward)."""

register_family(EnvFamily(name="swe", make_env=SweEnv, make_games=make_swe_games, system_prompt=SYSTEM_PROMPT,
                          options={"max_turns": "max_turns", "step_timeout_s": "step_timeout_s"},
                          game_id="file", game_files=task_files, reply_as_action=True, step_timeout_s=STEP_TIMEOUT_S,
                          reward_kinds=REWARD_KINDS, refused_rewards=REFUSED_REWARDS))
