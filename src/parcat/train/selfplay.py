"""Self-play for turn-based games (PettingZoo AEC): one learner plays every seat, against
itself and a pool of its past selves.

Every vector step makes one move in each of the run's games: the learner's moves in one
batch (exploring, legal moves only), each past self's in another. An agent's transition runs
from one of its turns to its next, the opponent's reply being part of the environment, and
the last one ends with what the game gave it. When a game begins, a generator seeded by (run
seed, game, episode) draws its opponent: with probability ``pool_share`` a past self from the
pool in one seat, the learner in the others (learning from its own seats only), else the
learner in every seat, learning from all. Every ``pool_every`` epochs the learner's greedy
weights join the pool (``pool_size`` at most: the oldest leaves).

One network plays every seat, so the game must show each agent the board from its own side
(PettingZoo's classic games do); it sees the observation flattened as the ``mlp`` policy
flattens it, so a checkpoint plays as trained with ``parcat eval -p RUN``. The games step in
the trainer's process: the network, not the game, is the cost.
"""

from __future__ import annotations

import inspect
import math
import time
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any, cast

import gymnasium
import numpy as np
from gymnasium import spaces

from parcat.core.errors import USER_CODE_ERRORS, ConfigError, WorkerError, clip
from parcat.core.imports import import_reference
from parcat.core.seeding import derive_seed
from parcat.envs.missions import Mission, close_env, load_mission
from parcat.envs.turns import play_turns
from parcat.parallel.planner import TrainPlan
from parcat.policies.builtin import RandomPolicy, flat_observation
from parcat.train.config import LearningMode, TrainConfig
from parcat.train.dqn import DQNLearner
from parcat.train.epoch_stats import EpochStats, episode_summary
from parcat.train.learner import Learner, Transitions, train_each
from parcat.train.metrics import RunLoggers, check_installed
from parcat.train.mlp import single_threaded_blas
from parcat.train.recipes import SHARED, LearnerRecipe, learner_class, learner_options
from parcat.train.runs import TOTAL, Checkpointer, has_checkpoint, init_weights, restore
from parcat.train.trainer import Trainer, TrainReport

POOL_FILE = "pool.npz"
"""The past selves in a run directory (their weights, and the epoch each joined at)."""
RESET_STREAM, OPPONENT_STREAM, EVAL_STREAM, EVAL_OPPONENT_STREAM = 111, 112, 113, 114
Row = tuple[np.ndarray, int]  # what a learning seat saw and played on its last turn
Transition = tuple[Any, np.ndarray, int, float, np.ndarray, bool, bool]
"""(agent, obs, action, reward, next obs, terminated, truncated)."""


class Game:
    """One game in progress: its environment, who sits where, and each learning seat's
    last move, awaiting its outcome (:meth:`start`, then :meth:`play` until it ends)."""

    def __init__(self, mission: Mission, index: int, flat: Callable[[Any], np.ndarray],
                 monte_carlo: float | None = None, negamax: float | None = None) -> None:
        self.mission, self.index, self.flat = mission, index, flat
        self.monte_carlo = monte_carlo
        """The discount of Monte Carlo returns (``None``: turn-to-turn transitions)."""
        self.negamax = negamax
        """The discount of negamax transitions, each running to the opponent's turn (see
        :class:`NegamaxDQN`); ``None``: turn-to-turn transitions."""
        self.env: Any = mission.make_env()
        self.agents = list(self.env.possible_agents)
        self.opponent: Any = None
        """The past self playing :attr:`opponent_seat` (``None``: the learner plays all)."""
        self.opponent_seat: Any = None
        self.episode = 0
        self.transitions: list[Transition] = []
        """The transitions made since they were last taken."""

    def start(self, seed: int, episode: int, opponent: Any = None, seat: Any = None) -> None:
        """Reset to ``episode`` (seeded from ``seed``), ``opponent`` in ``seat``."""
        self.opponent, self.opponent_seat = opponent, seat
        self.env.reset(seed=derive_seed(seed, RESET_STREAM, self.index, episode))
        self.totals: dict[Any, float] = {}
        self.credited = dict.fromkeys(self.agents, 0.0)
        self.pending: dict[Any, Row] = {}
        self.moves: list[Transition] = []  # Monte Carlo: the game's, until it ends
        self.moving: tuple[Any, Row] | None = None
        self.replied = False  # whether the last move closed the learner's move before it
        self.turns: Generator[tuple[dict[Any, Any], list[Any]], dict[Any, Any], int] = (
            play_turns(self.env, self.totals, self.mission.max_steps,
                       on_turn=None if self.negamax is not None else self._on_turn))
        self.request: tuple[Any, Any] = self._next(next(self.turns))

    @property
    def learner_moves(self) -> bool:
        """Whether the agent to move is the learner's."""
        return self.request[0] != self.opponent_seat

    def play(self, action: int, row: np.ndarray | None) -> int | None:
        """Make the move (``row``: the learner's input, ``None`` for the opponent's); the
        game's length once it is over, else ``None``."""
        agent = self.request[0]
        self.replied = False
        if self.negamax is not None:
            self._reply(row if row is not None else self.flat(self.request[1]))
        self.moving = (agent, (row, action)) if row is not None else None
        try:
            self.request = self._next(self.turns.send({agent: action}))
        except StopIteration as end:
            self._finish(agent)
            return int(end.value)
        return None

    @staticmethod
    def _next(request: tuple[dict[Any, Any], list[Any]]) -> tuple[Any, Any]:
        observations, (agent,) = request
        return agent, observations[agent]

    def _on_turn(self, agent: Any, reward: float) -> None:
        """The agent moved; ``reward`` came to it since its move before, which ends there."""
        if self.moving is None:
            return
        _, (row, action) = self.moving
        if agent in self.pending:
            before, played = self.pending[agent]
            (self.transitions if self.monte_carlo is None else self.moves).append(
                (agent, before, played, reward, row, False, False))
            self.credited[agent] += reward
        self.pending[agent] = (row, action)

    def _reply(self, seen: np.ndarray) -> None:
        """Negamax: the learner's move before this one ends where the mover sees ``seen``."""
        if self.moving is not None:
            agent, (row, action) = self.moving
            self.transitions.append((agent, row, action, 0.0, seen, False, False))
            self.replied = True

    def _finish(self, mover: Any) -> None:
        """Close each learning seat's last move with the rest of its return (a game cut
        at the step limit bootstraps from what the seat sees then)."""
        cut = bool(self.env.agents)
        if self.negamax is not None:  # only the last move ends the game: it earned the outcome
            if cut:
                self._reply(self.flat(self.env.observe(self.env.agent_selection)))
                return
            won = self.totals.get(mover, 0.0)
            if won > 0 and self.replied:
                # the reply was a win, and no reply does better: the move before it is
                # worth exactly minus that, a turn on, where bootstrapping gave minus the
                # network's estimate of the win (0.6-0.7 of it, BENCHMARKS.md)
                agent, row, action, _, seen, _, _ = self.transitions[-1]
                self.transitions[-1] = (agent, row, action, -self.negamax * won, seen, True,
                                        False)
            if self.moving is not None:
                agent, (row, action) = self.moving
                self.transitions.append((agent, row, action, self.totals.get(agent, 0.0),
                                         row, True, False))
            return
        for agent, (row, action) in self.pending.items():
            final = self.flat(self.env.observe(agent)) if cut else row
            self.transitions.append((agent, row, action,
                                     self.totals.get(agent, 0.0) - self.credited[agent],
                                     final, not cut, cut))
        self.pending = {}
        if self.monte_carlo is not None:
            self.transitions = _monte_carlo(self.moves + self.transitions, self.monte_carlo)
            self.moves = []

    def returns(self) -> list[float]:
        """Each agent's return in the game just over."""
        return [self.totals.get(agent, 0.0) for agent in self.agents]

    def close(self) -> None:
        """Close the environment."""
        close_env(self.env)


class SelfPlayTrainer(Trainer):
    """:class:`~parcat.train.trainer.Trainer`'s loop, checkpoints and logs, for a
    turn-based game trained by self-play (the module docstring says how)."""

    def __init__(self, config: TrainConfig, resume: bool = False,
                 on_epoch: Callable[[EpochStats], None] | None = None,
                 on_event: Callable[[str, int], None] | None = None,
                 on_frame: Callable[[str], None] | None = None) -> None:
        self.mission = mission = load_mission(config.mission, dict(config.overrides))
        check_installed(config.loggers)
        specs = mission.agents()
        self.space = check_self_play(mission, config)
        self.num_actions = int(cast(spaces.Discrete, specs[0].action_space).n)
        flat = cast(spaces.Box, spaces.flatten_space(self.space))
        self.recipe = LearnerRecipe(NegamaxDQN if config.negamax else learner_class(config.learner),
                                    flat, specs[0].action_space, learner_options(config.learner),
                                    config.seed)
        self.learner: Learner = self.recipe.build()
        if config.negamax:
            cast(NegamaxDQN, self.learner).legal_columns = _legal_columns(self.space)
        self.mirrored = _mirrored(self.space, self.num_actions) if config.mirror else None
        """Where each number of the learner's input comes from in the mirrored board."""
        self.learners = {spec.agent_id: self.learner for spec in specs}
        self.unique_learners = [(SHARED, self.learner)]
        self._agent_index = {spec.agent_id: i for i, spec in enumerate(specs)}
        num_envs = max(1, config.env_workers or 0) * config.envs_per_worker
        self.plan = TrainPlan(env_workers=0, train_workers=1, spin=False, num_envs=num_envs,
                              reasons=("self-play: every game in this process (the network "
                                       "is the cost); --env-workers counts as games",))
        self.config = config = replace(config.with_epochs_for(num_envs), env_workers=0,
                                       train_threads=0, mode=LearningMode.SYNC)
        self.on_epoch, self.on_frame = on_epoch, on_frame
        self.on_event = on_event or (lambda event, epoch: None)
        self._learning, self._pool, self._ray_connected = None, None, False
        self.pool: list[tuple[int, Any]] = []
        """(epoch it joined at, policy) of every past self."""
        self.games: list[Game] = []
        self.resumed = resume = resume and has_checkpoint(config.run_path)
        self.start_epoch = 0
        first = {specs[0].agent_id: self.learner}
        if resume:
            self.start_epoch = restore(config.run_path, first, config)
            self._load_pool()
        elif config.init_from:
            init_weights(config.init_from, first)
        self.metrics = RunLoggers(config, self.start_epoch if resume else None, num_envs)

    def run(self) -> TrainReport:
        """Train as :meth:`Trainer.run` does, BLAS on one thread throughout (the past
        selves' networks act on a few rows, where more threads only cost)."""
        with single_threaded_blas():
            return super().run()

    def _checkpointer(self) -> Checkpointer:
        return Checkpointer(self.config, self.mission, self.learners, evaluator=self.evaluate,
                            more_arrays=self._pool_arrays, num_envs=self.plan.num_envs)

    def _start(self) -> None:
        # a resumed run starts new games, numbered on from every game the run could have had
        first_episode = self.start_epoch * self.config.steps_per_epoch
        gamma = float(self.learner.config.get("gamma", 1.0))
        self.games = []
        for index in range(self.plan.num_envs):
            with self._game_code(f"game {index}"):
                self.games.append(Game(self.mission, index, self._flat,
                                       gamma if self.config.monte_carlo else None,
                                       gamma if self.config.negamax else None))
                self._begin(self.games[-1], first_episode)

    def _begin(self, game: Game, episode: int) -> None:
        game.episode = episode
        rng = np.random.default_rng(derive_seed(self.config.seed, OPPONENT_STREAM, game.index,
                                                episode))
        draw = rng.random()
        if self.pool and draw < self.config.pool_share:
            _, opponent = self.pool[int(rng.integers(len(self.pool)))]
            game.start(self.config.seed, episode, opponent,
                       game.agents[int(rng.integers(len(game.agents)))])
        else:
            game.start(self.config.seed, episode)

    def _epoch(self, epoch: int) -> EpochStats:
        start = time.perf_counter()
        finished: list[tuple[int, list[float]]] = []
        for _ in range(self.config.steps_per_epoch):
            self.on_event("collect", epoch)
            finished += self._move()
        collect_s = time.perf_counter() - start
        begin = time.perf_counter()
        self.on_event("train_start", epoch)
        metrics = train_each({SHARED: self.learner}, self.config.gradient_steps)
        self.on_event("train_end", epoch)
        train_s = time.perf_counter() - begin
        if self.config.pool_size and (epoch + 1) % self.config.pool_every == 0:
            self._join_pool(epoch + 1, self.learner.policy_arrays())
        steps = self.config.steps_per_epoch * self.plan.num_envs
        return EpochStats(
            epoch=epoch + 1, env_steps=steps, **episode_summary(finished, list(self.learners)),
            loss={SHARED: float(metrics[SHARED].get("loss", math.nan))},
            learner_metrics={SHARED: {k: v for k, v in metrics[SHARED].items() if k != "loss"}
                             | {"pool": float(len(self.pool))}},
            epsilon=float(getattr(self.learner, "exploration", math.nan)),
            collect_s=collect_s, train_s=train_s, idle_s=0.0,
            env_steps_per_s=steps / collect_s if collect_s > 0 else 0.0,
            total_env_steps=(epoch + 1) * steps, time_s=time.perf_counter() - self._began,
            timestamp=datetime.now(timezone.utc).isoformat(timespec="seconds"))

    def _move(self) -> list[tuple[int, list[float]]]:
        """One move in every game; the games that ended, as (length, returns)."""
        mine = [game for game in self.games if game.learner_moves]
        actions: dict[int, int] = {}
        rows: dict[int, np.ndarray] = {}
        if mine:
            x = np.stack([self._flat(game.request[1]) for game in mine])
            legal = np.stack([_legal(game.request[1], self.num_actions) for game in mine])
            chosen = self.learner.act(x, explore=True, legal=legal)  # type: ignore[call-arg]
            for game, row, action in zip(mine, x, chosen, strict=True):
                actions[game.index], rows[game.index] = int(action), row
        others: dict[int, list[Game]] = {}
        for game in self.games:
            if not game.learner_moves:
                others.setdefault(id(game.opponent), []).append(game)
        for group in others.values():
            moves = group[0].opponent.step_batch([game.request[1] for game in group])
            actions.update({game.index: int(a) for game, a in zip(group, moves, strict=True)})
        finished = []
        for game in self.games:
            with self._game_code(f"game {game.index}"):
                length = game.play(actions[game.index], rows.get(game.index))
                if length is not None:
                    finished.append((length, game.returns()))
                    self._begin(game, game.episode + 1)
        self._hand_over()
        return finished

    @contextmanager
    def _game_code(self, game: str) -> Iterator[None]:
        """Run ``game``'s own code: what it raises stops training in one line (a
        :class:`WorkerError`, so :meth:`run` keeps the last finished epoch's checkpoint)."""
        try:
            yield
        except USER_CODE_ERRORS as exc:
            raise WorkerError(f"{game} of '{self.mission.name}' raised "
                              f"{type(exc).__name__}: {clip(str(exc), 200)}") from exc

    def _hand_over(self) -> None:
        """Hand the transitions the last move closed to the learner, game after game."""
        taken = [(game.index, t) for game in self.games for t in game.transitions]
        for game in self.games:
            game.transitions = []
        if not taken:
            return
        num_envs = self.plan.num_envs
        batch = Transitions(
            np.stack([t[1] for _, t in taken]), np.array([t[2] for _, t in taken], np.int64),
            np.array([t[3] for _, t in taken], np.float32), np.stack([t[4] for _, t in taken]),
            np.array([t[5] for _, t in taken]), np.array([t[6] for _, t in taken]),
            np.array([self._agent_index[t[0]] * num_envs + index for index, t in taken],
                     np.int64))
        self.learner.observe(batch)
        if self.mirrored is not None:
            self.learner.observe(batch._replace(
                obs=batch.obs[:, self.mirrored], actions=self.num_actions - 1 - batch.actions,
                next_obs=batch.next_obs[:, self.mirrored]))

    def _flat(self, obs: Any) -> np.ndarray:
        """The learner's input: the observation flattened as the ``mlp`` policy does."""
        return flat_observation(self.space, obs)

    def _join_pool(self, epoch: int, arrays: dict[str, np.ndarray]) -> None:
        spec = self.mission.agents()[0]
        policy = import_reference(self.learner.policy)(spec, **self.learner.policy_kwargs)
        policy.load_state_dict({k: np.array(v, copy=True) for k, v in arrays.items()})
        self.pool = [*self.pool, (epoch, policy)][-self.config.pool_size:]

    def _pool_arrays(self) -> dict[str, dict[str, np.ndarray]]:
        arrays = {"epochs": np.array([epoch for epoch, _ in self.pool], np.int64)}
        for index, (_, policy) in enumerate(self.pool):
            arrays |= {f"{index}.{k}": v for k, v in policy.state_dict().items()}
        return {POOL_FILE: arrays}

    def _load_pool(self) -> None:
        from parcat.policies import checkpoint
        arrays = checkpoint.load_run_arrays(self.config.run_path, POOL_FILE) or {}
        for index, epoch in enumerate(arrays.get("epochs", np.zeros(0, np.int64)).tolist()):
            prefix = f"{index}."
            self._join_pool(int(epoch), {k[len(prefix):]: v for k, v in arrays.items()
                                         if k.startswith(prefix)})

    def evaluate(self) -> dict[str, float]:
        """The learner's mean greedy return per seat against ``random`` (``total``: their
        sum), on ``eval_episodes`` fixed games, the seats taken in turn."""
        agents = list(self.learners)
        sums, counts = np.zeros(len(agents)), np.zeros(len(agents))
        random = RandomPolicy(self.mission.agents()[0])
        for episode in range(self.config.eval_episodes):
            seat = episode % len(agents)
            random.reset(derive_seed(self.config.seed, EVAL_OPPONENT_STREAM, episode))
            with self._game_code(f"evaluation game {episode}"):
                sums[seat] += self._evaluation_game(episode, agents[seat], random)
            counts[seat] += 1
        means = {str(a): float(sums[i] / counts[i]) if counts[i] else math.nan
                 for i, a in enumerate(agents)}
        return means | {TOTAL: float(sum(v for v in means.values() if not math.isnan(v)))}

    def _evaluation_game(self, episode: int, seat: Any, opponent: Any) -> float:
        with self.mission.open_env() as env:
            env.reset(seed=derive_seed(self.config.seed, EVAL_STREAM, episode))
            totals: dict[Any, float] = {}
            turns = play_turns(env, totals, self.mission.max_steps)
            try:
                observations, (agent,) = next(turns)
                while True:
                    obs = observations[agent]
                    if agent == seat:
                        x = self._flat(obs)[None]
                        action = int(self.learner.act(  # type: ignore[call-arg]
                            x, explore=False, legal=_legal(obs, self.num_actions)[None])[0])
                    else:
                        action = int(opponent.step(obs))
                    observations, (agent,) = turns.send({agent: action})
            except StopIteration:
                return totals.get(seat, 0.0)

    def close(self) -> None:
        """Close the games' environments."""
        for game in self.games:
            game.close()
        self.games = []
        super().close()


class NegamaxDQN(DQNLearner):
    """DQN for a two-seat game rewarded at its end, each move's next observation the
    opponent's: a move is worth its reward, less (discounted) what the opponent's best legal
    reply is worth to the opponent. One network values both seats, so a win learned one
    move from the end teaches the block one move earlier, in a few updates; a move the
    opponent did answer with a win comes closed (:class:`Game`) at minus that win, its exact
    value in a game where nothing beats winning."""

    legal_columns: np.ndarray | None = None
    """Where the learner's input holds the legal-move mask (``None``: every move legal)."""

    def _next_value(self, q_next: np.ndarray, q_online_next: np.ndarray | None,
                    next_obs: np.ndarray) -> np.ndarray:
        if self.legal_columns is not None:
            legal = next_obs[:, self.legal_columns] > 0.5
            q_next = np.where(legal, q_next, -np.inf)
            if q_online_next is not None:
                q_online_next = np.where(legal, q_online_next, -np.inf)
        value = super()._next_value(q_next, q_online_next, next_obs)
        return -np.where(np.isfinite(value), value, 0.0).astype(np.float32)


def _legal_columns(space: gymnasium.spaces.Space[Any]) -> np.ndarray | None:
    """Where the flattened observation holds its ``action_mask`` (``None``: it has none)."""
    if not isinstance(space, spaces.Dict) or "action_mask" not in space.spaces:
        return None
    marked = {key: np.full(part.shape or (), key == "action_mask", np.float32)
              for key, part in space.spaces.items()}
    return np.flatnonzero(flat_observation(space, marked))


def _mirrored(space: gymnasium.spaces.Space[Any], num_actions: int) -> np.ndarray:
    """The permutation of the flattened observation that mirrors the board left to right:
    each part reversed along its one axis as long as the moves are many (a board's columns,
    the mask's moves); :class:`ConfigError` where a part has no such axis or several."""
    parts = dict(space.spaces) if isinstance(space, spaces.Dict) else {None: space}
    numbered: dict[Any, np.ndarray] = {}
    mirrored: dict[Any, np.ndarray] = {}
    count = 0
    for key, part in parts.items():
        shape = tuple(part.shape or ())
        axes = [axis for axis, size in enumerate(shape) if size == num_actions]
        if len(axes) != 1:
            raise ConfigError(
                f"mirror: the observation{f' {key!r}' if key else ''} has shape {shape}: "
                f"{len(axes)} axes of {num_actions}, one per move, where the mirror needs "
                "one (a board's columns); leave mirror out for this game")
        values = np.arange(count, count + int(np.prod(shape))).reshape(shape)
        numbered[key], mirrored[key], count = values, np.flip(values, axes[0]), count + values.size
    def flat(board: dict[Any, np.ndarray]) -> np.ndarray:
        return flat_observation(space, board.get(None, board)).astype(np.int64)

    return np.argsort(flat(numbered))[flat(mirrored)]


def _monte_carlo(moves: list[Transition], gamma: float) -> list[Transition]:
    """Each seat's moves of a game, each with its discounted return to the game's end as
    its reward and nothing to bootstrap (terminated)."""
    out = []
    for agent in dict.fromkeys(move[0] for move in moves):
        outcome = 0.0
        for move in reversed([move for move in moves if move[0] == agent]):
            outcome = move[3] + gamma * outcome
            out.append((agent, move[1], move[2], outcome, move[1], True, False))
    return out


def _legal(obs: Any, num_actions: int) -> np.ndarray:
    """The action mask an observation carries, as bools (all legal where it has none)."""
    mask = obs.get("action_mask") if isinstance(obs, dict) else None
    return (np.ones(num_actions, bool) if mask is None
            else np.asarray(mask, dtype=bool).reshape(-1))


def check_self_play(mission: Mission, config: TrainConfig) -> gymnasium.spaces.Space[Any]:
    """The observation space every seat shares; :class:`ConfigError` where one network
    cannot play every seat, or the learner takes no legal-move masks."""
    unsupported = [flag for flag, given in (("--mode async", config.mode is LearningMode.ASYNC),
                                            ("--backend ray", config.backend != "local"),
                                            ("--render", config.render),
                                            ("--best-episodes", config.best_episodes > 0),
                                            # one network plays every seat already, and it
                                            # has no agent one-hot a checkpoint could load
                                            ("--shared-learner", config.shared_learner))
                   if given]
    if unsupported:
        raise ConfigError(f"self-play on '{mission.name}' plays every game in this process; "
                          f"{unsupported[0]} is not supported there: leave it out")
    specs = mission.agents()
    first = specs[0]
    for spec in specs[1:]:
        if (spec.observation_space, spec.action_space) != (first.observation_space,
                                                           first.action_space):
            raise ConfigError(
                f"self-play on '{mission.name}': agent '{spec.agent_id}' has spaces "
                f"{spec.observation_space}, {spec.action_space}, agent '{first.agent_id}' "
                f"{first.observation_space}, {first.action_space}; one network plays every "
                "seat, so they must be the same")
    if not isinstance(first.action_space, spaces.Discrete) or first.action_space.start != 0:
        raise ConfigError(f"self-play on '{mission.name}': the agents act in "
                          f"{first.action_space}; self-play needs Discrete actions from 0")
    cls = learner_class(config.learner)
    if config.negamax and (len(specs) != 2 or cls is not DQNLearner or config.monte_carlo):
        raise ConfigError(f"self-play on '{mission.name}': --negamax needs two seats (this "
                          f"game has {len(specs)}), --learner dqn (got {cls.__name__}) and no "
                          "--monte-carlo")
    act = getattr(cls, "act", None)
    if not callable(act) or "legal" not in inspect.signature(act).parameters:
        raise ConfigError(
            f"self-play on '{mission.name}': the learner {cls.__name__} takes no legal-move "
            "masks (act(obs, explore, legal)); use --learner dqn")
    return first.observation_space


def make_trainer(config: TrainConfig, **kwargs: Any) -> Trainer:
    """A :class:`SelfPlayTrainer` for a turn-based game, else a
    :class:`~parcat.train.trainer.Trainer` (``kwargs``: theirs)."""
    mission = load_mission(config.mission, dict(config.overrides))
    return (SelfPlayTrainer if mission.turn_based else Trainer)(config, **kwargs)
