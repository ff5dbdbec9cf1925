"""What each `agentrl` subcommand does with its parsed flags (cli.build_parser routes each to one): check every input
before any work starts — a bad one raises ConfigError (or another error cli.is_user_error reports as one line) —,
then call the library functions the notebooks call.
"""
from __future__ import annotations

import math
import os
import signal
import sys
from pathlib import Path

from .config import EPISODES_PER_STEP_MAX, MAX_NEW_TOKENS_MAX, SEED_MAX, ConfigError, EnvConfig, RunConfig, SFTConfig
from .flags import build_config, section_args
from .fsio import check_out_path

MAKE_GAMES_N_MAX = 100_000
"""`agentrl make-games --n` upper bound: more games take hours to generate (Sokoban's BFS, TextWorld's compiler) and
give a manifest of hundreds of MB; split a bigger set over several --seed ranges."""
FAMILY_FLAGS = ("challenge", "challenge_args", "world_size", "nb_objects", "quest_length", "split", "task_types",
                "official", "level", "packages", "force")
"""`agentrl make-games` flags passed to the family's game maker when it takes a keyword parameter of that name."""
_TEXTWORLD_CUSTOM = ("world_size", "nb_objects", "quest_length")


def cmd_make_games(a) -> None:
    """Refuses, in one line and before any game is made: --n outside [1, MAKE_GAMES_N_MAX], a --seed range outside
    [0, SEED_MAX], an --out that is a file or not writable, and a flag the family's game maker does not take (e.g.
    --world-size for frozenlake) or that its other flags make moot (--world-size with --challenge)."""
    import inspect

    from .envs import get_family

    make_games = get_family(a.family).make_games
    _require(make_games is not None, f"the {a.family} family has no game maker; write its manifest.json yourself")
    _require(1 <= a.n <= MAKE_GAMES_N_MAX, f"--n must be in [1, {MAKE_GAMES_N_MAX}] (got {a.n}); for more games, "
                                          "make several sets over disjoint --seed ranges")
    _require(0 <= a.seed and a.seed + a.n - 1 <= SEED_MAX,
             f"--seed must be in [0, {SEED_MAX - a.n + 1}] for --n {a.n} (got {a.seed}): game i uses seed + i")
    check_out_path("--out", a.out, is_dir=True)
    # the family's game maker gets the flags named as its keyword parameters (textworld: --challenge ... --force,
    # alfworld: --split --task-types --official --force); a flag given that it does not take is refused
    accepted = inspect.signature(make_games).parameters
    given = [k for k in FAMILY_FLAGS if getattr(a, k) is not None and getattr(a, k) is not False]  # 0 is given
    flag = lambda k: "--" + k.replace("_", "-")  # noqa: E731
    wrong = [flag(k) for k in given if k not in accepted]
    takes = [flag(k) for k in FAMILY_FLAGS if k in accepted]
    _require(not wrong, f"{', '.join(wrong)} {'does' if len(wrong) == 1 else 'do'} not apply to {a.family} games "
                        f"(its flags: --n, --seed, --out{''.join(', ' + f for f in takes)}); drop "
                        f"{'it' if len(wrong) == 1 else 'them'}")
    if a.family == "textworld":
        custom = [flag(k) for k in _TEXTWORLD_CUSTOM if getattr(a, k) is not None]
        _require(not (a.challenge and custom),
                 f"{', '.join(custom)} {'applies' if len(custom) == 1 else 'apply'} only to custom games, not to "
                 f"--challenge {a.challenge}; pass the challenge's own options in --challenge-args")
        _require(a.challenge or a.challenge_args is None,
                 "--challenge-args needs --challenge (custom games take --world-size, --nb-objects, --quest-length)")
    params = {k: getattr(a, k) for k in given if k in accepted}
    gs = make_games(str(Path(a.out).expanduser().absolute()), a.n, a.seed, **params)
    lens = [len(g.walkthrough) for g in gs.games]
    print(f"{len(gs)} {gs.family} games in {gs.root} (manifest.json); walkthrough length "
          f"{min(lens)}-{max(lens)}, max score {gs.games[0].max_score:g}")


def _check_seed(seed: int, what: str, flag: str = "--seed") -> None:
    """Refuse a seed outside [0, SEED_MAX] in one line naming `flag` (issue 52: `eval --seed 2**32` replayed seed 0,
    2**64 overflowed in numpy without naming the flag). Every command's seed flag is checked: make-games, eval, demo
    and report here; train, sft and sweep through their configs' validate (train.seed, sft.seed)."""
    _require(0 <= seed <= SEED_MAX, f"{flag} must be in [0, {SEED_MAX}] (got {seed}): {what}")


def _require(ok: bool, message: str) -> None:
    """Raise ConfigError(message) unless `ok`: a bad flag value, found before any work starts."""
    if not ok:
        raise ConfigError(message)


def _check_model_flags(a) -> None:
    """--device and --dtype, checked against this machine before games or models load (hardware.pick_device)."""
    from .config_values import ModelLoadError
    from .hardware import pick_device
    from .models import pick_dtype

    try:
        device = pick_device(a.device)
    except ModelLoadError as e:
        raise ConfigError(f"--device {a.device}: {e}") from e
    try:
        pick_dtype(a.dtype, device)
    except ModelLoadError as e:
        raise ConfigError(f"--dtype {a.dtype}: {e}") from e


def cmd_eval(a) -> None:
    """Evaluate --model on --games (evaluate.evaluate): --max-turns turns, --max-new-tokens tokens per turn (the
    train section's field: pass the run's, e.g. 160 for configs/swe.yaml), --temperature; the result (printed, and
    written to --out) names the model, the games, the commit and the device. Refuses, in one line and
    before the model loads: --max-turns < 1, --batch-size < 1, --max-new-tokens outside [1, MAX_NEW_TOKENS_MAX], a
    negative --temperature, an --out that cannot be written, a --device / --dtype this machine lacks, and games that
    fail their check."""
    from .envs.base import check_env_errors, load_game_set
    from .envs.pool import open_pool
    from .envs.process_pool import check_pool_size
    from .evaluate import evaluate, format_eval, keep_unsaved, save_eval
    from .generation import check_generator
    from .models import load_policy
    from .paths import git_commit
    from .rundir import check_unambiguous_model

    env_cfg = EnvConfig(**section_args(a, "env"))
    _require(env_cfg.max_turns >= 1, f"--max-turns must be >= 1 (got {env_cfg.max_turns}); 8-12 suits small "
                                     "TextWorld games")
    _require(1 <= a.batch_size <= EPISODES_PER_STEP_MAX,
             f"--batch-size must be in [1, {EPISODES_PER_STEP_MAX}] (got {a.batch_size}): episodes played at once; 8 "
             "on a CPU")
    max_new_tokens = getattr(a, "train.max_new_tokens")
    _require(1 <= max_new_tokens <= MAX_NEW_TOKENS_MAX,
             f"--max-new-tokens must be in [1, {MAX_NEW_TOKENS_MAX}] (got {max_new_tokens}): tokens per reply; 16-32 "
             "suit one action, 160 a swe reply with a patch (configs/swe.yaml)")
    _check_seed(getattr(a, "train.seed"), "the sampling seed, used when --temperature > 0")
    _require(math.isfinite(a.temperature) and a.temperature >= 0,
             f"--temperature must be >= 0 (got {a.temperature}); 0 is greedy, 0.7 samples as in training")
    if a.out:
        check_out_path("--out", a.out)
    _check_model_flags(a)
    check_unambiguous_model(a.model, "--model")
    check_generator(getattr(a, "model.generator"))
    games = load_game_set(env_cfg.games)
    env_cfg.validate()
    _check_eval_reward(a.reward, games.family)
    check_pool_size(min(a.batch_size, len(games)), env_cfg.process_pool, "--batch-size")
    pool = open_pool(env_cfg, min(a.batch_size, len(games)), games, a.reward)  # every game checked before the model
    try:
        model, tok = load_policy(a.model, a.device, a.dtype)
        res = evaluate(model, tok, games, max_turns=env_cfg.max_turns, temperature=a.temperature,
                       batch_size=a.batch_size, max_new_tokens=max_new_tokens, env=env_cfg, pool=pool,
                       generator=getattr(a, "model.generator"), seed=getattr(a, "train.seed"))
    finally:
        pool.close()
    # provenance, as a sweep record has it: which code evaluated the model, on which device
    res.update(model=a.model, games=str(games.root), commit=git_commit(), device=str(model.device))
    print(format_eval(res, a.model))
    if a.out:
        try:
            save_eval(res, a.out)
        except OSError as e:  # e.g. the disk filled during the evaluation: the results are kept, not lost
            import json

            kept = keep_unsaved(json.dumps(res, indent=1), "eval")
            raise ConfigError(f"could not write --out {a.out} ({e.strerror or e}); the results are kept in {kept}: "
                              "copy them where you need them") from e
        print(f"wrote {a.out}")
    reasons = res["env_error_reasons"] or [""]
    check_env_errors(res["env_errors"], res["n_games"], env_cfg.max_env_error_frac, reasons[0], "evaluation")


def _check_eval_reward(kind: str, family_name: str) -> None:
    """`agentrl eval --reward KIND` names the kind a family that computes its reward itself scores each episode by
    (EnvFamily.reward_kinds: swe); refused, in one line, for a kind that family does not compute and for a family
    whose score is the game's own."""
    from .envs import get_family

    family = get_family(family_name)
    if kind and kind not in family.reward_kinds:
        takes = (f"{family.name} games take {', '.join(family.reward_kinds)}" if family.reward_kinds else
                 f"{family.name} games are scored by the game's own score; drop it")
        raise ConfigError(f"--reward {kind} does not apply to evaluating {family.name} games: {takes}")


def cmd_sft(a) -> None:
    from .envs.base import load_game_set
    from .rundir import check_not_run_dir, check_unambiguous_model
    from .sft import sft

    cfg = SFTConfig(**section_args(a, "sft"))
    cfg.validate()  # --epochs, --lr, --batch-size, --micro-batch-size, --max-turns, --seed, --mixed-precision
    lora_rank = getattr(a, "model.lora_rank")
    _require(lora_rank >= 0, f"--lora-rank must be >= 0 (got {lora_rank}); 0 is full fine-tuning")
    check_out_path("--out", a.out, is_dir=True)
    check_not_run_dir(a.out)
    check_unambiguous_model(a.model, "--model")
    _check_model_flags(a)
    env = section_args(a, "env")
    EnvConfig(**env).validate()  # --action-format, --max-actions-per-turn
    games = load_game_set(env["games"])
    demos = cfg.demos
    _require(demos is None or 1 <= demos <= len(games),
             f"--demos must be in [1, {len(games)}] ({env['games']} holds {len(games)} games; got {demos})")
    games = games.first(demos) if demos else games
    more = [load_game_set(d) for d in a.more_games or ()]
    for d, g in zip(a.more_games or (), more):
        _require(demos is None or demos <= len(g),
                 f"--demos {demos} is more than the {len(g)} games of --more-games {d}; pass --demos <= {len(g)}")
    more = [g.first(demos) if demos else g for g in more]
    s = sft(a.model, [games, *more] if more else games, a.out, epochs=cfg.epochs, lr=cfg.lr,
            batch_size=cfg.batch_size, micro_batch_size=cfg.micro_batch_size, max_turns=cfg.max_turns,
            seed=cfg.seed, device=a.device, dtype=a.dtype,
            lora_rank=lora_rank, show_admissible=env["show_admissible"], show_inventory=env["show_inventory"],
            action_format=env["action_format"], max_actions_per_turn=env["max_actions_per_turn"],
            mixed_precision=cfg.mixed_precision)
    print(f"SFT on {s['examples']} walkthroughs ({s['assistant_tokens']} action tokens): loss "
          f"{s['train_loss'][0]:.3f} → {s['train_loss'][-1]:.3f} in {s['seconds']:.0f}s; model in {a.out}/policy")


def cmd_train(a) -> None:
    from . import run
    from .rundir import resume_config

    run_dir = Path(a.out)
    cfg = build_config(a, resume_config(run_dir) if a.resume else None)  # "no run in DIR" when there is none
    if not cfg.env.games:
        raise ConfigError("no games: pass --games DIR (made by `agentrl make-games`) or set env.games in --config")
    eval_games = _check_train_inputs(a, cfg)
    try:
        summary = run.run_rl(cfg, run_dir, init=getattr(a, "model.name"), eval_games=eval_games, resume=a.resume)
    except run.RunInterrupted as e:  # Ctrl-C: one line, exit 130, the last checkpoint intact (no traceback)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not break the exit
        print(f"agentrl train: {e}", file=sys.stderr, flush=True)
        raise SystemExit(130) from None
    rows = summary["rows"]
    from .distributed import is_main_process

    if rows and is_main_process():  # a data-parallel job: rank 0 reports
        last = rows[-1]
        print(f"done: {len(rows)} steps; last step success {last['success_rate']:.2f}, "
              f"return {last['return_mean']:+.3f}; "
              f"metrics in {run_dir}/metrics.jsonl, curves in {run_dir}/learning_curve.png")
    if summary["eval"] is not None:
        from .evaluate import format_eval

        print(format_eval(summary["eval"], "held-out"))


def _check_train_inputs(a, cfg: RunConfig):
    """What `train` would otherwise find out only after training: the registry names, the held-out games
    (train.eval_games), --out, the device / dtype and a model path that does not exist. Returns the loaded eval
    GameSet, or None."""
    from .envs.base import load_game_set
    from .envs.process_pool import check_pool_size
    from .generation import check_generator
    from .hardware import pick_device
    from .model_paths import resolve_model_path
    from .models import check_init_lora, pick_dtype
    from .parts import run_parts
    from .rundir import check_not_sft_output, check_unambiguous_model
    from .tracking import check_tracker_output

    run_parts(cfg)  # the registry names (reward kind among the games' family's, estimator and group size, backend, ...)
    check_out_path("--out", a.out, is_dir=True)
    check_tracker_output(cfg.train.report_to, a.out)  # e.g. RUN/tensorboard, before the model loads
    check_pool_size(cfg.train.games_per_step * cfg.algo.group_size, cfg.env.process_pool)
    load_game_set(cfg.env.games)  # the training games load (run_parts checked reward.kind against their family)
    pick_dtype(cfg.model.dtype, pick_device(cfg.model.device))
    check_generator(cfg.model.generator)
    if not a.resume:
        check_not_sft_output(a.out)
        name = getattr(a, "model.name") or cfg.model.name
        check_unambiguous_model(name, "--init")
        if name != "embedded":  # the embedded model resolves by converting it (~20 s): leave that to the trainer
            resolve_model_path(name)
            check_init_lora(name, cfg.model.lora_rank)  # a LoRA --init and --lora-rank that do not fit
    return load_game_set(cfg.train.eval_games) if cfg.train.eval_games else None


def cmd_demo(a) -> None:
    from .demo import DemoBudget, record_demo, run_demo

    fast = a.fast or os.environ.get("AGENTRL_FAST") == "1"
    budget = DemoBudget.fast() if fast else DemoBudget.full()
    _require(a.lora_rank >= 0, f"--lora-rank must be >= 0 (got {a.lora_rank}); 0 is full fine-tuning")
    _check_seed(a.seed, "the seed of the SFT and RL stages")
    for flag, value in (("--sft-lr", a.sft_lr), ("--rl-lr", a.rl_lr)):
        _require(value is None or value > 0, f"{flag} must be > 0 (got {value})")
    if a.record:
        check_out_path("--record", a.record)
    if a.rl_steps is not None:
        budget.rl_steps = a.rl_steps
    budget.group_minibatches = a.group_minibatches
    budget.with_lora(a.lora_rank)  # LoRA's learning rates unless --sft-lr / --rl-lr say otherwise
    budget.sft_lr = a.sft_lr or budget.sft_lr
    budget.rl_lr = a.rl_lr or budget.rl_lr
    summary = run_demo(a.out, budget, algo=a.algo, reward=a.reward, model=a.model, seed=a.seed,
                       mixed_precision=a.mixed_precision)
    if a.record:
        record_demo(summary, a.record)
        print(f"recorded in {a.record}")


def cmd_sweep(a) -> None:
    import shlex

    from . import sweep

    check_out_path("--out", a.out)
    if a.runs_dir:
        check_out_path("--runs-dir", a.runs_dir, is_dir=True)
    try:
        records = sweep.run_sweep(a.base, a.grid, a.seeds, a.out, runs_dir=a.runs_dir, init=a.init,
                                  eval_games=a.eval_games, progress=True, run_progress=a.verbose,
                                  dry_run=a.dry_run, tags=sweep.parse_tags(a.tag),
                                  extra_evals=sweep.parse_extra_evals(a.also_eval),
                                  keep_training_state=a.keep_training_state)
    except sweep.SweepInterrupted as e:  # Ctrl-C: one line with the command that resumes, exit 130
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        again = shlex.join(["agentrl", *getattr(a, "argv", ["sweep", "..."])])
        print(f"agentrl sweep: {e}: {again}", file=sys.stderr, flush=True)
        raise SystemExit(130) from None
    if not a.dry_run:
        print(f"{len(records)} runs recorded in {a.out}; summarise them with: agentrl report {a.out}")


def cmd_report(a) -> None:
    from .records import load_records
    from .report import report

    _check_seed(a.seed, "the bootstrap's seed")
    records = load_records(a.results)
    if not records:
        raise ConfigError(f"no records in {a.results}" if Path(a.results).exists() else
                          f"results file {a.results} does not exist")
    print(report(records, a.metric, compare=a.compare, by=a.by, n_resamples=a.resamples, seed=a.seed).markdown())
