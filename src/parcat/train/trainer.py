"""The training loop: collect from environment workers, train one learner per agent.

``sync`` mode collects an epoch, then trains every agent: the reference, bit-identical for
every environment-worker layout. Environments run on across epochs (reset once, then when
an episode ends); a checkpoint keeps the episodes in flight (:mod:`parcat.train.inflight`)
so a resumed run continues them exactly. ``async`` mode hands each round's transitions to a
learner process (:mod:`parcat.train.learner_process`), which trains its own copies while
collection goes on; new weights come back whole and are swapped into the acting learners
between two steps.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from parcat.core import raycluster
from parcat.core.errors import WorkerError
from parcat.envs.missions import Mission, is_foreign, load_mission
from parcat.ipc.process import SHUTTING_DOWN
from parcat.policies import checkpoint
from parcat.train import inflight
from parcat.train.async_learning import AsyncLearning
from parcat.train.checkpointing import Checkpointer
from parcat.train.config import LearningMode, TrainConfig
from parcat.train.epoch_stats import EpisodeTally, EpochStats
from parcat.train.greedy_eval import nan_returns
from parcat.train.learner import Learner, Transitions
from parcat.train.loggers import RunLoggers, check_installed
from parcat.train.plan import TrainPlan, plan_training
from parcat.train.recipes import (
    LearnerRecipe,
    check_builds,
    check_trainable,
    make_recipes,
    with_agent_id,
)
from parcat.train.rounds import losses_of, train_each
from parcat.train.runs import has_checkpoint, init_weights, restore
from parcat.train.vecenv import VecEnv

EventLog = Callable[[str, int], None]
LEARNER_SYNC_S = 60.0
"""How long an interrupted async run waits for the learner process's round and state."""
__all__ = ["EpochStats", "TrainReport", "Trainer"]


@dataclass
class TrainReport:
    """The outcome of a training run."""

    config: TrainConfig
    epochs: list[EpochStats] = field(default_factory=list)
    checkpoint: str = ""
    interrupted: bool = False


class Trainer:
    """Runs ``config``; build it, then call :meth:`run`.

    Args:
        config: The training configuration; a layout it leaves open (``env_workers``
            not given) is planned by :func:`~parcat.train.plan.plan_training` from the
            environment's measured step, the free CPUs and ``jobs``, as ``parcat train``
            plans it. :attr:`config` is the config with the layout filled in; :attr:`plan`
            says why (and how many environments step: :attr:`TrainPlan.num_envs`).
        resume: Continue from the last checkpoint in the run directory; without one yet
            (no directory, or only a metrics log), start from epoch 0 (:attr:`resumed`
            says which).
        on_epoch: Called with each epoch's statistics (live display).
        on_event: Called with ``(event, epoch)`` — ``collect``, ``train_start``,
            ``train_end`` — so tests can see collection and learning overlap.
        on_frame: With ``config.render``, called with the first environment drawn as
            text after every step.
    """

    def __init__(self, config: TrainConfig, resume: bool = False,
                 on_epoch: Callable[[EpochStats], None] | None = None,
                 on_event: EventLog | None = None,
                 on_frame: Callable[[str], None] | None = None) -> None:
        self.mission: Mission = load_mission(config.mission, dict(config.overrides))
        check_trainable(self.mission, config)  # before any worker starts
        check_installed(config.loggers)
        self.recipes: dict[str, LearnerRecipe] = make_recipes(self.mission, config)
        check_builds(self.recipes)  # a foreign constructor that exits ends a worker, not us
        learners = make_learners(self.mission, self.recipes)  # sizes and options checked
        self._agent_index = {spec.agent_id: i for i, spec in enumerate(self.mission.agents())}
        self.plan: TrainPlan = plan_training(config, self.mission)
        config = replace(config, env_workers=self.plan.env_workers,
                         train_threads=self.plan.train_workers)
        self.config = config
        self.on_epoch = on_epoch
        self.on_event = on_event or (lambda event, epoch: None)
        self.on_frame = on_frame
        self._learning: AsyncLearning | None = None
        self._pool: ThreadPoolExecutor | None = None
        # a run stopped before its first checkpoint resumes by starting over
        self.resumed = resume = resume and has_checkpoint(config.run_path)
        self._ray_connected = config.backend == "ray" and raycluster.connect(config.address)
        try:
            self.vec = make_vecenv(self.mission, config, self.plan)
            self.learners = learners
            self.start_epoch = 0
            self.in_flight: inflight.InFlight | None = None
            """The episodes a resumed run continues (``None``: start new ones)."""
            if resume:
                self.start_epoch = restore(config.run_path, self.learners, config)
                self.in_flight = load_in_flight(config.run_path, self.vec)
            elif config.init_from:
                init_weights(config.init_from, self.learners)
            self.metrics = RunLoggers(config, self.start_epoch if resume else None,
                                      self.vec.num_envs)
        except BaseException:
            self.close()  # no worker or shared memory outlives a failed start
            raise
        if config.parallel_training:
            self._pool = ThreadPoolExecutor(config.train_threads or len(self.unique_learners))

    @property
    def unique_learners(self) -> list[tuple[str, Learner]]:
        """(name, learner) once per learner (one in total with ``shared_learner``)."""
        if self.config.shared_learner:
            return [("shared", next(iter(self.learners.values())))]
        return [(str(a), learner) for a, learner in self.learners.items()]

    def run(self) -> TrainReport:
        """Train for the configured epochs; checkpoint as configured and at the end.

        Ctrl-C (or SIGTERM, which the CLI turns into one) stops the run after writing a
        checkpoint of the last finished epoch (:class:`~parcat.train.checkpointing.Checkpointer`);
        :attr:`TrainReport.interrupted` says so.
        """
        report = TrainReport(self.config)
        learning = None
        if self.config.mode is LearningMode.ASYNC:
            learning = AsyncLearning(dict(self.unique_learners), self.recipes,
                                     self.config.train_steps, self.on_event,
                                     parallel=self.config.parallel_training,
                                     threads=self.config.train_threads)
        self._learning = learning
        checkpoints = Checkpointer(
            self.config, self.mission, self.learners, self._learner_obs,
            lambda: {inflight.FILE: self.vec.in_flight().to_arrays()}, self.recipes)
        self._finished = self._saved = self.start_epoch
        self._began = time.perf_counter() - self.metrics.time_offset
        try:
            if self.in_flight is not None:
                self._obs = self.vec.restore(self.in_flight)
            else:
                self._obs = self.vec.reset()
            self._reset_states(np.ones(self.vec.num_envs, dtype=bool))
            for epoch in range(self.start_epoch, self.config.epochs):
                self._run_epoch(epoch, learning, checkpoints, report)
        except KeyboardInterrupt:
            SHUTTING_DOWN.set()
            report.interrupted = True
            written = self._save_interrupted(checkpoints, learning, self._finished, self._saved)
            report.checkpoint = str(written) if written else report.checkpoint
        except WorkerError as exc:  # an environment that keeps crashing: keep what was learnt
            finished = self._finished
            written = checkpoints.save_interrupted(finished, self._saved)  # a captured epoch only
            kept = written or report.checkpoint
            raise WorkerError(f"training stopped after {finished} epoch(s): {exc}; " + (
                f"the last checkpoint is {kept}" if kept else "no checkpoint was written"
            )) from exc
        finally:
            if learning is not None:
                learning.close()
            self._learning = None
            self.metrics.close()
            self.close()
        return report

    def _run_epoch(self, epoch: int, learning: AsyncLearning | None, checkpoints: Checkpointer,
                   report: TrainReport) -> None:
        """One epoch: collect and train, log it, evaluate and checkpoint it when due."""
        stats = self._epoch(epoch, learning)
        due = (epoch + 1) % self.config.checkpoint_every == 0 or epoch + 1 == self.config.epochs
        if due and learning is not None:
            learning.sync_states()
        stats.eval_return = (checkpoints.evaluate() if due else
                             nan_returns(self.config.eval_episodes, self.vec.agents))
        report.epochs.append(stats)
        with checkpoint.signals_deferred():  # the log and the capture agree
            self.metrics.write(stats.to_dict())
            if due or learning is None:
                checkpoints.finished(epoch + 1, stats.eval_return if due else None)
            self._finished = epoch + 1
        if self.on_epoch is not None:
            self.on_epoch(stats)
        if due:
            report.checkpoint = str(checkpoints.save())
            self._saved = epoch + 1

    def _save_interrupted(self, checkpoints: Checkpointer, learning: AsyncLearning | None,
                          finished: int, saved: int) -> Path | None:
        """The checkpoint of the last finished epoch, if none has it yet (a second Ctrl-C
        during the write leaves the previous checkpoint whole). A learner process that is
        gone or does not answer in :data:`LEARNER_SYNC_S` leaves the last one written."""
        if learning is not None and finished > saved:
            try:
                learning.sync_states(LEARNER_SYNC_S)
            except WorkerError:
                return None
        return checkpoints.save_interrupted(finished, saved, live=learning is not None)

    def _epoch(self, epoch: int, learning: AsyncLearning | None) -> EpochStats:
        start = time.perf_counter()
        obs = self._obs
        discarded_before = self.vec.discarded
        tally = EpisodeTally(self.vec.agents)
        for _ in range(self.config.steps_per_epoch):
            self.on_event("collect", epoch)
            actions = {a: self.learners[a].act(self._learner_obs(a, obs[a]), explore=True)
                       for a in self.vec.agents}
            self.vec.step(actions)
            self._observe(obs, actions)
            if learning is not None:
                learning.step_done()
            obs = self.vec.gather("obs")
            tally.add(self.vec.finished_episodes())
            began = self.vec.reset_mask()
            if began.any():
                self._reset_states(began)
            if self.config.render and self.on_frame is not None:
                frame = self.vec.render()
                if frame is not None:
                    self.on_frame(frame)
        self._obs = obs
        collect_s = time.perf_counter() - start
        idle_s, train_s = 0.0, 0.0
        metrics: dict[str, dict[str, float]] = {}
        overlap: list[int] = []
        if learning is None:
            begin = time.perf_counter()
            metrics = self.train_all(epoch)
            train_s = time.perf_counter() - begin
        else:
            if (epoch + 1) % self.config.train_interval == 0:
                idle_s = learning.submit(epoch)
            metrics, train_s = learning.metrics, learning.train_s
            overlap = learning.take_overlaps()
        steps = self.config.steps_per_epoch * self.vec.num_envs
        return EpochStats(
            epoch=epoch + 1, env_steps=steps, **tally.summary(),
            loss=losses_of(metrics),
            learner_metrics={name: {k: v for k, v in m.items() if k != "loss"}
                             for name, m in metrics.items()},
            # a learner that does not explore by a rate (PPO samples its policy): none
            epsilon=float(getattr(next(iter(self.learners.values())), "exploration", math.nan)),
            collect_s=collect_s, train_s=train_s, idle_s=idle_s,
            env_steps_per_s=steps / collect_s if collect_s > 0 else 0.0,
            discarded_episodes=self.vec.discarded - discarded_before,
            overlap_steps=overlap, total_env_steps=(epoch + 1) * steps,
            time_s=time.perf_counter() - self._began,
            timestamp=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        )

    def _reset_states(self, mask: np.ndarray) -> None:
        """Clear per-environment memory of stateful learners where an episode began."""
        for _, learner in self.unique_learners:
            reset = getattr(learner, "reset_states", None)
            if reset is not None:
                reset(mask)

    def _learner_obs(self, agent: Any, obs: np.ndarray) -> np.ndarray:
        """What the agent's learner observes: a shared one also sees the agent's one-hot id."""
        if not self.config.shared_learner:
            return obs
        return with_agent_id(obs, self._agent_index[agent], len(self._agent_index))

    def _observe(self, obs: dict[Any, np.ndarray], actions: dict[Any, np.ndarray]) -> None:
        final, rew = self.vec.gather("final"), self.vec.gather("rew")
        term, alive = self.vec.gather("term"), self.vec.gather("alive")
        trunc = self.vec.gather("trunc")
        for agent in self.vec.agents:
            mask = alive[agent]
            if not mask.any():
                continue
            # each (agent, environment) pair is its own sequence, also for a shared learner
            env = self._agent_index[agent] * self.vec.num_envs + np.flatnonzero(mask)
            batch = Transitions(self._learner_obs(agent, obs[agent][mask]),
                                actions[agent][mask], rew[agent][mask],
                                self._learner_obs(agent, final[agent][mask]),
                                term[agent][mask], trunc[agent][mask], env)
            if self._learning is not None:
                name = "shared" if self.config.shared_learner else str(agent)
                self._learning.record(name, batch)
            else:
                self.learners[agent].observe(batch)

    def train_all(self, epoch: int) -> dict[str, dict[str, float]]:
        """Train every learner ``train_steps`` times; return each one's last metrics."""
        self.on_event("train_start", epoch)
        metrics = train_each(dict(self.unique_learners), self.config.train_steps, self._pool)
        self.on_event("train_end", epoch)
        return metrics

    def close(self) -> None:
        """Stop the environment workers and training threads (and a Ray cluster we started)."""
        vec = getattr(self, "vec", None)
        if vec is not None:
            vec.close()
        if self._ray_connected:
            raycluster.disconnect()
            self._ray_connected = False
        if self._pool is not None:
            self._pool.shutdown()


def make_vecenv(mission: Mission, config: TrainConfig, plan: TrainPlan | None = None) -> VecEnv:
    """Environment workers laid out for the learning mode, as ``plan`` (default: planned) says.

    Sync: this process steps a share of the environments while the workers step theirs.
    Async: the learner process needs a core, so this process steps no environments and never
    spins. Workers spin when the plan says they fit the cores (:class:`TrainPlan`).
    """
    plan = plan or plan_training(config, mission)
    asynchronous = config.mode is LearningMode.ASYNC
    # an environment from outside parcat never steps here: its crash would end training
    return VecEnv(mission, plan.env_workers, config.envs_per_worker, config.seed,
                  spin=plan.spin, local_share=not asynchronous and not is_foreign(mission),
                  parent_spin=plan.spin and not asynchronous, backend=config.backend.value,
                  num_envs=plan.num_envs)


def make_learners(mission: Mission, recipes: dict[str, LearnerRecipe]) -> dict[Any, Learner]:
    """Every agent's learner, built from :func:`~parcat.train.recipes.make_recipes`' recipes:
    its own, or the one ``shared`` by all."""
    shared = recipes["shared"].build() if "shared" in recipes else None
    return {spec.agent_id: recipes[str(spec.agent_id)].build() if shared is None else shared
            for spec in mission.agents()}


def load_in_flight(run_path: Any, vec: VecEnv) -> inflight.InFlight | None:
    """The episodes a checkpoint was running, if it kept them for ``vec``'s environments.

    A checkpoint without them (``save_run`` called without them) or for another number of
    environments starts new episodes.

    Raises:
        CheckpointError: the file is damaged or holds other agents' arrays.
    """
    arrays = checkpoint.load_run_arrays(run_path, inflight.FILE)
    if arrays is None:
        return None
    state = inflight.InFlight.from_arrays(arrays, vec.layouts, f"{run_path}/{inflight.FILE}")
    return state if state.num_envs == vec.num_envs else None
