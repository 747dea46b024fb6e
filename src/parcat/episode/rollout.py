"""The episode path: ``EpisodeRunner.run`` is the one place an episode is stepped.

Parallel backends only decide *where* this code runs, and :mod:`parcat.stepping` where each
policy step runs. An episode is a pure function of (mission, policy specs, run seed, episode
index): every seed is derived from those with :mod:`parcat.core.seeding`.
"""

from __future__ import annotations

import contextlib
import copy
import math
import time
import traceback
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, cast, overload

import numpy as np

from parcat.core import seeding
from parcat.core.errors import USER_CODE_ERRORS
from parcat.core.trace import Tracer, now_us
from parcat.envs.base import ParallelEnv
from parcat.envs.missions import Mission, close_env
from parcat.envs.turns import MISREADS, dict_observation_hint, is_turn_based, play_turns
from parcat.episode.replay import ReplayRecorder
from parcat.episode.replay import file_name as replay_file
from parcat.episode.results import AgentResult, EpisodeResult, EpisodeStatus, ErrorInfo
from parcat.ipc.process import Terminated
from parcat.policies.assignment import assign_policies
from parcat.policies.specs import PolicySpec
from parcat.stepping.base import InlineStepper, PolicyStepError, Seat, Stepper

Request = tuple[dict[Any, Any], list[Any]]
"""What an episode asks for: the observations and the live agents to act."""
Play = Generator[Request, dict[Any, Any], None]
Episode = Generator[Request, dict[Any, Any], EpisodeResult]


@dataclass(frozen=True)
class EpisodeTask:
    """One unit of work: an episode of a mission with a set of policy specs."""

    mission: Mission
    policies: tuple[PolicySpec, ...]
    """The policies, with their weights; assigned to agents from the seed."""
    seed: int
    """The run's base seed."""
    episode_index: int
    """The episode's index within its mission."""
    replay_dir: str | None = None
    """Write the episode's replay (:mod:`parcat.episode.replay`) into this folder."""
    seating: tuple[int, ...] | None = None
    """The policy (index into ``policies``) of each agent, in ``possible_agents`` order;
    ``None``: drawn by weight from the seed."""

    @property
    def key(self) -> tuple[str, int]:
        """Identifies the episode within a run (for de-duplication and resume)."""
        return (self.mission.name, self.episode_index)


class TaskList(Sequence[EpisodeTask]):
    """Missions × episodes, mission-major, each task made when it is asked for.

    Only the positions to run are held (a ``range``, or an index array when resuming), so
    ten million episodes cost no memory before the first runs.
    """

    def __init__(self, missions: Sequence[Mission], policies: tuple[PolicySpec, ...],
                 seed: int, episodes: int, positions: Sequence[int] | None = None,
                 replay_dir: str | None = None, seating: tuple[int, ...] | None = None) -> None:
        self.missions = tuple(missions)
        self.policies = policies
        self.seed = seed
        self.episodes = episodes
        self.replay_dir = replay_dir
        self.seating = seating
        self.positions: Sequence[int] = (range(len(self.missions) * episodes)
                                         if positions is None else positions)

    def __len__(self) -> int:
        return len(self.positions)

    @overload
    def __getitem__(self, index: int) -> EpisodeTask: ...

    @overload
    def __getitem__(self, index: slice) -> list[EpisodeTask]: ...

    def __getitem__(self, index: int | slice) -> EpisodeTask | list[EpisodeTask]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        mission, episode = divmod(int(self.positions[index]), self.episodes)
        return EpisodeTask(self.missions[mission], self.policies, self.seed, episode,
                           self.replay_dir, self.seating)

    def position(self, key: tuple[str, int]) -> int | None:
        """Where the task ``(mission name, episode index)`` is among all the run's tasks."""
        name, episode = key
        for m, mission in enumerate(self.missions):
            if mission.name == name and 0 <= episode < self.episodes:
                return m * self.episodes + episode
        return None

    def subset(self, positions: Sequence[int]) -> TaskList:
        """The tasks at these positions among all the run's tasks."""
        return self._with(positions=positions)

    def with_missions(self, missions: Sequence[Mission]) -> TaskList:
        """The same tasks with the missions replaced (e.g. set to fresh environments)."""
        return self._with(missions=tuple(missions))

    def _with(self, **changes: Any) -> TaskList:
        new = copy.copy(self)
        vars(new).update(changes)
        return new


@dataclass
class _Progress:
    """What an episode has done so far (all a result is made of)."""

    env_seed: int
    start: float = field(default_factory=time.perf_counter)
    started_us: float = field(default_factory=now_us)
    agent_ids: list[Any] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    totals: dict[Any, float] = field(default_factory=dict)
    steps: int = 0
    phase: str = "setup"
    recorder: ReplayRecorder | None = None
    turn_based: bool = False
    warnings: list[str] = field(default_factory=list)


class EpisodeRunner:
    """Runs episodes, keeping environments and policies alive between them.

    Reuse is safe because every episode resets the environment and every policy with its
    own derived seeds; a policy must clear all its memory in ``reset``.

    Args:
        stepper: Where policy steps run (default: inline, in this process).
        on_step: Called with ``(task, steps)`` after every environment step; a true
            return ends the episode there (calibration times only its first steps).
        tracer: Records a timeline of episodes and steps, if given.
        track: The timeline row of this runner's episodes.
        retries: Times an episode is run again when a worker process it used was lost.
    """

    def __init__(self, stepper: Stepper | None = None,
                 on_step: Callable[[EpisodeTask, int], bool | None] | None = None,
                 tracer: Tracer | None = None, track: str = "episodes", retries: int = 0) -> None:
        self.stepper = stepper or InlineStepper()
        self.retries = retries
        self.on_step = on_step
        self.tracer = tracer
        self.track = track
        self._envs: dict[Mission, ParallelEnv] = {}
        self.slots: list[EpisodeRunner] = []
        """Runners of the other slots when this one plays in lockstep
        (:func:`parcat.episode.lockstep.run_many`); closed with it."""

    def run(self, task: EpisodeTask) -> EpisodeResult:
        """Play one episode; an exception in the env or a policy becomes a failed result.

        An episode that lost a worker process is played again, up to ``retries`` times.
        """
        result = self._drive(self.episode(task))
        attempts = 1
        while _lost_a_worker(result) and attempts <= self.retries:
            result = self._drive(self.episode(task))
            attempts += 1
        if attempts > 1 and result.error is not None:
            error = replace(result.error, message=f"{result.error.message} ({attempts} attempts)")
            result = replace(result, error=error)
        return result

    def _drive(self, episode: Episode) -> EpisodeResult:
        """Play ``episode`` to its end, this runner's stepper answering its requests."""
        act = self._traced_act()
        try:
            request = next(episode)
            while True:
                try:
                    actions = act(*request)
                except (PolicyStepError, Terminated) as failure:
                    request = episode.throw(failure)
                else:
                    request = episode.send(actions)
        except StopIteration as end:
            return cast(EpisodeResult, end.value)

    def episode(self, task: EpisodeTask) -> Episode:
        """The episode of ``task`` as a generator: it yields ``(observations, live agents)``
        and is sent their actions (or thrown a :class:`PolicyStepError`) until it returns
        the :class:`EpisodeResult`, an exception in the env or a policy recorded in it."""
        mission = task.mission
        progress = _Progress(seeding.episode_seed(task.seed, mission.key, task.episode_index))
        error: ErrorInfo | None = None
        try:
            env = self._env(mission)
            progress.agent_ids = list(env.possible_agents)
            seats = self._seats(env, task)
            progress.names = [seat.spec.name for seat in seats]
            self.stepper.start(mission, seats)
            progress.phase = "reset"
            progress.turn_based = is_turn_based(env)
            if task.replay_dir is not None:
                progress.recorder = ReplayRecorder(
                    progress.agent_ids, [s.agent.observation_space for s in seats],
                    [s.agent.action_space for s in seats])
            reset = env.reset(seed=progress.env_seed)
            progress.totals = dict.fromkeys(progress.agent_ids, 0.0)
            progress.phase = "step"
            play = self._play_turns(env, task, progress) if progress.turn_based \
                else self._play(env, task, reset, progress)
            yield from play if progress.recorder is None else _recorded(play, progress.recorder)
        except PolicyStepError as failure:
            error = _policy_error_info(failure, self._envs.get(mission))
        except USER_CODE_ERRORS as exc:
            error = _error_info(exc, None, progress.phase)
        except Terminated as stop:
            # the parent ends this worker (a timeout): hand it what the episode got so far
            error = ErrorInfo("Terminated", f"stopped at step {progress.steps}", "", None,
                              progress.phase)
            stop.partial = self._result(task, progress, error)
            raise
        return self._result(task, progress, error)

    def _result(self, task: EpisodeTask, progress: _Progress,
                error: ErrorInfo | None) -> EpisodeResult:
        mission, names, totals = task.mission, progress.names, progress.totals
        env_now = self._envs.get(mission)
        stats, env_task = (_stats(env_now), _task(env_now)) if error is None else ({}, None)
        if error is not None or mission.fresh_env:
            # an environment that raised may be in any state, and one whose reset keeps
            # state from the episode before cannot be reused: the next episode gets a new one
            self._discard_env(mission)
        late, retried = self.stepper.late_actions(), self.stepper.call_retries()
        if progress.recorder is not None and task.replay_dir is not None:
            self._save_replay(task, progress, error)
        if self.tracer is not None:
            self.tracer.span(f"{mission.name} #{task.episode_index}", progress.started_us, now_us(),
                             track=self.track, steps=progress.steps,
                             status="ok" if error is None else "failed")
        return EpisodeResult(
            mission.name, task.episode_index, progress.env_seed, progress.steps,
            agents=tuple(AgentResult(str(a), names[i] if names else "?",
                                     float(totals.get(a, 0.0)), late.get(a, 0),
                                     retried.get(a, 0))
                         for i, a in enumerate(progress.agent_ids)),
            stats=stats, status=EpisodeStatus.OK if error is None else EpisodeStatus.FAILED,
            error=error, task=env_task, duration_s=time.perf_counter() - progress.start,
            warnings=tuple(progress.warnings + [
                f"agent '{a}': non-finite return ({totals[a]})"
                for a in progress.agent_ids if not math.isfinite(totals.get(a, 0.0))]),
        )

    def close(self) -> None:
        """Close every cached environment and the stepper."""
        for mission in list(self._envs):
            self._discard_env(mission)
        self.stepper.close()
        for runner in self.slots:
            runner.close()
        self.slots.clear()

    def _play(self, env: ParallelEnv, task: EpisodeTask, reset: Any,
              progress: _Progress) -> Play:
        """Step a parallel env until the episode ends."""
        obs, _ = reset
        # parcat's own environments are checked by its tests (BENCHMARKS.md: the check's cost)
        trusted = task.mission.env.startswith("parcat.")
        if not trusted:
            progress.warnings += _odd_observations(env, obs, "first")
        step = env.step
        if self.tracer is not None:
            step = self._traced(step, "env step", self.track)
        if progress.recorder is not None:
            step = progress.recorder.wrap_step(step)
        on_step, max_steps, totals = self.on_step, task.mission.max_steps, progress.totals
        steps = 0
        while env.agents and steps < max_steps:
            obs, rewards, _, _, _ = step((yield obs, env.agents))
            for agent_id, reward in rewards.items():
                totals[agent_id] += reward
            steps += 1
            progress.steps = steps
            if on_step is not None and on_step(task, steps):
                break
        if not trusted:
            progress.warnings += _odd_observations(env, obs, "last")

    def _save_replay(self, task: EpisodeTask, progress: _Progress,
                     error: ErrorInfo | None) -> None:
        mission, recorder = task.mission, progress.recorder
        assert recorder is not None and task.replay_dir is not None
        meta = {
            "mission": mission.name, "env": mission.env, "params": dict(mission.params),
            "max_steps": mission.max_steps, "seed": progress.env_seed,
            "episode_index": task.episode_index, "steps": progress.steps,
            "status": "ok" if error is None else "failed", "turn_based": progress.turn_based,
            "policies": list(progress.names),
            "returns": [float(progress.totals.get(a, 0.0)) for a in progress.agent_ids],
        }
        if progress.turn_based:
            recorder.settle(progress.totals)
        try:
            recorder.save(Path(task.replay_dir) / replay_file(mission.name, task.episode_index),
                          meta)
        except OSError as exc:
            progress.warnings.append(f"the replay could not be written: {exc}")

    def _play_turns(self, env: Any, task: EpisodeTask, progress: _Progress) -> Play:
        """A turn-based (AEC) episode: one agent acts at a time (:mod:`parcat.envs.turns`)."""
        recorder, on_step = progress.recorder, self.on_step

        def moved(moves: int) -> bool | None:
            progress.steps = moves
            return on_step(task, moves) if on_step is not None else None

        yield from play_turns(env, progress.totals, task.mission.max_steps, moved,
                              recorder.turn if recorder is not None else None)

    def _traced_act(self) -> Callable[[Any, Any], dict[Any, Any]]:
        if self.tracer is None:
            return self.stepper.act
        return self._traced(self.stepper.act, "policies", f"{self.track}/agents", count=True)

    def _traced(self, call: Callable[..., Any], name: str, track: str,
                count: bool = False) -> Callable[..., Any]:
        """``call`` recording a span named ``name`` (with ``agents=len(result)`` if ``count``)."""
        tracer = self.tracer
        assert tracer is not None

        def traced(*args: Any) -> Any:
            begin = now_us()
            result = call(*args)
            extra = {"agents": len(result)} if count else {}
            tracer.span(name, begin, now_us(), track=track, **extra)
            return result

        return traced

    def _seats(self, env: ParallelEnv, task: EpisodeTask) -> list[Seat]:
        mission, index = task.mission, task.episode_index
        agent_ids = list(env.possible_agents)
        if task.seating is not None:
            if len(task.seating) != len(agent_ids):
                raise ValueError(f"the seating names {len(task.seating)} policies for the "
                                 f"{len(agent_ids)} agents of mission '{mission.name}'")
            assignment = list(task.seating)
        else:
            assignment = assign_policies([p.weight for p in task.policies], len(agent_ids),
                                         seeding.assignment_seed(task.seed, mission.key, index))
        return [Seat(agent, task.policies[policy],
                     seeding.agent_seed(task.seed, mission.key, index, agent.agent_index))
                for agent, policy in zip(mission.agent_specs(env), assignment, strict=True)]

    def _discard_env(self, mission: Mission) -> None:
        env = self._envs.pop(mission, None)
        # a broken env may fail to close; it is dropped anyway
        with contextlib.suppress(Exception):
            close_env(env)

    def _env(self, mission: Mission) -> ParallelEnv:
        if mission not in self._envs:
            self._envs[mission] = mission.make_env()
        return self._envs[mission]


def run_episode(mission: Mission, policies: Sequence[PolicySpec], seed: int,
                episode_index: int = 0) -> EpisodeResult:
    """Play one episode of ``mission`` with a fresh environment and policies."""
    runner = EpisodeRunner()
    try:
        return runner.run(EpisodeTask(mission, tuple(policies), seed, episode_index))
    finally:
        runner.close()


def _recorded(play: Play, recorder: ReplayRecorder) -> Play:
    """``play`` with every request and its answer recorded before the env steps."""
    try:
        request = next(play)
        while True:
            actions = yield request
            recorder.acted(request[0], actions)
            request = play.send(actions)
    except StopIteration as end:
        return end.value


def _odd_observations(env: ParallelEnv, obs: Any, which: str) -> list[str]:
    """Agents whose observation is non-finite or outside its space (at the first and last
    step only: every step would cost the loop its speed)."""
    found = []
    for agent, value in (obs or {}).items():
        array = np.asarray(value) if not isinstance(value, dict | tuple) else None
        if array is not None and array.dtype.kind == "f" and not np.isfinite(array).all():
            found.append(f"agent '{agent}': non-finite {which} observation")
            continue
        with contextlib.suppress(Exception):  # a space that cannot tell says nothing
            if not env.observation_space(agent).contains(value):
                found.append(f"agent '{agent}': {which} observation outside its space")
    return found


def _lost_a_worker(result: EpisodeResult) -> bool:
    return result.error is not None and result.error.phase == "worker"


def _policy_error_info(failure: PolicyStepError, env: ParallelEnv | None) -> ErrorInfo:
    if (report := failure.remote) is not None:
        agent = None if failure.agent is None else str(failure.agent)
        error = ErrorInfo(report.kind, report.message, report.traceback, agent, failure.phase)
    else:
        error = _error_info(failure.__cause__ or failure, failure.agent, failure.phase)
    if env is None or error.phase != "policy" or error.type not in MISREADS:
        return error
    with contextlib.suppress(Exception):  # a space that cannot tell adds nothing
        error = replace(error, message=error.message
                        + dict_observation_hint(env.observation_space(failure.agent)))
    return error


def _error_info(exc: BaseException, agent: Any, phase: str) -> ErrorInfo:
    formatted = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    message = f"called sys.exit({exc.code!r})" if isinstance(exc, SystemExit) else str(exc)
    return ErrorInfo(type(exc).__name__, message, formatted,
                     None if agent is None else str(agent), phase)


def _stats(env: ParallelEnv | None) -> dict[str, float]:
    stats_fn = getattr(env, "episode_stats", None)
    return {} if stats_fn is None else {str(k): float(v) for k, v in stats_fn().items()}


def _task(env: ParallelEnv | None) -> dict[str, Any] | None:
    task = getattr(env, "task", None)
    return dict(task) if isinstance(task, dict) else None
