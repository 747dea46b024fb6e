"""Episodes, not seconds (issue 25): how many episodes ``parcat eval --cross --precision X``
plays to bring every rating's 95% half-width below X, against a uniform schedule (every
ordered pair the same number of episodes, raised by ``--episodes`` until it gets there).

Both are deterministic for a seed, so the counts need no repeats and no quiet machine:
``python benchmarks/rank_precision.py [--precision 100] [--max-steps 20]`` (evade, greedy,
random and noop, 4 episodes a round).
"""

from __future__ import annotations

import argparse

from parcat.eval.evaluate import make_config
from parcat.eval.tournament import CrossResult, cross_play
from parcat.parallel.run_options import RunOptions

POLICIES = ["greedy", "random", "noop"]


def widest(result: CrossResult) -> float:
    """The largest half-width of any rating, in Elo points."""
    return max((r.rating.high - r.rating.low) / 2 for t in result.ratings for r in t.ratings)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--precision", type=float, default=100.0)
    parser.add_argument("--max-steps", type=int, default=20)
    parser.add_argument("--step", type=int, default=4)
    args = parser.parse_args()

    def run(episodes: int, precision: float | None = None) -> CrossResult:
        config = make_config(["evade"], POLICIES, episodes=episodes, seed=0,
                             overrides={"max_steps": args.max_steps})
        return cross_play(config, RunOptions(jobs=1), precision=precision, max_episodes=400)

    adaptive = run(args.step, args.precision)
    print(f"--precision {args.precision:g}: {len(adaptive.episodes)} episodes, widest "
          f"half-width {widest(adaptive):.0f}")
    episodes = args.step
    while True:
        uniform = run(episodes)
        print(f"uniform -n {episodes}: {len(uniform.episodes)} episodes, widest half-width "
              f"{widest(uniform):.0f}", flush=True)
        if widest(uniform) < args.precision:
            break
        episodes += args.step


if __name__ == "__main__":
    main()
