"""What ``--rating`` ranks a cross-play population by (a light module: the CLI's flags
import it for ``--help``)."""

from __future__ import annotations

from enum import Enum


class RatingModel(str, Enum):
    """A model of who beats whom."""

    BRADLEY_TERRY = "bradley-terry"
    """One rating per policy (:mod:`parcat.eval.ratings`): for populations where strength
    is one number, as it is when a beats b and b beats c means a beats c."""
    ALPHARANK = "alpharank"
    """α-Rank's mass per policy (:mod:`parcat.eval.alpharank`): for intransitive ones (a
    beats b beats c beats a), where it shares the mass among the cycle."""
