"""Run directories (:mod:`parcat.policies.checkpoint`'s run checkpoints): writing them,
resuming, starting from trained weights, and the greedy evaluation that picks ``RUN/best``
(fixed episodes on environments of their own, seeded from the run seed on streams of their
own: the same at every checkpoint, on every layout, never changing training).

Every write replaces the checkpoint in one atomic swap: a second Ctrl-C or a full disk
leaves the previous one. The checkpoint written on an interrupt holds the *last finished*
epoch, so ``--resume`` continues exactly as if the run had stopped there: in sync mode each
finished epoch is captured in memory until a later one replaces it, in async mode the
acting learners are refreshed from the learner process.
"""

from __future__ import annotations

import logging
import math
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np

from parcat.core import runlock
from parcat.core.errors import CheckpointError, ParcatError, WriteError
from parcat.envs.missions import Mission, is_foreign, sides
from parcat.ipc.process import SetupFailedError, call_in_worker
from parcat.policies import checkpoint
from parcat.train.best import TOTAL, SideBest, interval, read_best, side_score
from parcat.train.config import TrainConfig
from parcat.train.envslice import reset_seeded
from parcat.train.learner import Learner
from parcat.train.recipes import SHARED, LearnerRecipe, class_reference, learner_inputs
from parcat.train.vecenv import FILE, InFlight, VecEnv

log = logging.getLogger("parcat.train")
METRICS_FILES = ("metrics.jsonl", "metrics.csv")
BEST = checkpoint.BEST
SAME_ON_RESUME = ("mission", "overrides", "seed", "learner", "shared_learner",
                  "steps_per_epoch", "gradient_steps", "mode", "train_interval")
"""Settings a resumed run must share with the run it continues (the rest may change)."""
EVAL_STREAM = 103
EVAL_TASK_STREAM = 104
CONFIRM_FIRST = 1_000_000
"""The number of the first episode a best checkpoint is confirmed on (``best_episodes``):
episodes of their own, never the fixed evaluation set's."""
LearnerObs = Callable[[Any, np.ndarray], np.ndarray]
"""``(agent, observation) -> what the agent's learner observes``."""


@dataclass(frozen=True)
class RunSnapshot:
    """A run checkpoint held in memory (arrays copied), ready to be written."""

    agents: Mapping[str, checkpoint.PolicyCheckpoint]
    meta: Mapping[str, Any]
    arrays: Mapping[str, Mapping[str, np.ndarray]] = field(default_factory=dict)
    """More ``.npz`` files of the checkpoint (the episodes in flight)."""


@dataclass
class Checkpointer:
    """Writes one run's checkpoints (with ``vec``'s episodes in flight) and keeps its best.

    ``recipes``: what the learners are built from, to evaluate them in a worker process (an
    environment from outside parcat); ``None``: evaluated in this process. A learner that
    several agents share keeps its training state once, beside the first agent's policy.
    """

    config: TrainConfig
    mission: Mission
    learners: dict[Any, Learner]
    learner_obs: LearnerObs | None = None
    vec: VecEnv | None = None
    recipes: Mapping[str, LearnerRecipe] | None = None
    evaluator: Callable[[], dict[str, float]] | None = None
    """Evaluates the learners instead of :meth:`evaluate`'s greedy episodes (self-play)."""
    more_arrays: Callable[[], dict[str, dict[str, np.ndarray]]] = dict
    """More ``.npz`` files every checkpoint holds (self-play's pool of past selves)."""
    num_envs: int = 1
    """Environments stepped together, where no ``vec`` says."""

    def __post_init__(self) -> None:
        agents = [str(spec.agent_id) for spec in self.mission.agents()]
        self.sides = self._sides(agents)
        """The agents of each side that has a best of its own (one side: ``total``)."""
        self.best = read_best(self.config.run_path, self.sides)
        self.pending: RunSnapshot | None = None  # the last finished epoch, not written yet
        self._judged: tuple[int, set[str]] = (-1, set())  # (epoch, the sides it is best for)
        self._confirmed: dict[str, dict[str, float]] = {}  # that epoch's confirmation

    def _sides(self, agents: list[str]) -> dict[str, list[str]]:
        """The mission's sides, or one (``total``) where agents of different sides share a
        learner (self-play, ``--shared-learner``): a best per side would mix epochs of the
        one network."""
        found = sides(agents)
        learner: dict[str, object] = {str(agent): id(x) for agent, x in self.learners.items()}
        owner: dict[object, str] = {}
        for side, members in found.items():
            for agent in members:
                if owner.setdefault(learner.get(agent, agent), side) != side:
                    return {TOTAL: agents}
        return found or {TOTAL: agents}

    def evaluate(self) -> dict[str, float]:
        """The learners' greedy returns on the run's fixed evaluation episodes; an
        environment from outside parcat plays them in a worker process, and its crash
        there leaves NaN returns and a warning, not a dead trainer."""
        episodes = self.config.eval_episodes
        if self.evaluator is not None:
            return self.evaluator() if episodes > 0 else {}
        if self.recipes is None or not is_foreign(self.mission) or episodes <= 0:
            return evaluate_greedy(self.mission, self.learners, self.config.seed, episodes,
                                   self.learner_obs)
        try:
            return evaluate_greedy_in_a_worker(self.mission, self.recipes, self.learners,
                                               self.config.seed, episodes)
        except (SetupFailedError, ParcatError) as exc:
            log.warning("the greedy evaluation's environment %s; eval_return is NaN", exc)
            return nan_returns(episodes, self.learners)

    def finished(self, epoch: int, eval_return: dict[str, float] | None = None) -> None:
        """Capture the learners after ``epoch`` epochs (with their evaluation, if any), for
        :meth:`save` or, after an interrupt, :meth:`save_interrupted`."""
        meta: dict[str, Any] = {}
        if eval_return:
            meta = {"eval_return": eval_return, "eval_episodes": self.config.eval_episodes}
        self.pending = self._capture(epoch, meta)

    def best_after(self, eval_return: Mapping[str, float], epoch: int) -> float:
        """Judge ``epoch``, evaluated as ``eval_return``, on every side (more episodes
        confirm a candidate), remembering the sides it is best for (:meth:`save` writes
        them to ``best/``); the best total evaluation return after it (NaN: none yet, or a
        mission with sides, whose bests :meth:`best_record` gives)."""
        scores = {side: side_score(eval_return, side, agents)
                  for side, agents in self.sides.items()}
        # with --best-episodes a tie on the evaluation set is a candidate too
        better = ((lambda score, best: score >= best) if self.config.best_episodes
                  else (lambda score, best: score > best))
        improved = {side for side, score in scores.items()
                    if not math.isnan(score) and better(score, self.best[side].eval_return)}
        intervals: dict[str, dict[str, float]] = {}
        if self.config.best_episodes and improved:
            intervals = self.confirm()
            improved = {side for side in improved
                        if intervals[side]["mean"] > self.best[side].confirmed}
        self._judged = (epoch, improved)
        self._confirmed = intervals
        for side in improved:
            self.best[side] = SideBest(scores[side], epoch, intervals.get(side, {}))
        total = self.best.get(TOTAL)
        return total.eval_return if total and math.isfinite(total.eval_return) else math.nan

    def best_record(self) -> dict[str, dict[str, float]]:
        """Per side: the best checkpoint's ``epoch``, its evaluation ``return`` (per agent
        on a side, summed over agents for ``total``) and its confirmation's ``mean``,
        ``low``, ``high`` and ``episodes`` (NaN: none)."""
        return {side: best.record() for side, best in self.best.items()}

    def save(self) -> Path:
        """Write the captured checkpoint; ``best/`` takes its agents of every side it is
        best for (:meth:`best_after`), keeping the other sides' best."""
        assert self.pending is not None, "save() follows finished()"
        epoch = int(self.pending.meta["epoch"])
        if self._judged[0] != epoch:
            self.best_after(self.pending.meta.get("eval_return") or {}, epoch)
        path = self._write(self.pending)
        self.pending = None
        return path

    def confirm(self) -> dict[str, dict[str, float]]:
        """Per side (and ``total``): the learners' mean greedy return on ``best_episodes``
        episodes of their own, with a bootstrap 95% interval (``low``, ``high``); NaN, with
        a warning, where an environment from outside parcat crashes there (as in
        :meth:`evaluate`: the checkpoint is written, not best)."""
        episodes = self.config.best_episodes
        try:
            returns = self._confirming_returns(episodes)
        except (SetupFailedError, ParcatError) as exc:
            log.warning("the best checkpoint's confirming environment %s; it is not "
                        "the best", exc)
            failed = dict.fromkeys(("mean", "low", "high"), math.nan) | {"episodes": episodes}
            return {side: dict(failed) for side in (*self.sides, TOTAL)}
        agents = [str(spec.agent_id) for spec in self.mission.agents()]
        columns = {side: [agents.index(a) for a in members] for side, members in
                   self.sides.items() if side != TOTAL}
        by_side = {side: returns[:, index].mean(axis=1) for side, index in columns.items()}
        by_side[TOTAL] = returns.sum(axis=1)
        return {side: interval(values, self.config.seed) for side, values in by_side.items()}

    def _confirming_returns(self, episodes: int) -> np.ndarray:
        if self.recipes is not None and is_foreign(self.mission):
            return cast(np.ndarray, call_in_worker(_returns_rebuilt, (
                self.mission, dict(self.recipes), _arrays_by_recipe(self.recipes, self.learners),
                self.config.seed, episodes, CONFIRM_FIRST), "parcat-greedy-eval",
                timeout_s=math.inf))
        return greedy_returns(self.mission, self.learners, self.config.seed, episodes,
                              self.learner_obs, CONFIRM_FIRST)

    def save_interrupted(self, finished_epochs: int, saved_epochs: int,
                         live: bool = False) -> Path | None:
        """After Ctrl-C or SIGTERM: write the last finished epoch if no checkpoint has it
        yet (``live``: the learners as they are now stand for it, in async mode once synced);
        return the run directory, or ``None`` when there was nothing new."""
        if self.pending is not None:
            return self._write(self.pending)
        if live and finished_epochs > saved_epochs:
            return self._write(self._capture(finished_epochs, {}))
        return None

    def _capture(self, epoch: int, meta: dict[str, Any]) -> RunSnapshot:
        """Copy everything a checkpoint after ``epoch`` epochs holds, so it can be written
        later though the learners go on changing."""
        config, mission = self.config, self.mission
        specs = {s.agent_id: s for s in mission.agents()}
        agents = {}
        stated: set[int] = set()  # the learners whose state is kept already
        for agent, learner in self.learners.items():
            kwargs = dict(learner.policy_kwargs)
            if config.shared_learner:
                kwargs["agent_ids"] = [str(a) for a in specs]
            agents[str(agent)] = checkpoint.PolicyCheckpoint(
                policy=learner.policy, kwargs=kwargs, arrays=_copied(learner.policy_arrays()),
                meta={"mission": mission.name, "agent_id": str(agent), "epoch": epoch,
                      "observation_space": str(specs[agent].observation_space),
                      "action_space": str(specs[agent].action_space),
                      "learner": {"class": class_reference(type(learner)),
                                  **dict(learner.config)}},
                state={} if id(learner) in stated else _copied(learner.state_dict()),
            )
            stated.add(id(learner))
        run_meta = {"mission": mission.name, "mission_params": dict(mission.params),
                    "epoch": epoch, "seed": config.seed, "shared_learner": config.shared_learner,
                    "env_steps": epoch * config.steps_per_epoch * (self.vec.num_envs
                                                                    if self.vec else self.num_envs),
                    "config": config.to_dict(), **meta}
        arrays = {name: _copied(more) for name, more in self.more_arrays().items()}
        if self.vec is not None:
            arrays[FILE] = _copied(self.vec.in_flight().to_arrays())
        return RunSnapshot(agents, run_meta, arrays)

    def _readable_best(self, kept: list[str]) -> list[str]:
        """``kept``, the sides whose agents a new ``best/`` keeps from the old one; none,
        their bests forgotten with a warning, where the old one is deleted or damaged: the
        epoch's checkpoint is written all the same."""
        best = self.config.run_path / BEST
        try:
            checkpoint.read_manifest(best)
        except CheckpointError as exc:
            problem = str(exc) if best.exists() else f"'{best}' was deleted"
            warnings.warn(f"{problem}; the best of {' and '.join(kept)} starts again: "
                          f"'{BEST}' takes this epoch's agents", stacklevel=2)
            for side in kept:
                self.best[side] = SideBest()
            return []
        return kept

    def _write(self, snapshot: RunSnapshot) -> Path:
        """Write ``snapshot`` (and ``best/``, where :meth:`best_after` judged its epoch best
        for a side); a failed write (a full disk) leaves the last checkpoint and is one
        :class:`WriteError`."""
        path = self.config.run_path
        epoch, improved = self._judged
        improved = improved if snapshot.meta["epoch"] == epoch else set()
        meta = dict(snapshot.meta)
        if snapshot.meta["epoch"] == epoch and self._confirmed:
            meta["best_return"] = self._confirmed[TOTAL]  # the candidate's, best or not
        kept = [side for side in self.sides if side not in improved
                and math.isfinite(self.best[side].eval_return)]
        if improved and kept:
            kept = self._readable_best(kept)
        keep = [agent for side in kept for agent in self.sides[side]]
        sides_meta = {side: self.best[side].manifest(self.sides[side], side)
                      for side in self.sides if math.isfinite(self.best[side].eval_return)}
        try:
            return checkpoint.save_run(path, snapshot.agents, meta,
                                       copy_to=BEST if improved else "", arrays=snapshot.arrays,
                                       keep=keep, copy_meta={"sides": sides_meta})
        except OSError as exc:
            raise WriteError(
                f"could not write the checkpoint of epoch {snapshot.meta['epoch']} to '{path}' "
                f"({exc.strerror or exc}); the last checkpoint there is intact: free the "
                "space and --resume") from None


def _copied(arrays: Mapping[str, Any]) -> dict[str, np.ndarray]:
    return {key: np.array(value, copy=True) for key, value in arrays.items()}


def has_checkpoint(path: Path) -> bool:
    """Whether the run directory holds a checkpoint to resume from (none when it does not
    exist or holds only a metrics log); :class:`CheckpointError` when it holds other files
    (no parcat run: resuming must not write into it)."""
    checkpoint.recover_swap(path)
    if not path.exists():
        return False
    if (path / checkpoint.MANIFEST).exists():
        return True
    if not path.is_dir():
        raise CheckpointError(f"--resume: '{path}' is not a directory; name a run directory")
    # a log, the run's lock, or what a rewrite of a metrics log killed halfway left
    if all(name in (*METRICS_FILES, "tensorboard", runlock.LOCK_FILE)
           or (name.startswith(".metrics.") and name.endswith(".tmp"))
           for name in (entry.name for entry in path.iterdir())):
        return False
    raise CheckpointError(
        f"--resume: '{path}' holds files but no {checkpoint.MANIFEST}: it is no parcat run, "
        "or a damaged one; give another --run-dir")


def restore(path: Path, learners: dict[Any, Learner], config: TrainConfig | None = None) -> int:
    """Load every learner's state from the run directory (every file checked first);
    return the epoch it reached. :class:`CheckpointError`: no checkpoint, a damaged one,
    other agents', or ``config`` differs in a setting that changes the results."""
    manifest = checkpoint.read_manifest(path)
    if manifest["format"] != checkpoint.RUN_FORMAT:
        raise CheckpointError(f"--resume: '{path}' is not a run directory")
    if config is not None:
        saved, now = manifest.get("config", {}), config.to_dict()
        changed = [k for k in SAME_ON_RESUME if k in saved and saved[k] != now[k]]
        if changed:
            key = changed[0]
            raise CheckpointError(
                f"--resume: '{path}' was trained with {key}={saved[key]!r}, not {now[key]!r}; "
                "resume with the same settings or use another --run-dir")
    if "epoch" not in manifest:
        raise CheckpointError(f"--resume: '{path}/{checkpoint.MANIFEST}' records no epoch")
    loaded: set[int] = set()  # a learner agents share: its state is beside the first's
    for agent, learner in learners.items():
        agent_dir = path / _agent_dir(manifest, path, agent, "--resume")
        checkpoint.load_policy(agent_dir, str(agent))  # its checks: the greedy weights too
        if id(learner) in loaded:
            continue
        loaded.add(id(learner))
        state = checkpoint.load_state(agent_dir)
        if not state:
            raise CheckpointError(f"--resume: '{agent_dir}' has no training state")
        # collected data (buffer.*) holds observations, which may be NaN; the rest may not
        checkpoint.check_finite(agent_dir, str(agent), state, checkpoint.STATE, skip=("buffer.",))
        try:
            learner.load_state_dict(state)
        except CheckpointError as exc:
            raise CheckpointError(f"--resume: '{agent_dir / checkpoint.STATE}': {exc}") from exc
    return int(manifest["epoch"])


def _agent_dir(manifest: Mapping[str, Any], path: Path, agent: Any, flag: str) -> str:
    dirs: dict[str, str] = manifest["agents"]
    if str(agent) not in dirs:
        raise CheckpointError(f"{flag}: '{path}' has no agent '{agent}'")
    return dirs[str(agent)]


def load_in_flight(run_path: Path, vec: VecEnv) -> InFlight | None:
    """The episodes a checkpoint was running, if it kept them for ``vec``'s environments
    (otherwise new episodes start); :class:`CheckpointError` if the file is damaged."""
    arrays = checkpoint.load_run_arrays(run_path, FILE)
    if arrays is None:
        return None
    state = InFlight.from_arrays(arrays, vec.layouts, f"{run_path}/{FILE}")
    return state if state.num_envs == vec.num_envs else None


def init_weights(source: str, learners: dict[Any, Learner]) -> None:
    """Start from trained weights (``--init-from``): a run directory (per agent) or one
    agent's directory; :class:`CheckpointError` if it lacks an agent or its weights do not
    fit a learner."""
    path = Path(source)
    try:
        manifest = checkpoint.read_manifest(path)
    except CheckpointError as exc:
        raise CheckpointError(f"--init-from: {exc}") from exc
    for agent, learner in learners.items():
        if manifest["format"] == checkpoint.RUN_FORMAT:
            saved = checkpoint.load_policy(path / _agent_dir(manifest, path, agent,
                                                             "--init-from"), str(agent))
        else:
            saved = checkpoint.load_policy(path)
        try:
            learner.load_policy_arrays({k: np.asarray(v) for k, v in saved.arrays.items()})
        except CheckpointError as exc:
            raise CheckpointError(
                f"--init-from: '{path}' weights do not fit this learner ({exc})") from None


def evaluate_greedy(mission: Mission, learners: Mapping[Any, Learner], seed: int,
                    episodes: int, learner_obs: LearnerObs | None = None) -> dict[str, float]:
    """Mean greedy return per agent (by ``str(agent_id)``) and in total over ``episodes``
    seeded from ``seed`` (none: empty); ``learner_obs`` makes an agent's learner input."""
    if episodes <= 0:
        return {}
    return _means(mission, greedy_returns(mission, learners, seed, episodes, learner_obs))


def greedy_returns(mission: Mission, learners: Mapping[Any, Learner], seed: int,
                   episodes: int, learner_obs: LearnerObs | None = None,
                   first: int = 0) -> np.ndarray:
    """Each greedy episode's return per agent, ``(episodes, agents)``: episodes ``first``,
    ``first + 1``, ... seeded from ``seed``."""
    agents = [spec.agent_id for spec in mission.agents()]
    returns = np.zeros((episodes, len(agents)))
    for row, index in enumerate(range(first, first + episodes)):
        with mission.open_env() as env:
            got = _episode(env, mission, learners, seed, index,
                           learner_obs or (lambda agent, obs: obs))
        returns[row] = [got.get(agent, 0.0) for agent in agents]
    return returns


def _means(mission: Mission, returns: np.ndarray) -> dict[str, float]:
    agents = [spec.agent_id for spec in mission.agents()]
    means = {str(agent): float(returns[:, i].sum() / len(returns))
             for i, agent in enumerate(agents)}
    return means | {TOTAL: float(returns.sum() / len(returns))}


def evaluate_greedy_in_a_worker(mission: Mission, recipes: Mapping[str, LearnerRecipe],
                                learners: Mapping[Any, Learner], seed: int,
                                episodes: int) -> dict[str, float]:
    """:func:`evaluate_greedy` in a worker process, for environments from outside parcat
    (their crash must not end training), the learners rebuilt there from their ``recipes``;
    :class:`SetupFailedError` if the environment or a learner raised, died or froze."""
    returns = call_in_worker(_returns_rebuilt, (mission, dict(recipes),
                                                _arrays_by_recipe(recipes, learners), seed,
                                                episodes), "parcat-greedy-eval",
                             timeout_s=math.inf)
    return _means(mission, cast(np.ndarray, returns))


def _arrays_by_recipe(recipes: Mapping[str, LearnerRecipe],
                      learners: Mapping[Any, Learner]) -> dict[str, dict[str, np.ndarray]]:
    by_name = {str(agent): learner for agent, learner in learners.items()}
    return {name: (next(iter(learners.values())) if name == SHARED else by_name[name])
            .policy_arrays() for name in recipes}


def _returns_rebuilt(mission: Mission, recipes: dict[str, LearnerRecipe],
                     arrays: dict[str, dict[str, np.ndarray]], seed: int,
                     episodes: int, first: int = 0) -> np.ndarray:
    built = {name: recipe.build() for name, recipe in recipes.items()}
    for name, learner in built.items():
        learner.load_policy_arrays(arrays[name])
    agents = [spec.agent_id for spec in mission.agents()]
    shared = SHARED in built
    return greedy_returns(mission, {a: built[SHARED if shared else str(a)] for a in agents},
                          seed, episodes, learner_inputs(agents, shared), first)


def _episode(env: Any, mission: Mission, learners: Mapping[Any, Learner], seed: int,
             index: int, learner_obs: LearnerObs) -> dict[Any, float]:
    obs = reset_seeded(env, seed, (EVAL_STREAM, EVAL_TASK_STREAM), index)
    returns: dict[Any, float] = {agent: 0.0 for agent in env.possible_agents}
    for _ in range(mission.max_steps):
        if not env.agents:
            break
        actions = {}
        for agent in env.agents:
            row = np.asarray(obs[agent], dtype=np.float32).reshape(1, -1)
            action = learners[agent].act(learner_obs(agent, row), explore=False)[0]
            actions[agent] = action.item() if np.ndim(action) == 0 else np.asarray(action)
        obs, rewards, *_ = env.step(actions)
        for agent, reward in rewards.items():
            returns[agent] = returns.get(agent, 0.0) + float(reward)
    return returns


def nan_returns(episodes: int, agents: Iterable[Any]) -> dict[str, float]:
    """The ``eval_return`` of an epoch that was not evaluated: the same keys, NaN (none
    when ``episodes`` is 0)."""
    if episodes <= 0:
        return {}
    return {**{str(agent): math.nan for agent in agents}, TOTAL: math.nan}
