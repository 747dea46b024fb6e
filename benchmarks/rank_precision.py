"""Episodes, not seconds (issue 25): how many episodes ``parcat eval --cross --precision X``
plays until no two neighbours in the ranking have an open order (their difference's 95%
interval holds 0) wider than ± X Elo points, against a uniform schedule (every ordered pair
the same number of episodes, raised by ``--step`` until it gets there).

Both are deterministic for a seed, so the counts need no repeats and no quiet machine:
``python benchmarks/rank_precision.py [--mission evade|connect_four] [--precision 150]``
(evade: greedy, random and noop, ``max_steps`` 20; connect_four: random, mlp, noop and the
tests' scripted heuristic, from the repository's root; 4 episodes a round).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from parcat.eval.evaluate import make_config
from parcat.eval.tournament import CrossResult, cross_play
from parcat.parallel.run_options import RunOptions

POLICIES = {"evade": ["greedy", "random", "noop"],
            "connect_four": ["random", "mlp", "noop", "tests.rank_fakes:Heuristic"]}
CONNECT_FOUR = "name: connect_four\nenv: pettingzoo.classic.connect_four_v3:env\nmax_steps: 42\n"


def widest(result: CrossResult) -> float:
    """The largest half-width of an open neighbour difference, in Elo points (0: none)."""
    return max([(r.ahead.high - r.ahead.low) / 2 for t in result.ratings for r in t.ratings
                if r.ahead is not None and r.ahead.low <= 0], default=0.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mission", choices=sorted(POLICIES), default="evade")
    parser.add_argument("--precision", type=float, default=150.0)
    parser.add_argument("--max-steps", type=int, default=20, help="evade's")
    parser.add_argument("--step", type=int, default=4)
    args = parser.parse_args()
    folder = tempfile.TemporaryDirectory()
    mission, overrides = args.mission, {"max_steps": args.max_steps}
    if mission == "connect_four":
        mission, overrides = str(Path(folder.name) / "connect_four.yaml"), {}
        Path(mission).write_text(CONNECT_FOUR)

    def run(episodes: int, precision: float | None = None) -> CrossResult:
        config = make_config([mission], POLICIES[args.mission], episodes=episodes, seed=0,
                             overrides=overrides, trust_code=True)
        return cross_play(config, RunOptions(jobs=1), precision=precision, max_episodes=400)

    adaptive = run(args.step, args.precision)
    print(f"--precision {args.precision:g}: {len(adaptive.episodes)} episodes, widest open "
          f"gap {widest(adaptive):.0f}, ranking {_order(adaptive)}", flush=True)
    episodes = args.step
    while True:
        uniform = run(episodes)
        print(f"uniform -n {episodes}: {len(uniform.episodes)} episodes, widest open gap "
              f"{widest(uniform):.0f}, ranking {_order(uniform)}", flush=True)
        if widest(uniform) < args.precision:
            break
        episodes += args.step


def _order(result: CrossResult) -> str:
    return " > ".join(r.policy for r in result.ratings[0].ratings)


if __name__ == "__main__":
    main()
