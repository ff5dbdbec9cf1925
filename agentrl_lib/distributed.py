"""Data-parallel training across processes (DDP through accelerate), for `accelerate launch -m agentrl_lib.cli train`.

    accelerate launch --config_file configs/accelerate/cpu_2proc.yaml -m agentrl_lib.cli train --device cpu ...
    accelerate launch --config_file configs/accelerate/gpu_1node.yaml --num_processes 4 -m agentrl_lib.cli train ...

A process started without a launcher (no WORLD_SIZE > 1 in its environment) never builds an `Accelerator`:
`data_parallel()` returns a `SingleProcess`, a stand-in with the same methods (shard, gather and sum return their
input; backward is `loss.backward()`), so the trainer has one code path for one process and many.

What is sharded, and why (W processes, rank r = 0 … W−1, one RL step):

    1. rollout     rank r plays games[r·G/W : (r+1)·G/W] × group_size: whole groups, an equal share of the step's G
                   games (train.games_per_step must be a multiple of W), each rank with its own sampling seed.
                   The rollout (generation + env steps) is most of a step's time, so it is the part worth splitting.
    2. gather      every rank receives every trajectory, in the single-process order (gather_object, a few kB per
                   episode). Rewards, the StarPO-S group filter, the advantage estimator and the metrics row then
                   run on the GLOBAL batch on every rank, with the single-process code: group baselines, batch
                   statistics and the logged numbers are those of one process playing all G games.
    3. π_old/π_ref rank r forwards rows r, r+W, r+2W, … of the global batch (no grad); the results are gathered.
    4. update      every rank draws the same permutation (rank 0's, broadcast) and cuts the same global
                   minibatches of train.minibatch_size episodes; rank r trains on rows r, r+W, … of each minibatch
                   (an empty share forwards one row with its mask zeroed, so that every rank joins every all-reduce).
                   DDP averages the gradients during backward; clipping, AdamW and the weights are then identical on
                   every rank.

Loss normalisation. The single-process token-mean loss of a minibatch M (N = Σ_{i∈M,t} m_{i,t} policy tokens) is

    L = Σ_{i∈M} Σ_t m_{i,t} ℓ_{i,t} / N.

Rank r holds the rows M_r (M = ∪_r M_r) and computes its share with the GLOBAL count N as the denominator:

    L_r = Σ_{i∈M_r} Σ_t m_{i,t} ℓ_{i,t} / N,     so     Σ_r L_r = L.

DDP averages gradients over the W ranks, so each rank back-propagates W · L_r:  (1/W) Σ_r ∇(W · L_r) = ∇L.
A per-rank mean (Σ_{M_r} / N_r), even over equal numbers of episodes, would weight a token by 1/(W · N_r), which
differs between ranks whenever their episodes differ in length. Dr. GRPO's constant normaliser (algo.loss_agg
'seq_mean_token_sum_norm') takes the global episode count |M| in the same way (B · L_max). Every metric that
minibatch_loss returns is such a token mean, so the sum of the ranks' values is the single-process value.
tests/test_distributed.py checks that 2 processes × B/2 episodes give the weights of 1 process × B episodes (max |Δ| <
1e-5, fp32), and that without the gradient all-reduce they do not.

Only rank 0 writes (config.yaml, metrics.jsonl, checkpoints, learning_curve.png, eval.json) and holds the run lock;
every rank loads the same start (the same checkpoint on resume; DDP also broadcasts rank 0's weights when it
wraps the model). An exception on one rank ends that process; `accelerate launch` (torch.distributed.run) then
stops the others. FSDP and DeepSpeed are refused (DataParallel): each rank generates with the whole model, and
token_forward reaches into the backbone, which sharded wrappers do not allow.

Introduced in book/scaling.md "Data-parallel training (accelerate)".
"""
from __future__ import annotations

import os
import random

import torch

from .config import ConfigError, TrainConfig


def world_size() -> int:
    """Processes of the launched job, from the launcher's environment (WORLD_SIZE); 1 without a launcher."""
    return int(os.environ.get("WORLD_SIZE", "1") or 1)


def is_main_process() -> bool:
    """True in a single process and on rank 0 of a launched job (RANK): the process that writes and prints."""
    return int(os.environ.get("RANK", "0") or 0) == 0


def data_parallel(device: str = "auto") -> "DataParallel | SingleProcess":
    """The job's DataParallel when this process was started by a launcher with WORLD_SIZE > 1
    (`accelerate launch`, `torchrun`), else a SingleProcess (no accelerate, no process group)."""
    return DataParallel(device) if world_size() > 1 else SingleProcess()


class SingleProcess:
    """The data-parallel interface for a job of one process: every collective returns its input, the rank's rows are
    all rows, backward is `loss.backward()`. The trainer calls these methods unconditionally (DataParallel's
    docstrings say what each does with several processes)."""

    rank, world_size, is_main = 0, 1, True

    def check_train(self, train: TrainConfig) -> None:
        pass

    def shard_episodes(self, episode_games: list[str], group_ids: list[int], group_size: int
                       ) -> tuple[list[str], list[int]]:
        return episode_games, group_ids

    def seed_rollout(self, base_seed: int) -> None:
        pass

    def gather_rollout(self, trajs: list, stats):
        return trajs, stats

    def rows(self, idx: torch.Tensor) -> torch.Tensor:
        return idx

    def gather_rows(self, local: torch.Tensor, n: int) -> torch.Tensor:
        return local

    def broadcast(self, t: torch.Tensor) -> torch.Tensor:
        return t

    def sum(self, values: list[float]) -> list[float]:
        return list(values)

    def barrier(self) -> None:
        pass

    def prepare(self, module: torch.nn.Module) -> torch.nn.Module:
        return module

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()


class DataParallel:
    """This process's place in a data-parallel job, and the few collectives the trainer needs (see module docstring).

    Args:
        device: the run's model.device; a CPU device makes accelerate use the gloo backend (MULTI_CPU), CUDA uses
            NCCL with one GPU per process (`hardware.pick_device` maps 'auto' / 'cuda' to cuda:LOCAL_RANK).
    Attributes: accelerator, rank, world_size, is_main, device; model (the wrapped module, after prepare).
    Raises:
        ConfigError: the launch configured FSDP / DeepSpeed / another kind of parallelism than DDP.
    Note: `accelerate launch --cpu --num_processes 2` (or distributed_type MULTI_CPU) without MPI starts ONE process,
    which then trains alone; configs/accelerate/cpu_2proc.yaml is of type MULTI_GPU, which accelerate starts with
    torch.distributed.run, and this class asks for the CPU (gloo) when the run's device is the CPU.
    """

    def __init__(self, device: str = "auto"):
        from accelerate import Accelerator
        from accelerate.utils import DistributedType

        from .hardware import pick_device

        self.accelerator = Accelerator(cpu=pick_device(device).type == "cpu")
        kind = self.accelerator.state.distributed_type
        if kind not in (DistributedType.MULTI_CPU, DistributedType.MULTI_GPU):
            raise ConfigError(
                f"data-parallel training supports DDP only (accelerate's MULTI_GPU / MULTI_CPU), but accelerate set "
                f"up {kind.value} for this launch: use configs/accelerate/cpu_2proc.yaml or gpu_1node.yaml. FSDP / "
                "DeepSpeed are not supported (each process generates with the whole model); for models that do not "
                "fit one device see book/scaling.md 'Data-parallel training (accelerate)'")
        self.rank, self.world_size = self.accelerator.process_index, self.accelerator.num_processes
        self.is_main = self.accelerator.is_main_process
        self.device = self.accelerator.device

    # ------------------------------------------------------------------------------------------------ rollout
    def check_train(self, train: TrainConfig) -> None:
        """Raises ConfigError unless train.games_per_step is a multiple of the process count (each rank plays whole
        groups of an equal share of the games) and train.max_tokens_per_microbatch is 0 (ranks could cut different
        numbers of micro-batches and wait on each other's gradient all-reduce forever)."""
        games_per_step = train.games_per_step
        if games_per_step % self.world_size:
            up = -(-games_per_step // self.world_size) * self.world_size
            raise ConfigError(f"train.games_per_step ({games_per_step}) must be a multiple of the {self.world_size} "
                              f"processes (each plays whole groups of an equal share of the games): use "
                              f"--games-per-step {up}, or launch a number of processes that divides it")
        if self.world_size > 1 and train.max_tokens_per_microbatch:
            raise ConfigError("train.max_tokens_per_microbatch is single-process only: with data parallelism "
                              "each rank already trains on 1/W of every minibatch; use --max-tokens-per-"
                              "microbatch 0 (or --minibatch-size smaller) under accelerate launch")

    def shard_episodes(self, episode_games: list[str], group_ids: list[int], group_size: int
                       ) -> tuple[list[str], list[int]]:
        """This rank's episodes: the contiguous block of whole groups r·G/W … (r+1)·G/W − 1 (global group ids kept),
        so that concatenating the ranks' trajectories in rank order gives the single-process order."""
        per_rank = len(episode_games) // group_size // self.world_size * group_size
        mine = slice(self.rank * per_rank, (self.rank + 1) * per_rank)
        return episode_games[mine], group_ids[mine]

    def seed_rollout(self, base_seed: int) -> None:
        """Give each rank its own sampling stream: rank 0 keeps torch's seed (`base_seed`, already set by the trainer),
        rank r > 0 reseeds from (base_seed, r); otherwise all ranks would draw the same random numbers."""
        if self.rank:
            torch.manual_seed(random.Random(f"{base_seed}/{self.rank}").getrandbits(63))

    def gather_rollout(self, trajs: list, stats):
        """Every rank's trajectories, concatenated in rank order (the single-process order), and the combined
        RolloutStats: counts summed; generate / env / wall seconds and sampler_gap the largest rank's (the ranks
        run at the same time, so tokens_per_second becomes the job's throughput)."""
        from dataclasses import replace

        from accelerate.utils import gather_object

        parts = gather_object([(trajs, stats)])
        every = [t for ts, _ in parts for t in ts]
        ss = [s for _, s in parts]
        stats = replace(ss[0], episodes=sum(s.episodes for s in ss), turns=sum(s.turns for s in ss),
                        generated_tokens=sum(s.generated_tokens for s in ss),
                        generate_seconds=max(s.generate_seconds for s in ss),
                        env_seconds=max(s.env_seconds for s in ss), wall_seconds=max(s.wall_seconds for s in ss),
                        sampler_gap=max(s.sampler_gap for s in ss))
        return every, stats

    # ------------------------------------------------------------------------------------------ batch rows
    def rows(self, idx: torch.Tensor) -> torch.Tensor:
        """This rank's rows of a global batch or minibatch `idx` (1-D long): idx[r], idx[r + W], …"""
        return idx[self.rank::self.world_size]

    def gather_rows(self, local: torch.Tensor, n: int) -> torch.Tensor:
        """Inverse of rows(arange(n)): each rank's (n_r, ...) tensor of its rows → the (n, ...) tensor of all rows."""
        per = -(-n // self.world_size)  # rows of the largest share; shorter shares are padded for the all-gather
        pad = local.new_zeros((per - local.shape[0], *local.shape[1:]))
        every = self.accelerator.gather(torch.cat([local, pad]).contiguous())  # (W · per, ...), rank-major
        out = local.new_empty((n, *local.shape[1:]))
        for r in range(self.world_size):
            n_r = len(range(r, n, self.world_size))
            out[r::self.world_size] = every[r * per: r * per + n_r]
        return out

    # ------------------------------------------------------------------------------------------ collectives
    def broadcast(self, t: torch.Tensor) -> torch.Tensor:
        """Rank 0's `t` on every rank (same shape and dtype everywhere)."""
        from accelerate.utils import broadcast

        return broadcast(t.to(self.device).contiguous(), from_process=0).cpu()

    def sum(self, values: list[float]) -> list[float]:
        """The elementwise sum over ranks of a list of floats (same length on every rank)."""
        t = torch.tensor(values, dtype=torch.float64 if self.device.type == "cpu" else torch.float32,
                         device=self.device)
        return self.accelerator.reduce(t, reduction="sum").tolist()

    def barrier(self) -> None:
        """Wait until every rank gets here (e.g. until rank 0 has written a checkpoint)."""
        self.accelerator.wait_for_everyone()

    def prepare(self, module: torch.nn.Module) -> torch.nn.Module:
        """`module` wrapped for data parallelism (DistributedDataParallel; its weights are broadcast from rank 0).
        Only forwards through the wrapper get their gradients all-reduced. Kept as `self.model`."""
        self.model = self.accelerator.prepare(module)
        return self.model

    def backward(self, loss_share: torch.Tensor) -> None:
        """Back-propagate this rank's share L_r of the global loss (Σ_r L_r = L): DDP averages gradients over the W
        ranks, so the rank back-propagates W · L_r and every rank ends with ∇L (module docstring)."""
        self.accelerator.backward(loss_share * self.world_size)
