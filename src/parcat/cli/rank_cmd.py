"""``parcat rank FILE``: the ratings of a ``parcat eval --cross -o`` file."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from parcat.cli import options as opts
from parcat.cli.common import OutputFormat, user_errors
from parcat.cli.lazy import held_imports
from parcat.eval.rating_model import RatingModel


def rank_command(
    file: Annotated[Path, typer.Argument(metavar="FILE",
                                         help="A `parcat eval --cross -o` JSON file.")],
    seed: opts.Seed = None,
    fmt: opts.Format = OutputFormat.TABLE,
    rating: opts.Rating = RatingModel.BRADLEY_TERRY,
) -> None:
    """Rank the policies of a `parcat eval --cross` file: Bradley–Terry ratings with 95%
    intervals, P(best), and outcomes per side.

    Outcomes per side: win/draw/loss rates and illegal moves where the game has a winner,
    and the mean of every number the environment reports (evade: captured, the capture
    rate), per policy and side, with bootstrap 95% intervals.
    --seed: the bootstrap's (default: the one the file records). --format csv: one row per
    mission, policy and side, with the policy's rating. --rating alpharank: rank by α-Rank's
    mass instead, for populations where a beats b beats c beats a.
    """
    with held_imports():  # here, not at the top: `parcat rank --help` needs none of them
        from parcat.cli.tournament_view import show_ratings
        from parcat.eval.cross_file import load_cross
    with user_errors():
        result = load_cross(file, seed, rating)
    show_ratings(result, fmt)
