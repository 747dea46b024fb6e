"""Reading a ``parcat eval --cross -o`` file back, for ``parcat rank FILE``: the file is
data, so every key it needs is checked and a damaged one is one ``ConfigError``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from parcat.core.errors import ConfigError
from parcat.eval.rating_model import RatingModel
from parcat.eval.results_file import read_episode, read_results
from parcat.eval.tournament import CrossResult, CrossTable

REDO = "; run `parcat eval --cross -o FILE.json` again"


def load_cross(path: Path, seed: int | None = None,
               rating: RatingModel = RatingModel.BRADLEY_TERRY) -> CrossResult:
    """The cross-play results in a ``parcat eval --cross -o`` file, rated again (by
    ``rating``) with ``seed`` (default: the file's bootstrap seed); ``ConfigError`` naming
    what is wrong."""
    document = read_results(path, "rank", "parcat.cross/1", "a `parcat eval --cross` file")
    where = f"rank: '{path}'"
    tables = _list(document, "cross", where)
    found = [_table(t, f"{where}: cross[{i}]") for i, t in enumerate(tables)]
    if not found or any(t.policies != found[0].policies for t in found):
        raise ConfigError(f"{where}: \"cross\" holds no tables or tables of different "
                          f"policies{REDO}")
    episodes = [read_episode(data, f"{where}: episode {index}", REDO)
                for index, data in enumerate(_list(document, "episodes", where))]
    if seed is None:
        model = document.get("ratings_model")
        saved = model.get("bootstrap", {}).get("seed") if isinstance(model, dict) else None
        seed = saved if isinstance(saved, int) and not isinstance(saved, bool) else 0
    return CrossResult(found, episodes, seed=max(seed, 0), rating=rating).rated()


def _table(data: Any, where: str) -> CrossTable:
    """One ``cross`` table's seats and policies (its cells are not needed to rate)."""
    if not isinstance(data, dict) or not isinstance(data.get("mission"), str):
        raise ConfigError(f"{where} has no \"mission\" name{REDO}")
    keys = ("row_agents", "col_agents", "policies")
    lists = [_list(data, key, where) for key in keys]
    for key, values in zip(keys, lists, strict=True):
        if not values or not all(isinstance(v, str) for v in values):
            raise ConfigError(f"{where}: \"{key}\" is not a list of names{REDO}")
    return CrossTable(data["mission"], lists[0], lists[1], lists[2], [])


def _list(data: dict[str, Any], key: str, where: str) -> list[Any]:
    value = data.get(key)
    if not isinstance(value, list):
        raise ConfigError(f"{where}: \"{key}\" is not a list{REDO}")
    return value
