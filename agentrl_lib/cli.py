"""`agentrl` command line: make-games, eval, sft, train, demo, sweep, report. Each subcommand calls the library
functions the notebooks call.

    agentrl make-games textworld --challenge tw-cooking --challenge-args "--recipe 1 --take 1 --go 1" --n 16 --out DIR
    agentrl make-games textworld --world-size 2 --nb-objects 3 --quest-length 4 --n 16 --seed 0 --out DIR
    agentrl eval --model embedded --games DIR --out eval.json
    agentrl sft --model embedded --games DIR --out runs/sft
    agentrl train --algo ppo --reward dense --games DIR --init runs/sft --out runs/ppo
    agentrl demo
    agentrl sweep --base CONFIG.yaml --grid algo.advantage=gae,grpo,rloo reward.kind=sparse,dense --seeds 0,1,2 \
        --init runs/sft --eval-games DIR --out results/NAME.jsonl
    agentrl report results/NAME.jsonl --metric eval.success_rate --compare algo.advantage --by reward.kind

Three modules: this one builds the parser (build_parser; every config field's flag comes from flags.py, generated from
the config dataclasses: `agentrl train`'s from RunConfig, `agentrl sft`'s from SFTConfig) and holds the error policy
(main: bad input → one line `agentrl CMD: error: ...` and exit 2, never a traceback; a bug keeps its traceback);
commands.py holds what each subcommand does.
"""
from __future__ import annotations

import argparse
import errno
import logging
import os
import signal
import sys

from . import commands
from .commands import MAKE_GAMES_N_MAX
from .config import ALGO_PRESETS, MIXED_PRECISIONS, SECTIONS, ConfigError, ModelConfig, swe_reward_gone
from .flags import SFT_SECTIONS, add_config_flags, choices_for, field_docs, join_negative_numbers


def build_parser() -> argparse.ArgumentParser:
    from .envs import family_names

    p = argparse.ArgumentParser(prog="agentrl", description="Multi-turn agentic RL for LLM agents in text games.")
    sub = p.add_subparsers(dest="cmd", required=True)

    g = sub.add_parser("make-games", help="generate a set of games with a manifest.json")
    g.add_argument("family", choices=family_names())
    g.add_argument("--out", required=True)
    g.add_argument("--n", type=int, default=16, help=f"number of games (1 to {MAKE_GAMES_N_MAX})")
    g.add_argument("--seed", type=int, default=0, help="game i uses seed + i (0 to 2**32 - 1)")
    g.add_argument("--challenge", choices=["tw-simple", "tw-cooking", "tw-coin_collector", "tw-treasure_hunter"],
                   help="textworld: a tw-make challenge instead of custom games")
    g.add_argument("--challenge-args", help='textworld: e.g. "--recipe 1 --take 1 --go 1" or '
                                            '"--rewards dense --goal detailed"')
    g.add_argument("--world-size", type=int, help="textworld custom: rooms (default 2)")
    g.add_argument("--nb-objects", type=int, help="textworld custom: objects (default 3)")
    g.add_argument("--quest-length", type=int, help="textworld custom: quest length (default 4)")
    g.add_argument("--split", choices=["train", "valid_seen", "valid_unseen"], help="alfworld split (default train)")
    g.add_argument("--task-types", help="alfworld: comma-separated task types (default all six)")
    g.add_argument("--official", action="store_true",
                   help="alfworld: index the official games under $ALFWORLD_DATA (alfworld-download) into --out")
    g.add_argument("--level", type=int, choices=[1, 2, 3], help="swe: problem statement level (1, the default, names "
                   "file, function, failing tests; 2 the failing tests' output; 3 an issue-style text)")
    g.add_argument("--packages", help="swe: comma-separated source packages (toolz, mpmath, boltons; default all)")
    g.add_argument("--force", action="store_true", help="regenerate even if a cached identical set exists")
    g.set_defaults(func=commands.cmd_make_games)

    model_docs = field_docs(ModelConfig)

    def model_args(q, default="embedded"):  # checked against this machine by _check_model_flags
        q.add_argument("--model", default=default, help="'embedded' (SmolLM2-135M-Instruct), a Hugging Face id "
                       "(e.g. Qwen/Qwen2.5-0.5B-Instruct), a model dir, an SFT dir or a run dir")
        q.add_argument("--device", default="auto", help=model_docs["device"].replace("%", "%%"))
        q.add_argument("--dtype", default="auto", help=model_docs["dtype"].replace("%", "%%"))

    e = sub.add_parser("eval", help="success rate on a game set")
    model_args(e)
    e.add_argument("--out", help="write the result JSON here (e.g. eval.json)")
    e.add_argument("--temperature", type=float, default=0.0, help="sampling temperature (>= 0; 0 = greedy)")
    e.add_argument("--batch-size", type=int, default=8, help="episodes played at once (>= 1; 8 on a CPU)")
    e.add_argument("--reward", default="", metavar="KIND",
                   help="swe: the reward kind each submission is scored by (the evaluation's mean_score_frac): "
                        "pass_ratio (the default), resolved or relative; pass the run's reward.kind")
    add_config_flags(e, "model", only=("generator",), defaults=True)
    add_config_flags(e, "train", only=("max_new_tokens", "seed"), defaults=True,
                     title="generation (the train section's budget per turn: pass the run's, e.g. 160 for swe; "
                           "--seed seeds the sampling when --temperature > 0)")
    add_config_flags(e, "env", defaults=True, required=("games",))
    e.set_defaults(func=commands.cmd_eval)

    s = sub.add_parser("sft", help="SFT warm-up on the games' walkthroughs (TRL SFTTrainer)")
    model_args(s)
    s.add_argument("--out", required=True, help="output directory (the model goes to OUT/policy)")
    s.add_argument("--more-games", action="append", metavar="DIR",
                   help="also the walkthroughs of this game set (repeatable; --demos applies to each), e.g. "
                        "bandit-reversed games beside bandit ones: demonstrations naming each arm equally often "
                        "teach the format without an arm preference")
    add_config_flags(s, "sft", defaults=True, of=SFT_SECTIONS)
    add_config_flags(s, "model", only=("lora_rank",), defaults=True)
    add_config_flags(s, "env", only=("games", "show_admissible", "show_inventory", "action_format",
                                     "max_actions_per_turn"), defaults=True,
                     required=("games",))
    s.set_defaults(func=commands.cmd_sft)

    t = sub.add_parser("train", help="multi-turn RL (PPO / GRPO / RLOO)",
                       description="Multi-turn RL. Every config field is a flag (help: its docstring in config.py); "
                                   "a flag not given keeps the value of --config, of the resumed run, or the default.")
    t.add_argument("--out", required=True, help="run directory")
    t.add_argument("--config", help="YAML config (sections env, reward, algo, model, train); flags override it")
    t.add_argument("--resume", action="store_true", help="continue from the run dir's latest checkpoint")
    t.add_argument("--algo", choices=tuple(ALGO_PRESETS),
                   help="preset of the algo section (config.ALGO_PRESETS), applied before the other flags")
    for section in SECTIONS:
        add_config_flags(t, section)
    t.set_defaults(func=commands.cmd_train)

    d = sub.add_parser("demo", help="base → SFT → RL on held-out cooking games (12-20 min on 2 CPU cores, measured)")
    d.add_argument("--out", default="runs/demo")
    d.add_argument("--fast", action="store_true", help="tiny budget (also AGENTRL_FAST=1)")
    d.add_argument("--algo", default="ppo", choices=tuple(ALGO_PRESETS))
    d.add_argument("--reward", default="dense", choices=choices_for("reward.kind"))
    d.add_argument("--model", default="embedded")
    d.add_argument("--seed", type=int, default=0)
    d.add_argument("--rl-steps", type=int)
    d.add_argument("--mixed-precision", default="no", choices=MIXED_PRECISIONS,
                   help="the RL stage under bf16 autocast (where the hardware has bf16; refused before the first stage "
                        "otherwise; it rounds away weight changes below ~2e-3 of a weight, and its RL stage won 0%% of "
                        "the held-out games here: book/benchmarks.md); 'no': fp32, the table in the README")
    d.add_argument("--lora-rank", type=int, default=0,
                   help="SFT trains a LoRA adapter of this rank and RL keeps training it (0: every weight), at "
                        "LoRA's learning rates unless --sft-lr / --rl-lr are given (SFT 1e-3, RL 3e-4: book/demo.md)")
    d.add_argument("--group-minibatches", action="store_true",
                   help="RL minibatches of whole groups (each group's prompt forwarded once in the update: a faster "
                        "update, another split of the episodes into gradient steps; book/benchmarks.md)")
    d.add_argument("--sft-lr", type=float, help="SFT learning rate (default 5e-5; with --lora-rank 1e-3)")
    d.add_argument("--rl-lr", type=float, help="RL learning rate (default 3e-5; with --lora-rank 3e-4)")
    d.add_argument("--record", metavar="FILE",
                   help="also append the run's summary as one JSON line to FILE, e.g. results/demo_variants.jsonl "
                        "(book/benchmarks.md renders it: python benchmarks/report.py --write)")
    d.set_defaults(func=commands.cmd_demo)

    w = sub.add_parser("sweep", help="train + evaluate every grid cell × seed (run_rl); one record per run in --out",
                       description="Every cell of --grid × every seed of --seeds is trained from --base (run_rl, as "
                                   "`agentrl train`) and evaluated on --eval-games; one JSON line per finished run is "
                                   "appended to --out. Stopped, the same command resumes: recorded runs are skipped "
                                   "and a half-finished run resumes from its last checkpoint.")
    w.add_argument("--base", required=True, help="YAML config every run starts from (sections env, reward, algo, "
                                                  "model, train; env.games names the training games)")
    w.add_argument("--grid", nargs="+", default=[], metavar="FIELD=V1,V2",
                   help="axes: any dotted config field with its values, e.g. algo.advantage=gae,grpo,rloo "
                        "reward.kind=sparse,dense train.lr=1e-5,3e-5; algo=ppo,grpo,rloo sets the presets")
    w.add_argument("--seeds", default="0", help="train.seed values, comma-separated (default 0; e.g. 0,1,2)")
    w.add_argument("--out", required=True, help="results file, JSON lines (e.g. results/NAME.jsonl)")
    w.add_argument("--init", help="model every run starts from (model.name), e.g. an SFT dir (default: the base's)")
    w.add_argument("--eval-games", help="held-out games dir (train.eval_games); required unless the base sets it")
    w.add_argument("--runs-dir", help="run directories go here, one per run: <cell>-s<seed> (default "
                                      "runs/sweeps/<name of --out>)")
    w.add_argument("--tag", nargs="+", default=[], metavar="NAME=VALUE",
                   help="labels joined to every cell (names that are not config fields), e.g. sft.demos=12: they "
                        "tell apart runs of one results file whose base configs differ")
    w.add_argument("--also-eval", nargs="+", default=[], metavar="NAME=DIR[@TURNS]",
                   help="also evaluate each trained policy on these game sets (e.g. hard=games/harder@12); kept in "
                        "the record's evals.NAME")
    w.add_argument("--keep-training-state", action="store_true",
                   help="keep every checkpoint of recorded runs (default: only the newest policy stays; ~1 GB saved "
                        "per run of the embedded model)")
    w.add_argument("--verbose", action="store_true", help="print each run's per-step lines")
    w.add_argument("--dry-run", action="store_true", help="check the grid, configs and games and list the runs "
                                                          "(recorded / resume / new); run nothing")
    w.set_defaults(func=commands.cmd_sweep)

    r = sub.add_parser("report", help="mean ± std and bootstrap intervals per cell and per difference of a sweep")
    r.add_argument("results", help="results file written by agentrl sweep")
    r.add_argument("--metric", default="eval.success_rate",
                   help="a record's number: eval.success_rate (default), eval.mean_turns, eval.invalid_rate, "
                        "eval.mean_score_frac, final.KEY (last training step, e.g. final.return_mean), wall_seconds")
    r.add_argument("--compare", help="an axis whose values are differenced pairwise (e.g. algo.advantage)")
    r.add_argument("--by", help="axes held fixed for the differences, comma-separated (default: every other axis)")
    r.add_argument("--resamples", type=int, default=9999, help="bootstrap resamples (default 9999)")
    r.add_argument("--seed", type=int, default=0, help="seed of the bootstrap (default 0)")
    r.set_defaults(func=commands.cmd_report)
    return p


USER_ERRNOS = {errno.ENOENT, errno.EEXIST, errno.ENOTDIR, errno.EISDIR, errno.EACCES, errno.EPERM, errno.ENOSPC,
               errno.EDQUOT, errno.EROFS, errno.ENAMETOOLONG, errno.ELOOP}
"""OSErrors that come from the user's paths or disk (not from a bug): main() reports them in one line."""


def is_user_error(e: BaseException) -> bool:
    """Whether main() reports `e` as one line (bad input, bad file, full disk) rather than let its traceback show a
    bug: configuration, game and model errors (ValueError subclasses), ValueErrors, too many env errors
    (TooManyEnvErrors), a missing module (with our install hint), and OSErrors about a path (a filename, or an errno
    of USER_ERRNOS)."""
    from .envs.base import GameLoadError, GameSetError, TooManyEnvErrors

    if isinstance(e, (ConfigError, GameSetError, GameLoadError, TooManyEnvErrors, ValueError, ModuleNotFoundError)):
        return True
    return isinstance(e, OSError) and (e.filename is not None or e.errno in USER_ERRNOS
                                       or isinstance(e, (FileNotFoundError, FileExistsError, PermissionError,
                                                         NotADirectoryError, IsADirectoryError)))


def error_line(cmd: str, e: BaseException) -> str:
    """`agentrl CMD: error: MESSAGE` on one line (multi-line messages, e.g. YAML's, are joined; bytes of a path
    that is not valid UTF-8 are shown escaped, so the line prints on any stream)."""
    if isinstance(e, OSError) and e.filename is not None and e.strerror:
        message = f"{e.strerror}: {e.filename}" + (f" -> {e.filename2}" if e.filename2 else "")
    else:
        message = str(e) or type(e).__name__
    message = message.encode("utf-8", "backslashreplace").decode("utf-8")
    return f"agentrl {cmd}: error: {' '.join(message.split())}"


def retired_flag(argv: list[str]) -> str:
    """The error line for a flag that is gone, '' when `argv` names none: --swe-reward, folded into --reward
    (config.swe_reward_gone), says what to write instead where argparse would print its usage and 'unrecognized
    arguments'."""
    for i, arg in enumerate(argv):
        if arg == "--swe-reward" or arg.startswith("--swe-reward="):
            value = arg.partition("=")[2] or (argv[i + 1] if i + 1 < len(argv) else "")
            value = "" if value.startswith("-") else value
            cmd = argv[0] if argv else ""
            gone = swe_reward_gone(value)
            if cmd == "make-games":
                gone += "; a swe task set has no reward kind: make it without --swe-reward"
            return f"agentrl {cmd}: error: {gone}"
    return ""


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    argv = sys.argv[1:] if argv is None else list(argv)
    if gone := retired_flag(argv):
        print(gone, file=sys.stderr)
        return 2
    a = build_parser().parse_args(join_negative_numbers(argv))
    a.argv = argv  # `agentrl sweep` prints the command that resumes it
    previous = _exit_on_sigterm()
    try:
        a.func(a)
        sys.stdout.flush()  # a reader that went away shows here (`agentrl report ... | head`), not at exit
    except BrokenPipeError:
        return _stdout_closed()
    except Exception as e:
        if not is_user_error(e):
            raise  # a bug: its traceback is what a report needs
        print(error_line(a.cmd, e), file=sys.stderr)
        return 2
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    return 0


def _exit_on_sigterm():
    """SIGTERM (`kill`, a job scheduler's stop) raises SystemExit(143) in the main thread instead of ending the
    process at once, so that `finally` blocks and atexit run: the env pool's workers are stopped and its temp dir
    removed (issue 52: stopped runs left agentrl-envpool-* dirs behind). Returns the previous handler (None when
    this is not the main thread, where no handler can be set)."""
    def stop(signum, frame):
        raise SystemExit(128 + signal.SIGTERM)

    try:
        return signal.signal(signal.SIGTERM, stop)
    except ValueError:  # not the main thread
        return None


def _stdout_closed() -> int:
    """stdout's reader closed the pipe (`agentrl report ... | head`): stop quietly, as a shell tool does, with exit
    status 141 (128 + SIGPIPE). stdout is pointed at /dev/null so that Python's final flush does not raise again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # no real file descriptor (a test's captured stdout)
        pass
    return 128 + signal.SIGPIPE


if __name__ == "__main__":
    sys.exit(main())
