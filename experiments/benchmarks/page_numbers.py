"""The measured numbers that book/benchmarks.md's prose ("What the tables say") quotes, and those of every other page
that marks one (report.numbered_pages: book/design.md, environments.md, demo.md, when_things_go_wrong.md, install.md,
the_book.md, README.md), each computed from a results file, so that the prose cannot drift from the tables.

The benchmarks page is a notebook: its first cell glues every number under glue_name(KEY) (`trl.step` → `trl_step`)
and its prose cell writes `{trl_step}` (agentrl_lib.notebook's glue and prose, as the chapters). In a Markdown page a
number stands between two markers, `<!-- n:KEY -->2.1×<!-- /n -->`; the markers are HTML comments, so GitHub and the
book show the number alone. `python benchmarks/report.py --write` rewrites every marked number from numbers()[KEY] (and
re-executes the benchmarks page), and book/build.py does the same in the book it builds; tests/test_benchmarks.py
fails when a committed page holds another number than the results give, or a marker names no known KEY.
"""
from __future__ import annotations

import json
import re
import statistics

from experiments.benchmarks.results_lines import all_lines, demo_runs, newest_per, rl_step_medians, seeded_per_repeat

MARK = re.compile(r"<!-- n:([\w.-]+) -->(.*?)<!-- /n -->", re.S)
"""One marked number: group 1 its KEY, group 2 the number as the page shows it."""


def _min_s(seconds: float) -> str:
    """'12 min 41 s' ('41 s' under a minute)."""
    minutes, s = divmod(round(seconds), 60)
    return f"{minutes} min {s} s" if minutes else f"{s} s"


def _x(ratio: float, digits: int = 1) -> str:
    return f"{ratio:.{digits}f}×"


def rl_step_numbers() -> dict[str, str]:
    """results/rl_step_vs_trl.jsonl: TRL / agentrl per part (the table's medians), the newest line of each π_old
    source, and the same workload's line before the newest (measured under load)."""
    out = {}
    newest = {r.get("old_logprobs"): r for r in newest_per("rl_step_vs_trl", "old_logprobs")}
    ours, trl = rl_step_medians(newest[None])
    for part in ("rollout", "update", "step"):
        out[f"trl.{part}"] = _x(trl[part] / ours[part])
    out["trl.peak"] = _x(ours["peak"] / trl["peak"], 2)   # agentrl's peak RSS as a share of TRL's
    ours_b, trl_b = rl_step_medians(newest["behaviour"])
    out["trl.behaviour.step"], out["trl.behaviour.update"] = (_x(trl_b[p] / ours_b[p], 2) for p in ("step", "update"))
    same = [r for r in all_lines("rl_step_vs_trl") if r.get("old_logprobs") is None
            and (r["games"], r.get("game_names")) == (newest[None]["games"], newest[None].get("game_names"))]
    earlier = same[-2]  # the same workload, measured before the newest line
    ours_e, trl_e = rl_step_medians(earlier)
    out["trl.loaded.step"], out["trl.loaded.update"] = (_x(trl_e[p] / ours_e[p]) for p in ("step", "update"))
    out["trl.loaded.load"] = f"{earlier['ours']['load_before']:.0f}–{earlier['trl']['load_after']:.0f}"
    steps = newest[None]["ours"]["steps"]
    skipped = [s for s in steps if s.get("skipped_update")]
    out["trl.skipped"] = f"{len(skipped)} of the {len(steps)}"
    out["trl.skipped.seconds"] = f"{statistics.median(s['total'] for s in skipped):.1f} s" if skipped else "—"
    out["trl.all_steps.seconds"] = f"{statistics.median(s['total'] for s in steps):.1f} s"
    return out


def rollout_numbers() -> dict[str, str]:
    """results/rollout_speed.jsonl (the first comparison with one-at-a-time and re-encoding, and the KV cache appended
    in place against concatenated, each line) and results/rollout_profile.jsonl (one decode step by rows)."""
    out = {}
    first = next(r for r in all_lines("rollout_speed") if "sequential" in r and "reencode" in r)
    out["rollout.vs_sequential"] = _x(first["speedup_vs_sequential"])
    out["rollout.vs_reencode"] = _x(first["speedup_vs_reencode"])
    runs = first["batched"]["runs"]
    out["rollout.tokens_per_turn"] = f"{sum(x['tokens'] for x in runs) / sum(x['turns'] for x in runs):.1f}"
    out["rollout.history"] = f"~{round(statistics.median(x['mean_len'] for x in runs), -1):.0f}"
    grow = [r for r in all_lines("rollout_speed") if r.get("comparison") == "batched,concat"]
    for i, r in enumerate(grow, 1):  # wall-time medians; CPU seconds, pair by pair
        out[f"grow.rollout.{i}"], out[f"grow.rollout.{i}.cpu"] = (_x(r[k], 2) for k in ("speedup_vs_concat",
                                                                                        "cpu_ratio_vs_concat"))
    profile = next(r for r in reversed(all_lines("rollout_profile")) if "concat_median_ms_by_rows" in
                   r["fixed_cache_decode"])["fixed_cache_decode"]
    out["grow.cache_len"] = f"{profile['cache_len']}"
    for rows, ms in profile["median_ms_by_rows"].items():
        out[f"grow.decode.{rows}"] = _x(profile["concat_median_ms_by_rows"][rows] / ms, 2)
    out["grow.decode.16.ms"] = f"{profile['median_ms_by_rows']['16']:.0f} ms"
    out["grow.decode.16.concat_ms"] = f"{profile['concat_median_ms_by_rows']['16']:.0f} ms"
    shared = next(r for r in all_lines("rollout_speed") if r.get("comparison") == "batched,unshared")
    pairs = zip(shared["batched"]["runs"], shared["unshared"]["runs"])
    out["share.positions"] = f"{shared['batched']['runs'][0]['shared_positions']:,}"
    out["share.cpu"] = _x(shared["cpu_ratio_vs_unshared"], 2)
    out["share.pairs"] = " / ".join(f"{u['cpu_seconds'] / b['cpu_seconds']:.2f}" for b, u in pairs)
    weights = next(r["weight_bytes"] for r in all_lines("rollout_profile") if r.get("weight_bytes"))
    out["profile.weight_mb"] = f"{weights / 1e6:.0f} MB"
    return out


def update_numbers() -> dict[str, str]:
    """results/update_speed.jsonl (the padding cut, π_old from the rollout, shared prompts: the first line of each
    comparison), bench_update_memory.jsonl (the newest unlabelled line), peak.jsonl (the newest line of each CPU
    kind), sft_memory.jsonl (the SFT warm-up's micro-batches) and bf16_guard.jsonl (the guard's reading per start)."""
    out = {}
    lines = all_lines("update_speed")
    cut = next(r for r in lines if r["algo"] == "ppo" and "padded" in r)
    out["cut.padded"], out["cut.cut"] = (f"{cut[k]['median_seconds']:.1f}" for k in ("padded", "cut"))
    out["cut.x"] = _x(cut["padded"]["median_seconds"] / cut["cut"]["median_seconds"], 2)
    beh = next(r for r in lines if "behaviour" in r)
    out["behaviour.cut"], out["behaviour.behaviour"] = (f"{beh[k]['median_seconds']:.1f}" for k in ("cut", "behaviour"))
    out["behaviour.x"] = _x(beh["cut"]["median_seconds"] / beh["behaviour"]["median_seconds"], 2)
    grp = next(r for r in lines if "grouped" in r)
    cpu = {k: grp[k]["median_cpu_seconds"] for k in ("cut", "shared", "grouped")}
    out.update({f"prompts.{k}": f"{v:.1f}" for k, v in cpu.items()})
    out["prompts.shared.x"], out["prompts.grouped.x"] = (_x(cpu["cut"] / cpu[k], 2) for k in ("shared", "grouped"))
    mem = [r for r in all_lines("bench_update_memory") if not r.get("label")][-1]
    plain = mem["settings"]["plain"]
    for name, key in (("plain", "plain"), ("microbatch", "micro"), ("checkpointing", "ckpt"),
                      ("microbatch+checkpointing", "both")):
        x = mem["settings"][name]
        out[f"mem.{key}.s"], out[f"mem.{key}.gb"] = f"{x['step_seconds_median']:.0f} s", f"{x['peak_rss_gb']:.2f} GB"
        out[f"mem.{key}.time"] = f"×{x['step_seconds_median'] / plain['step_seconds_median']:.2f}"
        out[f"mem.{key}.mem"] = f"×{x['peak_rss_gb'] / plain['peak_rss_gb']:.2f}"
    out["mem.load"] = f"{mem['load_avg'][0]:.1f}"
    for r in newest_per("peak", "cpu"):
        kind = "xeon" if "Xeon" in r["cpu"] else "epyc" if "EPYC" in r["cpu"] else None
        if kind:
            out[f"peak.{kind}.bf16"] = _x(r["bf16_speedup"], 2)
            for dtype, short in (("float32", "fp32"), ("bfloat16", "bf16")):
                out[f"peak.{kind}.{short}.share"] = f"{r['update'][dtype]['fraction_of_matmul_peak']:.0%}"
    sft = all_lines("sft_memory")
    if sft:  # the newest line: all walkthroughs of a step in one pass against the smallest micro-batch
        one, micro = sft[-1]["settings"][0], sft[-1]["settings"][-1]
        out["sft.one.gb"], out["sft.micro.gb"] = (f"{x['peak_rss_gb']:.1f} GB" for x in (one, micro))
        out["sft.memory"], out["sft.time"] = f"×{micro['memory_ratio']:.2f}", f"×{micro['time_ratio']:.2f}"
        out["sft.loss_diff"] = f"{micro['max_loss_diff']:.0e}"
    guard = all_lines("bf16_guard")
    if guard:  # the newest line: the base model, the demo's SFT model, the findings' SFT start, in that order
        models = guard[-1]["models"]
        out.update({f"guard.{i}": f"{x['gap']:.3f}" for i, x in enumerate(models)})
        stopped = [i for i, x in enumerate(models) if x["gap"] > guard[-1]["limit"]]
        out["guard.stopped"] = ("only the last" if stopped == [len(models) - 1] else
                                f"{len(stopped)} of the {len(models)}")
    return out


def sweep_and_demo_numbers() -> dict[str, str]:
    """results/sweep_step.jsonl (the exact lever paired over seeds) and demo_variants.jsonl (the newest run of each
    variant and seed: its stages, times and memory)."""
    out = {}
    paired = [r for r in newest_per("sweep_step", ("algo", "comparison")) if seeded_per_repeat(r)
              and "grouped" in r["summary"]][-1]["summary"]["exact"]
    out["sweep.exact.medians"] = _x(paired["speedup"], 2)
    out["sweep.exact.pairs"] = _x(paired["median_pair_speedup"], 2)
    demo = {key: runs[-1] for key, runs in demo_runs(all_lines("demo_variants")).items()}  # as the table

    def won(r: dict) -> int:
        return sum(bool(w) for _, w, _ in r["per_game"]["RL"])

    fp32, bf16 = demo[("fp32", 0)], demo[("bf16", 0)]
    grouped = demo[("fp32, whole-group minibatches", 0)]
    out["demo.bf16.won"] = f"{won(bf16)}" if won(bf16) else "none"
    out["demo.fp32.won"], out["demo.games"] = f"{won(fp32)}", f"{len(fp32['per_game']['RL'])}"
    # book/demo.md: the newest fp32 run of seed 0
    out["demo.wall"], out["demo.cpu"] = _min_s(fp32["total_seconds"]), fp32["machine"].get("cpu") or "CPU"
    out["demo.minutes"] = f"{round(fp32['total_seconds'] / 60)} min"  # README.md
    out.update({f"demo.t.{k}": f"{v:.0f} s" for k, v in fp32["timings_seconds"].items() if k != "games"})
    rl = fp32["rl"]
    out["demo.step"], out["demo.rollout"], out["demo.update"] = (
        f"{rl[k]:.0f} s" for k in ("step_seconds_median", "rollout_seconds_median", "update_seconds_median"))
    out["demo.gen"], out["demo.peak"] = f"{rl['gen_tokens_per_s_median']:.0f}", f"{fp32['peak_rss_gb']:.1f} GiB"
    for name, r in (("fp32", fp32), ("grouped", grouped)):
        out[f"demo.{name}.update"] = f"{r['rl']['update_seconds_median']:.0f} s"
        out[f"demo.{name}.heldout"] = f"{r['stages']['RL']['success_rate']:.1%}".replace(".0%", "%")
    return out


def env_numbers() -> dict[str, str]:
    """results/env_step.jsonl (one env step's median per family; swe's steps by kind) and env_pool.jsonl (the newest
    line: in-process against worker processes)."""
    out = {}
    pool = all_lines("env_pool")
    if pool:  # book/when_things_go_wrong.md
        sp, pp = pool[-1]["serial"], pool[-1]["process"]
        out["pool.serial"], out["pool.process"] = (f"{x['step_ms_per_episode_median']:.1f} ms" for x in (sp, pp))
        out["pool.first"], out["pool.games"] = f"{pp['first_call_s']:.1f} s", f"{pool[-1]['n_games']}"
        out["pool.rss"] = f"{min(pp['worker_rss_mb']):.0f}–{max(pp['worker_rss_mb']):.0f} MB"
    fam = next(r for r in reversed(all_lines("env_step")) if "textworld" in r["families"])["families"]
    for name in ("textworld", "alfworld"):
        out[f"env.{name}"] = f"~{fam[name]['step_ms_median']:.0f} ms"
    swe = next((r["families"]["swe"] for r in reversed(all_lines("env_step")) if "swe" in r["families"]), None)
    if swe:
        out["env.swe"], out["env.swe.test_run"] = f"{swe['step_ms_median']:.0f} ms", f"{swe['test_run_ms']:.0f} ms"
        for key, field in (("command", "command_ms"), ("submit", "submit_ms"), ("noop", "noop_submit_ms"),
                           ("noop_uncached", "noop_uncached_ms"), ("memo", "submit_memo_ms")):
            out[f"env.swe.{key}"] = f"{swe[field]:.0f} ms"
    out["env.ragen"] = f"{max(fam[n]['step_ms_median'] for n in ('bandit', 'frozenlake', 'sokoban')):.2f} ms"
    return out


def _counts(run: dict) -> str:
    """'919 passed, 3 skipped' from one pytest summary of bench_make_test.py (failures first, as pytest prints)."""
    if not run:
        return "not run"
    return ", ".join(f"{run[k]} {k}" for k in ("failed", "errors", "passed", "skipped") if run.get(k))


def make_test_numbers() -> dict[str, str]:
    """results/make_test.jsonl (benchmarks/bench_make_test.py), its newest line: a fresh clone's install, make test's
    phases and counts, and make book (book/install.md, book/the_book.md)."""
    lines = all_lines("make_test")
    if not lines:
        return {}
    r, out = lines[-1], {}
    out["make.date"], out["make.cpu"] = r["date"][:10], f"{r['cpus']} cores ({r['cpu']})"
    for phase, seconds in r["phases"].items():
        out[f"make.{phase}"] = _min_s(seconds)
    main, vllm = r["pytest"] or {}, r["pytest_vllm"] or {}
    out["make.pytest"], out["make.pytest.time"] = _counts(main), _min_s(main.get("seconds", 0))
    out["make.tests"] = f"{sum(main.get(k, 0) for k in ('passed', 'failed', 'skipped', 'errors')):,}"
    out["make.vllm"], out["make.vllm.time"] = _counts(vllm), _min_s(vllm.get("seconds", 0))
    out["make.skipped"] = ", ".join(f"{x['file']}" + (f" ({x['n']})" if x["n"] > 1 else "") for x in r["skipped"])
    out["book.pages"], out["book.mib"] = f"{r['book_pages']}", f"{r['book_mib']:.1f} MiB"
    return out


def test_fast_numbers() -> dict[str, str]:
    """results/test_fast.jsonl (benchmarks/bench_test_fast.py), its newest line: `make test-fast`'s median wall time
    over its repeats, its counts, the budget and the machine (book/install.md)."""
    lines = all_lines("test_fast")
    if not lines:
        return {}
    r = lines[-1]
    return {"fast.wall": _min_s(r["wall_seconds_median"]), "fast.cpu": _min_s(r["cpu_seconds_median"]),
            "fast.pytest": _counts(r["pytest"]), "fast.repeats": f"{len(r['repeats'])}",
            "fast.budget": _min_s(r["budget_seconds"]), "fast.date": r["date"][:10],
            "fast.cpu_model": f"{r['cpus']} cores ({r['cpu']})",
            "fast.load": f"{max(x['load_before'] for x in r['repeats']):.1f}"}


def first_run_numbers() -> dict[str, str]:
    """results/first_run.jsonl (benchmarks/bench_first_run.py), its newest line: what a first demo spends once,
    converting the embedded model and making its games, medians over fresh caches (book/demo.md)."""
    lines = all_lines("first_run")
    if not lines:
        return {}
    r = lines[-1]
    return {"first.convert": _min_s(r["convert_seconds_median"]), "first.games": _min_s(r["games_seconds_median"]),
            "first.n": f"{r['games']}", "first.repeats": f"{len(r['repeats'])}"}


def alfworld_numbers() -> dict[str, str]:
    """results/alfworld_embedded.jsonl (bench_alfworld_embedded.py: the embedded model on generated ALFWorld games,
    base, SFT and a few PPO steps, each stage timed) and results/alfworld_step.jsonl (bench_alfworld_step.py: one env
    step, ours against the stock envs), their newest lines (book/environments.md)."""
    out = {}
    if lines := all_lines("alfworld_embedded"):
        st = lines[-1]["stages"]
        for split in ("train", "unseen"):
            g = st[f"games.{split}"]
            out[f"alf.{split}.n"], out[f"alf.{split}.s"] = f"{g['n']}", _min_s(g["seconds"])
            out[f"alf.{split}.plans"] = f"{g['floor_plans']}"
            out[f"alf.{split}.candidates"] = f"{g['n'] + sum(g['skipped'].values())}"
            out[f"alf.{split}.skipped"] = "; ".join(f"{why}: {n}" for why, n in sorted(g["skipped"].items())) or "none"
            out[f"alf.{split}.per_game"] = f"{g['seconds'] / g['n']:.1f} s"
        out["alf.walk"] = f"{st['games.train']['walkthrough_mean']:.1f}"
        for stage in ("base", "sft"):
            e = st[f"eval.{stage}"]
            out[f"alf.{stage}.won"] = f"{sum(g['won'] for g in e['per_game'])} / {e['n_games']}"
            out[f"alf.{stage}.invalid"] = f"{e['invalid_rate']:.0%}"
            out[f"alf.{stage}.eval_s"] = _min_s(e["seconds"])
        out["alf.turns"] = f"{st['eval.base']['max_turns']}"
        out["alf.base.reply"] = st["eval.base"]["per_game"][0]["actions"][0]
        first = st["eval.sft"]["per_game"][0]   # the game's name: task type-object-...-receptacle-floor plan
        out["alf.sft.object"] = first["game"].split("-")[1].lower()
        out["alf.sft.example"] = ", ".join(f"`{a}`" for a in first["actions"][:3])
        sft = st["sft"]
        out["alf.sft.s"], out["alf.sft.examples"] = _min_s(sft["seconds"]), f"{sft['examples']}"
        out["alf.sft.loss"] = f"{sft['train_loss'][0]:.2f} → {sft['train_loss'][-1]:.2f}"
        out["alf.sft.rss"] = f"{st['sft']['peak_rss_gib']:.1f} GB"
        out["alf.sft.batch"] = f"{sft['batch_size']}"
        steps = st["rl"]["steps"]
        out["alf.rl.n"], out["alf.rl.episodes"] = f"{len(steps)}", f"{steps[0]['episodes']}"
        out["alf.rl.invalid"] = " → ".join(f"{s['invalid_rate']:.2f}" for s in steps)
        out["alf.rl.won"] = f"{sum(round(s['success_rate'] * s['episodes']) for s in steps)}"
        out["alf.rl.env_errors"] = f"{sum(s['env_errors'] for s in steps)}"
        for part in ("step", "rollout", "update"):
            out[f"alf.rl.{part}"] = _min_s(statistics.median(s[f"{part}_seconds"] for s in steps))
        out["alf.rl.tokens"] = f"{max(s['seq_len_max'] for s in steps):,}"
        out["alf.rl.rss"] = f"{st['rl']['peak_rss_gib']:.1f} GB"
        out["alf.rl.checkpointing"] = "with" if lines[-1]["config"]["gradient_checkpointing"] else "without"
    if lines := all_lines("alfworld_step"):
        r = lines[-1]
        env = {name: e["step_ms_median"] for name, e in r["envs"].items()}
        ours = env["AlfWorldEnv expert=walkthrough"]
        out["alf.step.ours"], out["alf.step.stock"] = f"{ours:.2f} ms", f"{env['stock AlfredTWEnv (no expert)']:.1f} ms"
        out["alf.step.x"] = _x(env["stock AlfredTWEnv (no expert)"] / ours, 0)
        out["alf.step.pddl_x"] = _x(env["stock PddlEnv+AlfredDemangler"] / ours, 0)
        out["alf.step.games"], out["alf.step.n"] = f"{r['games']}", f"{r['steps']}"
    return out


def chapter_numbers() -> dict[str, str]:
    """results/chapter_costs.json (agentrl_lib.notebook.ChapterCost; `make chapter-costs` and `make
    execute-notebooks`): each chapter's last measured wall time in full and fast mode and its full-mode peak memory,
    for the README's chapter table (keys chapter.<name>.full / .fast / .peak)."""
    from experiments.benchmarks import results_lines

    path = results_lines.RESULTS / "chapter_costs.json"
    out = {}
    for chapter, modes in (json.loads(path.read_text()) if path.exists() else {}).items():
        for mode, got in modes.items():
            out[f"chapter.{chapter}.{mode}"] = f"{got['wall_seconds'] / 60:.1f} min"
        if "full" in modes:
            out[f"chapter.{chapter}.peak"] = f"{modes['full']['peak_gib']:.1f} GiB"
    return out


def numbers() -> dict[str, str]:
    """Every marked number of the pages (module docstring) by KEY, as the page shows it (e.g. 'trl.step' → '2.1×')."""
    return {**rl_step_numbers(), **rollout_numbers(), **update_numbers(), **sweep_and_demo_numbers(), **env_numbers(),
            **make_test_numbers(), **test_fast_numbers(), **first_run_numbers(), **alfworld_numbers(),
            **chapter_numbers()}


def glue_name(key: str) -> str:
    """The name book/benchmarks.md glues numbers()[KEY] under and its prose writes as `{name}`
    (agentrl_lib.notebook.glue takes lower-case identifiers): every `.` and `-` of KEY an underscore, e.g. 'trl.step'
    → 'trl_step'."""
    return re.sub(r"[.-]", "_", key)


def with_numbers(text: str, values: dict[str, str] | None = None) -> str:
    """`text` with every marked number replaced by its value from numbers() (or `values`); raises ValueError naming
    the markers whose KEY is unknown."""
    values = numbers() if values is None else values
    unknown = sorted({m.group(1) for m in MARK.finditer(text)} - set(values))
    if unknown:
        raise ValueError(f"markers with no number in experiments/benchmarks/page_numbers.py: {', '.join(unknown)}")
    return MARK.sub(lambda m: f"<!-- n:{m.group(1)} -->{values[m.group(1)]}<!-- /n -->", text)
