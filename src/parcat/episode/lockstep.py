"""Episodes in lockstep: one runner plays K episodes side by side, one policy call per step.

Each episode is :meth:`EpisodeRunner.episode <parcat.episode.rollout.EpisodeRunner.episode>`,
a generator asking for its agents' actions; every round, all the playing episodes' requests
are answered together by :func:`~parcat.stepping.base.act_in_lockstep` (one ``step_batch``
per stateless policy shared across them; every async call of them all in flight at once),
and an episode that ends makes room for the next task. Every episode keeps its own seeds,
so its result does not depend on K or on what it was played with.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, Generic, TypeVar, cast

from parcat.core.trace import now_us
from parcat.episode.results import EpisodeResult
from parcat.episode.rollout import Episode, EpisodeRunner, EpisodeTask, Request
from parcat.stepping.base import InlineStepper, PolicyStepError, act_in_lockstep

T = TypeVar("T")
_END: Any = object()


def run_many(runner: EpisodeRunner, tasks: Iterable[tuple[T, EpisodeTask] | None],
             slots: int, on_round: Callable[[], None] | None = None
             ) -> Iterator[tuple[T, EpisodeResult]]:
    """Play tagged tasks on ``runner``, up to ``slots`` at once in lockstep; yield
    ``(tag, result)`` as each episode ends.

    ``tasks`` may give ``None`` for "nothing new yet" while some episode plays (a worker's
    queue); it must block rather than give ``None`` while none does. A runner whose
    stepper is not inline (policy workers, threads) plays one episode at a time.
    ``on_round`` runs after every round (a lane that also tends workers does it there: a
    round is short, K episodes are not).
    """
    if slots <= 1 or type(runner.stepper) is not InlineStepper:
        for item in tasks:
            if item is not None:
                yield item[0], runner.run(item[1])
        return
    runners = _slot_runners(runner, slots)
    playing: dict[int, _Slot[T]] = {}
    upcoming, more = iter(tasks), True
    while True:
        for i in range(slots):
            while more and i not in playing:
                item = next(upcoming, _END)
                if item is None or item is _END:
                    more = item is None
                    break
                tag, task = cast(tuple[T, EpisodeTask], item)
                slot = _Slot(tag, runners[i].episode(task))
                if (result := slot.advance(None)) is not None:
                    yield tag, result
                else:
                    playing[i] = slot
        if not playing:
            return
        yield from _round(runner, runners, playing)
        if on_round is not None:
            on_round()


def _round(runner: EpisodeRunner, runners: list[EpisodeRunner],
           playing: dict[int, _Slot[T]]) -> Iterator[tuple[T, EpisodeResult]]:
    """One round: every playing slot's request answered, its episode advanced."""
    order = list(playing)
    begin = now_us()
    answers = act_in_lockstep([(cast(InlineStepper, runners[i].stepper), *playing[i].request)
                               for i in order])
    if runner.tracer is not None:
        runner.tracer.span("policies", begin, now_us(), track=f"{runner.track}/agents",
                           agents=sum(len(a) for a in answers if isinstance(a, dict)))
    for i, answer in zip(order, answers, strict=True):
        if (result := playing[i].advance(answer)) is not None:
            yield playing.pop(i).tag, result


def _slot_runners(runner: EpisodeRunner, slots: int) -> list[EpisodeRunner]:
    """``runner`` and ``slots - 1`` more: each slot has its own environments and policies
    (a stateful policy keeps one instance per slot and agent; stateless ones are built
    once, by ``runner``'s stepper, and lent to the others)."""
    first = cast(InlineStepper, runner.stepper)
    while len(runner.slots) < slots - 1:
        runner.slots.append(EpisodeRunner(first.sibling(), runner.on_step, runner.tracer,
                                          f"{runner.track}.{len(runner.slots) + 1}"))
    return [runner, *runner.slots[:slots - 1]]


class _Slot(Generic[T]):
    """A slot of :func:`run_many`: the episode playing in it and its current request."""

    def __init__(self, tag: T, episode: Episode) -> None:
        self.tag = tag
        self.episode = episode
        self.request: Request = ({}, [])

    def advance(self, answer: dict[Any, Any] | PolicyStepError | None) -> EpisodeResult | None:
        """Hand the episode its actions (its failure; nothing at its start): its result if
        it ended, else ``None`` (its next request is in :attr:`request`)."""
        try:
            if isinstance(answer, PolicyStepError):
                self.request = self.episode.throw(answer)
            else:
                self.request = self.episode.send(answer)  # type: ignore[arg-type]
        except StopIteration as end:
            return cast(EpisodeResult, end.value)
        return None
