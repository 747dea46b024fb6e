"""Agent-level strategies: who computes the agents' actions within one episode.

A :class:`Stepper` gets the episode's seats (agent, policy spec, seed) at its start, then
maps observations to actions once per step: ``inline`` here (``batch`` is its word too: it
shares stateless policies' calls), ``thread`` and ``process`` in the modules of those names.
:func:`act_in_lockstep` answers several inline episodes' steps at once, one call per
shared policy for all of them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Hashable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from gymnasium import spaces

from parcat.core.errors import USER_CODE_ERRORS
from parcat.envs.missions import Mission
from parcat.ipc.process import ACTING, ErrorReport, acting_marker
from parcat.policies.base import AgentSpec, Policy, close_policies, is_async
from parcat.policies.specs import PolicySpec, make_policy
from parcat.stepping.calls import AsyncAgents, Call, call_retrying

STRAGGLER_WAIT_S = 5.0  # how long a new episode waits for a late policy step of the last one


def straggler_wait(action_timeout_s: float | None) -> float:
    """How long to wait for a late step: :data:`STRAGGLER_WAIT_S`, or, with a deadline,
    ten deadlines (at least half a second): a step that late is taken as hung."""
    if action_timeout_s is None:
        return STRAGGLER_WAIT_S
    return min(STRAGGLER_WAIT_S, max(0.5, 10 * action_timeout_s))


@dataclass(frozen=True)
class Seat:
    """One agent of one episode: who plays it and with which seed."""

    agent: AgentSpec
    spec: PolicySpec
    seed: int
    """The seed for ``policy.reset``."""


class PolicyStepError(Exception):
    """A policy raised (here or in a worker) while acting for ``agent``."""

    def __init__(self, agent: Any, phase: str, remote: ErrorReport | None = None):
        super().__init__(agent, phase)
        self.agent = agent
        self.phase = phase
        self.remote = remote
        """The worker's report (type, message, traceback) when raised in a worker."""


class PolicyCache:
    """Policies kept alive between episodes, one per (mission, spec, agent index).

    Args:
        lender: Another episode's cache, played beside this one: a stateless policy it has
            for the same key is used here too rather than built again.
    """

    def __init__(self, lender: PolicyCache | None = None) -> None:
        self._policies: dict[tuple[Mission, PolicySpec, int], Policy] = {}
        self._lender = lender
        self._built: dict[int, int] = {}
        """Per ``id`` of a policy this cache built, the keys holding it (a factory may
        return one instance for several agents): only those are its to close, once no key
        holds them (a lent one is its lender's)."""

    def get(self, mission: Mission, seat: Seat) -> Policy:
        """The policy for ``seat``, built on first use."""
        key = (mission, seat.spec, seat.agent.agent_index)
        policy = self._policies.get(key)
        if policy is None:
            lent = None if self._lender is None else self._lender._policies.get(key)
            if lent is None or not getattr(lent, "stateless", False):
                lent = make_policy(seat.spec, mission, seat.agent)
                self._built[id(lent)] = self._built.get(id(lent), 0) + 1
            policy = self._policies[key] = lent
        return policy

    def reset(self, mission: Mission, seats: Sequence[Seat],
              marker: Any = None) -> dict[Any, Policy]:
        """Policies for ``seats``, each reset with its seed; ``marker`` (a worker's
        :func:`~parcat.ipc.process.acting_marker`) names the agent being built or reset."""
        policies = {}
        for seat in seats:
            if marker is not None:
                marker[ACTING] = seat.agent.agent_index + 1
            policy = self.get(mission, seat)
            try:
                policy.reset(seat.seed)
            except USER_CODE_ERRORS as exc:
                raise PolicyStepError(seat.agent.agent_id, "reset") from exc
            policies[seat.agent.agent_id] = policy
        if marker is not None:
            marker[ACTING] = 0
        return policies

    def forget(self, agent_index: int, running: Future[Any] | None = None) -> None:
        """Drop the policies of one agent, so the next episode builds new ones; they are
        closed (:func:`~parcat.policies.base.close_policies`) now, or once ``running`` (a
        step still under way in one of them) ends."""
        dropped = [self._drop(k) for k in list(self._policies) if k[2] == agent_index]
        if running is None:
            close_policies(dropped)
        else:
            running.add_done_callback(lambda _: close_policies(dropped))

    def clear(self) -> None:
        """Drop and close every policy (the run, or this worker, is done with them)."""
        close_policies([self._drop(k) for k in list(self._policies)])

    def _drop(self, key: tuple[Mission, PolicySpec, int]) -> Policy | None:
        policy = self._policies.pop(key)
        holders = self._built.pop(id(policy), 0) - 1
        if holders > 0:
            self._built[id(policy)] = holders
        return policy if holders == 0 else None


class Stepper(ABC):
    """Computes every live agent's action for one step of an episode."""

    name = "stepper"

    @abstractmethod
    def start(self, mission: Mission, seats: Sequence[Seat]) -> None:
        """Prepare for an episode: build and reset the seats' policies."""

    @abstractmethod
    def act(self, obs: dict[Any, Any], live: Sequence[Any]) -> dict[Any, Any]:
        """Actions for the ``live`` agents, keyed like ``obs``."""

    def late_actions(self) -> dict[Any, int]:
        """Per agent, how many steps used the default action because the policy was late."""
        return {}

    def call_retries(self) -> dict[Any, int]:
        """Per agent, how many policy calls were retried after a transient error."""
        return {}

    def close(self) -> None:  # noqa: B027 - most steppers hold nothing to release
        """Release workers and memory."""


class InlineStepper(Stepper):
    """Every policy runs in this process: agents that share a stateless policy act through
    one ``step_batch`` call, the others one by one (:func:`act_in_lockstep`).

    A policy class opts in to sharing with ``stateless = True`` and a ``step_batch``: its
    actions depend only on the observation, so one instance can act for every agent with
    the same spec, in this episode and in those played beside it, and the results equal
    per-agent stepping. Instances with a ``batch_group`` share only with the same group
    (a run checkpoint's agents each have weights of their own).
    """

    name = "inline"

    def __init__(self, action_timeout_s: float | None = None, retries: int = 0,
                 lender: PolicyCache | None = None) -> None:
        self.cache = PolicyCache(lender)
        self.mission: Mission | None = None
        self.awaited = AsyncAgents(action_timeout_s, retries)  # policies with async calls
        self._step_fns: dict[Any, Any] = {}
        self._groups: dict[tuple[PolicySpec, Any, Hashable, Hashable], tuple[Any, list[Any]]] = {}
        """Per shared stateless policy (spec, ``batch_group``, the agents' spaces), its
        ``step_batch`` and its agents."""
        self._singles: list[Any] = []
        # in a worker process, which agent's code runs now (for a death's report)
        self._marker = acting_marker()
        self._marks: dict[Any, int] = {}

    def shared_groups(self) -> list[tuple[Any, list[Any]]]:
        """This episode's shared stateless policies: each ``step_batch`` and its agents."""
        return list(self._groups.values())

    def all_async(self) -> bool:
        """Whether every agent of this episode acts through async calls."""
        return bool(self._step_fns) and self.awaited.agents >= set(self._step_fns)

    def start(self, mission: Mission, seats: Sequence[Seat]) -> None:
        self.mission = mission
        self._marks = {s.agent.agent_id: s.agent.agent_index + 1 for s in seats}
        policies = self.cache.reset(mission, seats, self._marker)
        self._step_fns = {agent_id: p.step for agent_id, p in policies.items()}
        self._groups = {}
        for seat in seats:
            policy = policies[seat.agent.agent_id]
            if getattr(policy, "stateless", False) and callable(getattr(policy, "step_batch",
                                                                        None)):
                # one call acts for agents of one network on one kind of observation
                key = (seat.spec, getattr(policy, "batch_group", None),
                       space_key(seat.agent.observation_space), space_key(seat.agent.action_space))
                group = self._groups.setdefault(key, (policy.step_batch, []))  # type: ignore[attr-defined]
                group[1].append(seat.agent.agent_id)
        shared = {a for _, members in self._groups.values() for a in members}
        self._singles = [s.agent.agent_id for s in seats if s.agent.agent_id not in shared]
        waiting = {a for a in self._singles if is_async(self._step_fns[a])}
        waiting.update(a for fn, members in self._groups.values() if is_async(fn)
                       for a in members)
        self.awaited.start({s.agent.agent_id: s.agent.action_space for s in seats
                            if s.agent.agent_id in waiting})

    def act(self, obs: dict[Any, Any], live: Sequence[Any]) -> dict[Any, Any]:
        answer = act_in_lockstep([(self, obs, live)])[0]
        if isinstance(answer, PolicyStepError):
            raise answer
        return answer

    def sibling(self) -> InlineStepper:
        """A stepper for another slot played in lockstep beside this one: the same
        deadline and retries, this one's stateless policies lent."""
        calls = self.awaited.calls
        return InlineStepper(calls.timeout, calls.retries, self.cache)

    def late_actions(self) -> dict[Any, int]:
        return dict(self.awaited.late)

    def call_retries(self) -> dict[Any, int]:
        return dict(self.awaited.retried)

    def close(self) -> None:
        self.cache.clear()


def space_key(space: Any) -> Hashable:
    """What tells two spaces apart for a shared network (cheap: a harvest observation
    space's ``str`` costs ~100 µs, and every seat of every episode asks)."""
    if isinstance(space, spaces.Box):
        return ("Box", space.shape, space.dtype.str, space.low.tobytes(), space.high.tobytes())
    if isinstance(space, spaces.Discrete):
        return ("Discrete", int(space.n), int(space.start))
    return str(space)


SlotRequest = tuple[InlineStepper, dict[Any, Any], Sequence[Any]]
"""A slot's stepper, its episode's observations and the live agents to act."""
Answer = dict[Any, Any] | PolicyStepError
"""The actions of a slot's live agents, or what failed it."""


def act_in_lockstep(requests: Sequence[SlotRequest]) -> list[Answer]:
    """Answer the requests of several episodes (slots) at once: every stateless policy
    shared across them, by (mission, spec, batch group), acts in one ``step_batch`` call
    for all their agents; the other agents' policies are stepped one by one. Async calls
    (those shared calls and agents' own steps) go out first, every slot's at once. A
    failure fails only the slots whose observations it failed on."""
    answers: list[Answer] = [{} for _ in requests]
    groups: dict[tuple[Mission | None, tuple[PolicySpec, Any, Hashable, Hashable]],
                 tuple[Any, list[tuple[int, Any]]]] = {}
    singles: list[tuple[int, Any]] = []
    for slot, (stepper, _, live) in enumerate(requests):
        everyone = len(live) == len(stepper._marks)
        alive = set(live)
        for key, (step_batch, agent_ids) in stepper._groups.items():
            members = groups.setdefault((stepper.mission, key), (step_batch, []))[1]
            members.extend((slot, a) for a in agent_ids if everyone or a in alive)
        singles.extend((slot, a) for a in stepper._singles if everyone or a in alive)
    shared = [_Unit(fn, members, True) for fn, members in groups.values() if members]
    waiting = [_Unit(requests[slot][0]._step_fns[a], [(slot, a)], False)
               for slot, a in singles if a in requests[slot][0].awaited.agents]
    if waiting or any(is_async(unit.fn) for unit in shared):
        _call_waiting([u for u in shared if is_async(u.fn)] + waiting, requests, answers)
        shared = [unit for unit in shared if not is_async(unit.fn)]
        singles = [m for m in singles if m[1] not in requests[m[0]][0].awaited.agents]
    for unit in shared:
        _call_shared(unit.fn, unit.members, requests, answers)
    _call_singles(singles, requests, answers)
    return [_projected(answer, requests[slot][2]) for slot, answer in enumerate(answers)]


def _projected(answer: Answer, live: Sequence[Any]) -> Answer:
    """The actions of ``live`` in its order; an agent the environment made live without a
    seat (not among its ``possible_agents``) fails the slot, not the run."""
    if isinstance(answer, PolicyStepError):
        return answer
    try:
        return {agent_id: answer[agent_id] for agent_id in live}
    except KeyError as missing:
        return _failed(missing.args[0], KeyError(
            f"the environment made agent {missing.args[0]!r} live, which is not among its "
            "possible_agents"))


@dataclass(frozen=True)
class _Unit:
    """One async call of a round: ``fn`` for ``members`` (slot, agent), a shared
    ``step_batch`` (``batched``) or one agent's ``step``."""

    fn: Any
    members: list[tuple[int, Any]]
    batched: bool


def _call_waiting(units: list[_Unit], requests: Sequence[SlotRequest],
                  answers: list[Answer]) -> None:
    """Every async call of the round in one :meth:`AsyncCalls.run`, so K episodes' agents
    wait at once on the process's loop; each outcome (late: the default action; its
    retries) counted for its own slot's agents. A raising shared call holding several slots
    is made again per slot, as in :func:`_call_shared`."""
    def arg(unit: _Unit) -> Any:
        obs = [requests[slot][1][agent_id] for slot, agent_id in unit.members]
        return obs if unit.batched else obs[0]

    ready: list[_Unit] = []
    args: list[Any] = []
    for unit in units:
        try:
            args.append(arg(unit))
        except KeyError as exc:  # an agent live without an observation fails its slots
            for slot, agent_id in unit.members:
                answers[slot] = _failed(agent_id, exc)
            continue
        ready.append(unit)
    units = ready
    outcomes = requests[0][0].awaited.calls.run(
        [Call(u.fn, a) for u, a in zip(units, args, strict=True)])
    again: list[_Unit] = []
    for unit, outcome in zip(units, outcomes, strict=True):
        values = outcome.value if unit.batched and not outcome.late else [outcome.value]
        error = outcome.error
        if error is None and not outcome.late:
            error = _wrong_length(values, len(unit.members))
        slots = sorted({slot for slot, _ in unit.members})
        if error is not None and len(slots) > 1:
            # its retries are not counted: each slot's own call counts its own, as alone
            again.extend(_Unit(unit.fn, [m for m in unit.members if m[0] == slot], True)
                         for slot in slots)
            continue
        for index, (slot, agent_id) in enumerate(unit.members):
            value = None if error is not None or outcome.late else values[index]
            action = requests[slot][0].awaited.settle(agent_id, outcome, value)
            answer = answers[slot]
            if isinstance(answer, dict):  # else the slot failed already: its episode ends
                if error is None:
                    answer[agent_id] = action
                else:
                    answers[slot] = _failed(agent_id, error)
    if again:
        _call_waiting(again, requests, answers)


def _wrong_length(actions: Any, expected: int) -> ValueError | None:
    """The error of a ``step_batch`` that did not return one action per observation."""
    got = len(actions) if hasattr(actions, "__len__") else None
    if got == expected:
        return None
    what = f"{got} actions" if got is not None else f"a {type(actions).__name__}"
    return ValueError(f"step_batch returned {what} for {expected} observations")


def _call_shared(step_batch: Any, members: list[tuple[int, Any]], requests: Sequence[SlotRequest],
                 answers: list[Answer]) -> None:
    """One ``step_batch`` call for ``members`` (slot, agent); when it raises and holds
    several slots, each slot's share is called alone to find the slots it fails on."""
    first_slot, first_agent = members[0]
    stepper = requests[first_slot][0]
    _mark(stepper, first_agent)
    failure: BaseException | None = None
    try:
        actions, retried = call_retrying(
            step_batch, [requests[slot][1][agent_id] for slot, agent_id in members],
            stepper.awaited.calls.retries)
        for slot, agent_id in members if retried else ():
            requests[slot][0].awaited.count_retries(agent_id, retried)
        if (wrong := _wrong_length(actions, len(members))) is not None:
            raise wrong
    except USER_CODE_ERRORS as exc:
        failure = exc
    finally:
        _mark(stepper, None)
    if failure is None:
        for (slot, agent_id), action in zip(members, actions, strict=True):
            answer = answers[slot]
            if isinstance(answer, dict):
                answer[agent_id] = action
        return
    slots = sorted({slot for slot, _ in members})
    if len(slots) == 1:
        answers[first_slot] = _failed(first_agent, failure)
        return
    # outside the except clause: a slot's own failure must not carry this one as context
    for slot in slots:
        _call_shared(step_batch, [m for m in members if m[0] == slot], requests, answers)


def _call_singles(singles: list[tuple[int, Any]], requests: Sequence[SlotRequest],
                  answers: list[Answer]) -> None:
    """The sync calls of policies without a shared batch form, one at a time."""
    for slot, agent_id in singles:
        answer = answers[slot]
        if not isinstance(answer, dict):
            continue  # the slot failed already: its episode ends
        stepper, obs, _ = requests[slot]
        _mark(stepper, agent_id)
        try:
            answer[agent_id], retried = call_retrying(
                stepper._step_fns[agent_id], obs[agent_id], stepper.awaited.calls.retries)
            stepper.awaited.count_retries(agent_id, retried)
        except USER_CODE_ERRORS as exc:
            answers[slot] = _failed(agent_id, exc)
        finally:
            _mark(stepper, None)


def _mark(stepper: InlineStepper, agent_id: Any) -> None:
    """In a worker, note whose code runs now (``None``: nobody's)."""
    if stepper._marker is not None:
        stepper._marker[ACTING] = 0 if agent_id is None else stepper._marks[agent_id]


def _failed(agent_id: Any, exc: BaseException) -> PolicyStepError:
    failure = PolicyStepError(agent_id, "policy")
    failure.__cause__ = exc
    return failure
