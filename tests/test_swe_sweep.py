"""The swe sweep around chapter 06: configs/swe.yaml trains on the submission's reward as given (reward.kind env;
dense's win cap inverts pass ratios above 2/3, the negative control), `results/regenerate.py swe --dry-run` plans the
part within its budget with train and held-out sets apart, and results/findings.py's SWE row follows the interval."""
from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

from agentrl_lib import rewards
from agentrl_lib.config import RunConfig

ROOT = Path(__file__).resolve().parent.parent


def _module(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _return(kind: str, p: float, won: bool = False) -> float:
    """The return of a 5-turn swe episode whose submission (the last turn) earned p."""
    return sum(rewards.turn_rewards(kind, [0.0] * 4 + [p], 1.0, won, [True] * 5))


def test_the_swe_config_trains_on_the_reward_as_given():
    cfg = RunConfig.load(ROOT / "configs" / "swe.yaml")
    cfg.validate()
    assert cfg.reward.kind == "env" and cfg.algo.advantage == "grpo" and cfg.algo.group_size >= 2
    ratios = [0.3, 0.6, 0.7, 0.9, 0.98]
    env = [_return(cfg.reward.kind, p) for p in ratios]
    assert env == pytest.approx(ratios) and env == sorted(env)  # the order of pass ratios is kept
    # negative control: dense caps a non-won total at 1 - p/2 (its one positive step), an order that falls above 2/3
    dense = [_return("dense", p) for p in ratios]
    assert dense[3] == pytest.approx(1 - 0.9 / 2) and dense[4] < dense[3] < dense[2]
    assert _return("dense", 0.98) < _return("dense", 0.6)


@pytest.mark.subprocess
def test_regenerate_swe_dry_run_plans_the_part_within_budget():
    out = subprocess.run([sys.executable, str(ROOT / "results" / "regenerate.py"), "swe", "--dry-run"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    text = out.stdout
    hours = float(re.search(r"swe part: about ([\d.]+) hours", text).group(1))
    assert 0 < hours <= 4.2 or "recorded" in text
    sweeps = [ln for ln in text.splitlines() if " sweep --base configs/swe.yaml" in ln]
    kinds = {re.search(r"env\.swe_reward=(\w+)", ln).group(1) for ln in sweeps}
    seeds = {int(re.search(r"--seeds (\d+)", ln).group(1)) for ln in sweeps}
    if sweeps:
        assert kinds == {"pass_ratio", "resolved"} and seeds == {0, 1, 2}
    held = [ln for ln in text.splitlines() if "make-games swe" in ln and "heldout" in ln]
    assert all("--split valid_unseen" in ln for ln in held)
    assert all("--split" not in ln for ln in text.splitlines() if "make-games swe" in ln and "swe-train" in ln)


def _records(pass_ratio, resolved):
    return [{"cell": {"env.swe_reward": kind}, "seed": s, "base_hash": "b", "eval": {"success_rate": v}, "steps": []}
            for kind, vals in (("pass_ratio", pass_ratio), ("resolved", resolved)) for s, v in enumerate(vals)]


@pytest.mark.parametrize("pass_ratio,resolved,verdict", [
    ([0.25, 0.375, 0.25], [0.0, 0.0, 0.125], "agrees"),
    ([0.0, 0.0, 0.125], [0.25, 0.375, 0.25], "disagrees"),
    ([0.0, 0.0, 0.0], [0.0, 0.0, 0.0], "no difference at this scale"),
    ([0.25], [0.0], "cannot tell yet"),
])
def test_findings_swe_row_follows_the_interval(pass_ratio, resolved, verdict):
    findings = _module("findings", ROOT / "results" / "findings.py")
    _, got = findings._difference(_records(pass_ratio, resolved), "env.swe_reward", "pass_ratio", "resolved", {}, 1)
    assert got.startswith(verdict)
    row = next(ln for ln in findings.findings_table().splitlines() if ln.startswith("| SWE:"))
    assert "22%" in row and "4.2%" in row and "06_swe" in row
