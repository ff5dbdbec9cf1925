"""The worker of tests/test_distributed.py: `agentrl train` (cli.main) in each process of an `accelerate launch` job, on
recorded episodes instead of a rollout. Not collected by pytest (no test_ prefix); the test imports its helpers.

    accelerate launch --config_file configs/accelerate/cpu_2proc.yaml tests/ddp_worker.py SPEC.json

SPEC.json: {"episodes": PATH (a pickle: one list of Trajectory per step, in the single-process order),
            "runs": [{"argv": [...agentrl train flags...], "no_grad_sync": false, "replay": true}, ...]}
replay: false runs the real rollout (each rank plays its share of the games).
no_grad_sync: the negative control, DDP's gradient all-reduce off (as inside no_sync()): each rank steps on its own
shard.
Each rank saves its final weights (policy + value head) to RUN/rank{r}.pt (save_final_weights).
"""
from __future__ import annotations

import copy
import json
import pickle
import sys

import torch


def recorder(real_rollout, steps: list):
    """A rollout that calls the real one and appends a copy of each step's trajectories to `steps`."""
    def rollout(*args, **kwargs):
        trajs, stats = real_rollout(*args, **kwargs)
        steps.append(copy.deepcopy(trajs))
        return trajs, stats
    return rollout


def replayer(steps: list):
    """A rollout that returns, at its k-th call, the recorded episodes of step k whose groups it is asked for (a rank
    asks for its share of the groups), checking that they are the games asked for."""
    from agentrl_lib.rollout import RolloutStats

    calls = iter(steps)

    def rollout(generator, tokenizer, pool, games, *, groups=None, **kwargs):
        wanted = set(groups)
        trajs = [copy.deepcopy(t) for t in next(calls) if t.group in wanted]
        assert [t.game for t in trajs] == list(games), "the replayed episodes are not the games asked for"
        return trajs, RolloutStats(episodes=len(trajs), turns=sum(t.n_turns for t in trajs),
                                   generated_tokens=sum(sum(t.mask) for t in trajs))
    return rollout


def save_final_weights(trainer) -> None:
    """RUN/rank{r}.pt: the policy's and the value head's weights as this rank holds them at the end."""
    state = {f"policy.{k}": v.detach().cpu().clone() for k, v in trainer.policy.state_dict().items()}
    if trainer.value_head is not None:
        state.update({f"value_head.{k}": v.detach().cpu().clone() for k, v in trainer.value_head.state_dict().items()})
    torch.save(state, trainer.run_dir / f"rank{trainer.dp.rank}.pt")


def patch_close(trainer_cls):
    """Make Trainer.close save the final weights first (save_final_weights); returns the original close."""
    original = trainer_cls.close

    def close(self):
        save_final_weights(self)
        original(self)
    trainer_cls.close = close
    return original


def main(spec_path: str) -> int:
    from agentrl_lib import cli, distributed
    from agentrl_lib import trainer as trainer_mod

    spec = json.loads(open(spec_path).read())
    with open(spec["episodes"], "rb") as f:
        steps = pickle.load(f)
    patch_close(trainer_mod.Trainer)
    prepare = distributed.DataParallel.prepare

    def prepare_no_sync(self, module):  # the negative control: DDP never all-reduces (what no_sync() does, for good)
        model = prepare(self, module)
        model.require_backward_grad_sync = False
        return model

    real_rollout = trainer_mod.rollout
    for run in spec["runs"]:
        trainer_mod.rollout = replayer(steps) if run.get("replay", True) else real_rollout
        distributed.DataParallel.prepare = prepare_no_sync if run.get("no_grad_sync") else prepare
        rc = cli.main(run["argv"])
        if rc:
            return rc
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
