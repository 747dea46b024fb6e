"""The training loop: collect from environment workers, train one learner per agent.

``sync`` mode collects an epoch, then trains every agent: the reference, bit-identical for
every environment-worker layout. ``async`` mode hands each round's transitions to a
learner process (:mod:`parcat.train.async_learning`) that trains while collection goes on.
Environments run on across epochs; a checkpoint keeps the episodes in flight, so a
resumed run continues them exactly.
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
from parcat.train.async_learning import AsyncLearning
from parcat.train.config import LearningMode, TrainConfig
from parcat.train.epoch_stats import EpochStats, episode_summary
from parcat.train.learner import Learner, Transitions, train_each
from parcat.train.metrics import RunLoggers, check_installed
from parcat.train.mlp import blas_pinned
from parcat.train.plan import TrainPlan, plan_training
from parcat.train.recipes import (
    SHARED,
    check_builds,
    check_trainable,
    learner_inputs,
    make_recipes,
)
from parcat.train.runs import (
    Checkpointer,
    has_checkpoint,
    init_weights,
    load_in_flight,
    nan_returns,
    restore,
)
from parcat.train.vecenv import InFlight, VecEnv

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

    A layout ``config`` leaves open is planned (:func:`~parcat.train.plan.plan_training`):
    :attr:`config` has it filled in, :attr:`plan` says why. ``resume`` continues from the
    run directory's last checkpoint, if there is one yet (:attr:`resumed`). ``on_epoch``
    gets each epoch's statistics, ``on_event`` each ``(collect | train_start | train_end,
    epoch)``, and with ``config.render`` ``on_frame`` the first environment as text.
    """

    def __init__(self, config: TrainConfig, resume: bool = False,
                 on_epoch: Callable[[EpochStats], None] | None = None,
                 on_event: Callable[[str, int], None] | None = None,
                 on_frame: Callable[[str], None] | None = None) -> None:
        self.mission: Mission = load_mission(config.mission, dict(config.overrides))
        check_trainable(self.mission, config)  # before any worker starts
        check_installed(config.loggers)
        self.recipes = make_recipes(self.mission, config)
        check_builds(self.recipes)  # a foreign constructor that exits ends a worker, not us
        built = {name: recipe.build() for name, recipe in self.recipes.items()}
        self.learners: dict[Any, Learner] = {
            spec.agent_id: built[SHARED if SHARED in built else str(spec.agent_id)]
            for spec in self.mission.agents()}
        self.unique_learners = list(built.items())
        """(name, learner) once per learner (``shared`` with a shared learner)."""
        agents = [spec.agent_id for spec in self.mission.agents()]
        self._agent_index = {agent: i for i, agent in enumerate(agents)}
        self._learner_obs = learner_inputs(agents, config.shared_learner)
        """What an agent's learner observes of its observation."""
        self.plan: TrainPlan = plan_training(config, self.mission)
        self.config = config = replace(config.with_epochs_for(self.plan.num_envs),
                                       env_workers=self.plan.env_workers,
                                       train_threads=self.plan.train_workers)
        self.on_epoch, self.on_frame = on_epoch, on_frame
        self.on_event = on_event or (lambda event, epoch: None)
        self._learning: AsyncLearning | None = None
        self._pool: ThreadPoolExecutor | None = None
        # a run stopped before its first checkpoint resumes by starting over
        self.resumed = resume = resume and has_checkpoint(config.run_path)
        self._ray_connected = config.backend == "ray" and raycluster.connect(config.address)
        try:
            self.vec = make_vecenv(self.mission, config, self.plan)
            self.start_epoch = 0
            self.in_flight: InFlight | None = None
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

    def run(self) -> TrainReport:
        """Train for the configured epochs, checkpointing as configured; Ctrl-C (or
        SIGTERM) stops after a checkpoint of the last finished epoch (``interrupted``)."""
        with blas_pinned():  # every matrix here is small: more threads only cost
            return self._run()

    def _run(self) -> TrainReport:
        report = TrainReport(self.config)
        if self.config.mode is LearningMode.ASYNC:
            self._learning = AsyncLearning(
                dict(self.unique_learners), self.recipes, self.config.gradient_steps,
                self.on_event, parallel=self.config.parallel_training,
                threads=self.config.train_threads)
        learning = self._learning
        checkpoints = self._checkpointer()
        self._finished = self._saved = self.start_epoch
        self._began = time.perf_counter() - self.metrics.time_offset
        try:
            self._start()
            for epoch in range(self.start_epoch, self.config.epochs):
                self._run_epoch(epoch, checkpoints, report)
        except KeyboardInterrupt:
            SHUTTING_DOWN.set()
            report.interrupted = True
            written = self._save_interrupted(checkpoints)
            report.checkpoint = str(written) if written else report.checkpoint
        except WorkerError as exc:  # an environment that keeps crashing: keep what was learnt
            written = checkpoints.save_interrupted(self._finished, self._saved)
            kept = written or report.checkpoint
            raise WorkerError(f"training stopped after {self._finished} epoch(s): {exc}; " + (
                f"the last checkpoint is {kept}" if kept else "no checkpoint was written"
            )) from exc
        finally:
            if learning is not None:
                learning.close()
            self._learning = None
            self.metrics.close()
            self.close()
        return report

    def _checkpointer(self) -> Checkpointer:
        return Checkpointer(self.config, self.mission, self.learners, self._learner_obs,
                            self.vec, self.recipes)

    def _start(self) -> None:
        """Start the environments' episodes (resumed: continue the saved ones)."""
        self._obs = (self.vec.restore(self.in_flight) if self.in_flight is not None
                     else self.vec.reset())
        self._reset_states(np.ones(self.vec.num_envs, dtype=bool))

    def _run_epoch(self, epoch: int, checkpoints: Checkpointer, report: TrainReport) -> None:
        """One epoch: collect and train, log it, evaluate and checkpoint it when due."""
        learning = self._learning
        stats = self._epoch(epoch)
        due = (epoch + 1) % self.config.checkpoint_every == 0 or epoch + 1 == self.config.epochs
        if due and learning is not None:
            learning.sync_states()
        stats.eval_return = (checkpoints.evaluate() if due else
                             nan_returns(self.config.eval_episodes, self._agent_index))
        stats.best_eval_return = checkpoints.best_after(stats.eval_return, stats.epoch)
        stats.best = checkpoints.best_record()
        with checkpoint.signals_deferred():  # the log, the capture and the report agree
            self.metrics.write(stats.to_dict())
            if due or learning is None:
                checkpoints.finished(epoch + 1, stats.eval_return if due else None)
            self._finished = epoch + 1
            report.epochs.append(stats)
        if self.on_epoch is not None:
            self.on_epoch(stats)
        if due:
            report.checkpoint = str(checkpoints.save())
            self._saved = epoch + 1

    def _save_interrupted(self, checkpoints: Checkpointer) -> Path | None:
        """The checkpoint of the last finished epoch, if none has it yet; a learner process
        gone or silent for :data:`LEARNER_SYNC_S` leaves the last one written."""
        learning = self._learning
        if learning is not None and self._finished > self._saved:
            try:
                learning.sync_states(LEARNER_SYNC_S)
            except WorkerError:
                return None
        return checkpoints.save_interrupted(self._finished, self._saved,
                                            live=learning is not None)

    def _epoch(self, epoch: int) -> EpochStats:
        start = time.perf_counter()
        learning, obs = self._learning, self._obs
        discarded_before = self.vec.discarded
        finished: list[tuple[int, list[float]]] = []
        for _ in range(self.config.steps_per_epoch):
            self.on_event("collect", epoch)
            actions = {a: self.learners[a].act(self._learner_obs(a, obs[a]), explore=True)
                       for a in self.vec.agents}
            self.vec.step(actions)
            self._observe(obs, actions)
            if learning is not None:
                learning.step_done()
            obs = self.vec.gather("obs")
            finished += self.vec.finished_episodes()
            began = self.vec.reset_mask()
            if began.any():
                self._reset_states(began)
            if self.config.render and self.on_frame is not None:
                frame = self.vec.render()
                if frame is not None:
                    self.on_frame(frame)
        self._obs = obs
        collect_s = time.perf_counter() - start
        idle_s, overlap = 0.0, []
        if learning is None:
            begin = time.perf_counter()
            self.on_event("train_start", epoch)
            metrics = train_each(dict(self.unique_learners), self.config.gradient_steps, self._pool)
            self.on_event("train_end", epoch)
            train_s = time.perf_counter() - begin
        else:
            if (epoch + 1) % self.config.train_interval == 0:
                idle_s = learning.submit(epoch)
            metrics, train_s = learning.metrics, learning.train_s
            overlap = learning.take_overlaps()
        steps = self.config.steps_per_epoch * self.vec.num_envs
        return EpochStats(
            epoch=epoch + 1, env_steps=steps, **episode_summary(finished, self.vec.agents),
            loss={name: float(m.get("loss", math.nan)) for name, m in metrics.items()},
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

    def _observe(self, obs: dict[Any, np.ndarray], actions: dict[Any, np.ndarray]) -> None:
        final, rew, term, trunc, alive = (self.vec.gather(kind) for kind in
                                          ("final", "rew", "term", "trunc", "alive"))
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
                name = SHARED if self.config.shared_learner else str(agent)
                self._learning.record(name, batch)
            else:
                self.learners[agent].observe(batch)

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
    """Environment workers laid out as ``plan`` (default: planned) says. In sync mode this
    process steps a share of the environments too; in async mode the learner process needs
    a core, so this process steps none and never spins."""
    plan = plan or plan_training(config, mission)
    asynchronous = config.mode is LearningMode.ASYNC
    # an environment from outside parcat never steps here: its crash would end training
    return VecEnv(mission, plan.env_workers, config.envs_per_worker, config.seed,
                  spin=plan.spin, local_share=not asynchronous and not is_foreign(mission),
                  parent_spin=plan.spin and not asynchronous, backend=config.backend.value,
                  num_envs=plan.num_envs)
