"""EvalArgs: the eval/plan flags as one value, usable from Python."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from parcat.core.errors import ConfigError
from parcat.eval.eval_args import EvalArgs
from parcat.parallel.run_options import RunOptions, StartMethod


def test_build_gives_the_config_and_options_the_flags_describe(tmp_path: Path) -> None:
    options = RunOptions(jobs=2, start_method="spawn")  # type: ignore[arg-type]
    config, built = EvalArgs(("harvest",), policies=("random", "mlp,width=8@2"), episodes=2,
                             seed=3, overrides=("agents=2",), options=options,
                             trace=tmp_path / "trace.json").build()
    assert [m.name for m in config.missions] == ["harvest"]
    assert config.missions[0].params["agents"] == 2
    assert [(p.name, p.weight) for p in config.policies] == [("random", 1.0), ("mlp,width=8", 2.0)]
    assert (config.episodes, config.seed) == (2, 3)
    assert built.jobs == 2 and built.start_method is StartMethod.SPAWN and built.trace
    assert built.to_dict()["start_method"] == "spawn"


def test_python_callers_use_the_flag_words_and_get_the_flag_messages() -> None:
    with pytest.raises(ConfigError, match=re.escape("--address needs --backend ray")):
        RunOptions(address="10.0.0.1:6379")
    with pytest.raises(ConfigError, match=re.escape(
            "--start-method must be one of forkserver, spawn, got 'fork'")):
        RunOptions(start_method="fork")  # type: ignore[arg-type]
    assert RunOptions().start_method_name is None
