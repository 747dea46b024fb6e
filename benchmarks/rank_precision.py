"""Episodes, not seconds (issue 25): how many episodes ``parcat eval --cross --precision X``
plays until no two neighbours in the ranking have an open order (their difference's 95%
interval holds 0) wider than ± X Elo points, against a uniform schedule (every ordered pair
the same number of episodes, raised by ``--step`` until it gets there).

Both are deterministic for a seed, so the counts need no repeats and no quiet machine:
``python benchmarks/rank_precision.py [--precision 150] [--max-steps 20]`` (evade, greedy,
random and noop, 4 episodes a round).
"""

from __future__ import annotations

import argparse

from parcat.eval.evaluate import make_config
from parcat.eval.tournament import CrossResult, cross_play
from parcat.parallel.run_options import RunOptions

POLICIES = ["greedy", "random", "noop"]


def widest(result: CrossResult) -> float:
    """The largest half-width of an open neighbour difference, in Elo points (0: none)."""
    return max([(r.ahead.high - r.ahead.low) / 2 for t in result.ratings for r in t.ratings
                if r.ahead is not None and r.ahead.low <= 0], default=0.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--precision", type=float, default=150.0)
    parser.add_argument("--max-steps", type=int, default=20)
    parser.add_argument("--step", type=int, default=4)
    args = parser.parse_args()

    def run(episodes: int, precision: float | None = None) -> CrossResult:
        config = make_config(["evade"], POLICIES, episodes=episodes, seed=0,
                             overrides={"max_steps": args.max_steps})
        return cross_play(config, RunOptions(jobs=1), precision=precision, max_episodes=400)

    adaptive = run(args.step, args.precision)
    print(f"--precision {args.precision:g}: {len(adaptive.episodes)} episodes, widest open "
          f"gap {widest(adaptive):.0f}")
    episodes = args.step
    while True:
        uniform = run(episodes)
        print(f"uniform -n {episodes}: {len(uniform.episodes)} episodes, widest open gap "
              f"{widest(uniform):.0f}", flush=True)
        if widest(uniform) < args.precision:
            break
        episodes += args.step


if __name__ == "__main__":
    main()
