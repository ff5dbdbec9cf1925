"""README.md as a front page: short, its links and picture resolve, its picture is chapter 00's stored output, and its
`run_rl` example runs as written (with a tiny random model, 2 games and 1 step instead of the embedded model's 12)."""
import dataclasses
import re
from pathlib import Path

import pytest

import agentrl_lib.envs.textworld as textworld
import agentrl_lib.run

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def _build_module():
    from experiments import book_build

    return book_build


def test_readme_is_a_front_page():
    text = README.read_text()
    # 150 lines before the findings table (one row per finding of the two papers, results/findings.py) joined it
    assert len(text.splitlines()) <= 185, "README.md is a front page: move sections to book/*.md and link them"
    first_block = text.split("```")[1]
    assert "make demo" in first_block and "make test" in first_block


def test_readme_links_and_picture_resolve():
    """Every relative link or image of README names a file of the repository, and every guide page of the book
    (book/build.py GUIDES) is linked from it."""
    text = README.read_text()
    targets = [t.split("#")[0] for t in re.findall(r"\]\(([^)\s]+)\)", text) if not re.match(r"^[a-z]+:", t)]
    missing = [t for t in targets if t and not (ROOT / t).exists()]
    assert targets and not missing, missing
    guides = _build_module().GUIDES
    assert [g for g in guides if f"book/{g}.md" not in targets] == []


def test_readme_picture_is_chapter_00s_output():
    build = _build_module()
    assert build.README_FIGURE.read_bytes() == build.quickstart_figure(), (
        "README's picture differs from chapter 00's stored learning curves: python book/build.py --readme-figure")


@pytest.mark.slow
@pytest.mark.trains
@pytest.mark.subprocess
def test_readme_run_rl_example_runs(tiny_model_dir, tmp_path, monkeypatch):
    """The README's Python block, executed as written in a fresh folder, with the budget cut: 2 games per set instead
    of 16, 1 RL step of 1 game, the tiny model instead of runs/demo/sft, envs in-process."""
    (block,) = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    assert len(block.strip().splitlines()) <= 15
    real_make, real_run = textworld.make_textworld_games, agentrl_lib.run.run_rl
    calls = []

    def small_games(out, n, seed=0, **kw):
        return real_make(out, 2, seed, progress=False, **kw)

    def small_run(config, run_dir, init=None, **kw):
        calls.append(init)
        config = dataclasses.replace(
            config, env=dataclasses.replace(config.env, process_pool=False),
            train=dataclasses.replace(config.train, steps=1, games_per_step=1, max_new_tokens=4))
        return real_run(config, run_dir, init=tiny_model_dir, progress=False, **kw)

    monkeypatch.setattr(textworld, "make_textworld_games", small_games)
    monkeypatch.setattr(agentrl_lib.run, "run_rl", small_run)
    monkeypatch.chdir(tmp_path)
    ns = {"__name__": "readme"}
    exec(compile(block, str(README), "exec"), ns)
    assert calls == ["runs/demo/sft"]
    summary = ns["summary"]
    assert summary["eval"]["n_games"] == 2 and 0 <= summary["eval"]["success_rate"] <= 1
    run_dir = tmp_path / "runs" / "ppo"
    for name in ("config.yaml", "metrics.jsonl", "eval.json"):
        assert (run_dir / name).is_file(), name
    assert list((run_dir / "tensorboard").glob("events.out.tfevents.*")), "report_to='tensorboard' wrote nothing"


def _table_numbers(markdown: str, header: str) -> list[list[float]]:
    """The numeric cells of each row of the markdown table whose header row starts with `header`."""
    lines = markdown.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {header}"))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip().strip("*").rstrip("%") for c in line.strip("|").split("|")[1:]]
        rows.append([float(c) for c in cells])
    return rows


def _chapter_00_stage_table() -> str | None:
    """Chapter 00's stored stage table (base / SFT / RL on its held-out games), if it is stored in full mode."""
    import json
    nb = json.loads((ROOT / "notebooks" / "00_quickstart.ipynb").read_text())
    for cell in nb["cells"]:
        for out in cell.get("outputs", []):
            text = "".join(out.get("text", "")) or "".join(out.get("data", {}).get("text/markdown", ""))
            if text.startswith("| stage |") or "\n| stage |" in text:
                return text if "(full mode)" in text else None
    return None


def check_demo_table(readme: str, chapter_table: str) -> None:
    """README's demo table (and book/demo.md's) holds the three stages with chapter 00's numbers: the same budget
    (demo.DemoBudget) and seed, so the same run."""
    want = _table_numbers(chapter_table, "stage")
    got = _table_numbers(readme, "held-out games (16)")
    assert len(got) == len(want) == 3, f"README's demo table has {len(got)} rows; base, SFT and RL expected"
    assert all(g == pytest.approx(w, abs=0.051) for g, w in zip(got, want)), (
        f"README's demo table {got} differs from chapter 00's {want}: copy `make demo`'s table")


def test_readme_demo_table_is_chapter_00s():
    table = _chapter_00_stage_table()
    if table is None:
        pytest.skip("chapter 00 is stored in fast mode: its table is not the demo's")
    check_demo_table(README.read_text(), table)
    check_demo_table((ROOT / "book" / "demo.md").read_text(), table)
    without_rl = "\n".join(line for line in README.read_text().splitlines() if not line.startswith("| after RL"))
    with pytest.raises(AssertionError, match="has 2 rows"):  # negative control: the row this test was written for
        check_demo_table(without_rl, table)
