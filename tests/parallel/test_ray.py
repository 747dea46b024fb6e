"""The Ray backend on a real local Ray cluster (2 CPUs): same results, retries, cancels."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from parcat.envs.missions import Mission
from parcat.episode.results import EpisodeStatus
from parcat.eval.evaluate import EvalConfig, evaluate, make_config
from parcat.eval.report import strip_timings
from parcat.parallel.planner import ExecutorKind
from parcat.parallel.run_options import RunOptions
from parcat.policies.specs import parse_policy_spec
from tests.fakes import dying_mission, scripted_mission
from tests.raytemp import ray_processes, shutdown_and_clean

ray = pytest.importorskip("ray")
RAY = RunOptions(jobs=2, executor=ExecutorKind.RAY, retries=1)
RANDOM = (parse_policy_spec("random"),)
ROOT = Path(__file__).parents[2]
CHECKOUT = os.pathsep.join([str(ROOT / "src"), str(ROOT)])
"""The workers' import path: this checkout's parcat and tests, not an installed parcat."""




@pytest.fixture(scope="module", autouse=True)
def cluster() -> Iterator[None]:
    temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, _temp_dir=temp,
             configure_logging=False,
             runtime_env={"env_vars": {"PYTHONPATH": CHECKOUT}})
    yield
    stuck = shutdown_and_clean(ray, temp)
    if stuck:
        pytest.fail(f"Ray process left behind: {stuck[0]}")


def test_ray_results_equal_local() -> None:
    config = make_config(["harvest", "evade"], ["greedy", "random", "tests.fakes:StatefulPolicy",
                                                "mlp,width=32"],
                         episodes=3, seed=4, overrides={"max_steps": 30})
    local = evaluate(config, RunOptions(jobs=1))  # in lockstep: mlp shares its calls
    assert local.plan is not None and local.plan.lockstep == 6
    remote = evaluate(config, RAY)
    assert remote.status == "complete"
    assert strip_timings(remote.to_document()) == strip_timings(local.to_document())


def test_ray_tasks_close_every_policy_they_build_once(tmp_path: Path) -> None:
    """As the local executors do: Ray ends its workers without their exit hooks, so each
    task closes what it built (sync and async ``close``)."""
    from tests.policies.test_close import counts

    log = tmp_path / "log"
    config = make_config(["harvest"], [f"tests.policies.test_close:LoggedPolicy,log={log}",
                                       f"tests.policies.test_close:AsyncLoggedPolicy,log={log}"],
                         episodes=4, seed=1, overrides={"max_steps": 5})
    report = evaluate(config, RAY)
    assert report.status == "complete"
    built, closed = counts(log)
    assert built and built == closed


def test_killed_ray_worker_is_retried_and_reproduces_the_episode(tmp_path: Path) -> None:
    marker = tmp_path / "died"
    dying = dying_mission(how="sigkill", marker=str(marker))
    healthy = Mission(**{**dying.__dict__, "params": {**dying.params, "at_step": 10**6}})
    report = evaluate(EvalConfig((dying,), RANDOM, episodes=3), RAY)
    assert marker.exists()
    assert report.status == "complete", [e.error for e in report.failed]
    reference = evaluate(EvalConfig((healthy,), RANDOM, episodes=3), RunOptions(jobs=1))
    assert strip_timings(report.to_document())["episodes"] == \
        strip_timings(reference.to_document())["episodes"]


def test_hung_episode_is_cancelled() -> None:
    hung = dying_mission("hung", how="hang", at_step=2)
    options = RunOptions(jobs=2, executor=ExecutorKind.RAY, episode_timeout_s=2.0)
    report = evaluate(EvalConfig((hung, scripted_mission("ok")), RANDOM, episodes=1), options)
    # the hang is an hour long: a result at all means the task was cancelled
    assert [e.status for e in report.episodes] == [EpisodeStatus.TIMEOUT, EpisodeStatus.OK]


def test_train_env_workers_as_ray_actors_equal_local(tmp_path: Path) -> None:
    from parcat.train.config import TrainConfig
    from parcat.train.trainer import Trainer
    from tests.train.test_trainer import assert_same, saved_arrays

    def cfg(run: Path, **changes: object) -> TrainConfig:
        base = TrainConfig(mission="goal_tasks", overrides={"agents": 2, "max_steps": 10},
                           epochs=2, steps_per_epoch=10, env_workers=0, envs_per_worker=4,
                           gradient_steps=5, learner={"width": 8, "depth": 1,
                                                   "learning_starts": 16, "batch_size": 8},
                           seed=3, checkpoint_every=2, run_dir=str(run))
        return TrainConfig(**{**base.__dict__, **changes})  # type: ignore[arg-type]

    Trainer(cfg(tmp_path / "local")).run()
    Trainer(cfg(tmp_path / "ray", backend="ray", env_workers=2, envs_per_worker=2)).run()
    assert_same(saved_arrays(tmp_path / "local"), saved_arrays(tmp_path / "ray"))


def eval_on_ray(address: str | None, code: int, **env: str) -> list[str]:
    """stderr's lines of ``parcat eval --backend ray --address ADDRESS`` (``None``: no
    ``--address``; ``env``: more environment), which must exit ``code``."""
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "parcat", "eval", "-m", "harvest", "-n", "1", "--backend", "ray",
         *(["--address", address] if address else [])],
        capture_output=True, text=True, timeout=300, env={**os.environ, **env},
    )
    assert proc.returncode == code, proc.stderr
    return proc.stderr.strip().splitlines()


def refused_address(address: str) -> list[str]:
    """stderr's lines of ``parcat eval --backend ray --address ADDRESS``, which must exit 2."""
    return eval_on_ray(address, 2)


def test_ray_address_is_named_as_such_and_local_starts_a_cluster_here() -> None:
    assert eval_on_ray(None, 2, RAY_ADDRESS="no-port") == [
        "parcat: error: RAY_ADDRESS must be HOST:PORT (as `ray start --head` prints it), got "
        "'no-port'"]
    temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # short: Ray's sockets live there
    try:
        eval_on_ray(None, 0, RAY_ADDRESS="local", RAY_TMPDIR=temp)  # Ray's documented value
    finally:  # the CLI shuts its cluster down: what is left after 30 s is a failure
        _, alive = psutil.wait_procs(ray_processes(temp), timeout=30)
        for proc in alive:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        shutil.rmtree(temp, ignore_errors=True)
    assert not alive, alive


@pytest.mark.parametrize("address", ["127.0.0.1:1", "no-such-host.invalid:6379"])
def test_a_wrong_address_fails_at_once_with_one_line(address: str) -> None:
    lines = refused_address(address)
    assert len(lines) == 1 and lines[0].startswith(f"parcat: error: --address {address}: "
                                                   "no Ray cluster reachable there")


@pytest.fixture
def not_ray(request: pytest.FixtureRequest) -> Iterator[str]:
    """The address of a listener on loopback that is no Ray cluster: an HTTP server, or a
    socket that accepts connections (the kernel does) and never says anything."""
    import http.server
    import socket
    import threading

    if request.param == "http":
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                                 http.server.SimpleHTTPRequestHandler)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield f"127.0.0.1:{server.server_address[1]}"
        finally:
            server.shutdown()
            server.server_close()
        return
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    try:
        yield f"127.0.0.1:{silent.getsockname()[1]}"
    finally:
        silent.close()


@pytest.mark.parametrize(("not_ray", "why"), [("http", "it is not a Ray cluster"),
                                              ("silent", "no answer")], indirect=["not_ray"])
def test_an_address_where_ray_does_not_answer_is_one_line_in_seconds(not_ray: str,
                                                                      why: str) -> None:
    lines = refused_address(not_ray)
    assert len(lines) == 1 and lines[0].startswith(f"parcat: error: --address {not_ray}: "), lines
    assert why in lines[0]


def test_the_address_check_knows_a_real_ray_cluster() -> None:
    from parcat.core.raycluster import check_reachable

    check_reachable(ray.get_runtime_context().gcs_address)  # no error


def test_sigterm_writes_the_results_so_far_and_exits_143(tmp_path: Path) -> None:
    import json
    import signal
    import subprocess
    import sys

    from tests.reliability.helpers import episodes_journaled, kill_group, wait_until

    out = tmp_path / "results.json"
    env = {**os.environ, "PYTHONPATH": CHECKOUT}
    proc = subprocess.Popen(
        [sys.executable, "-m", "parcat", "eval", "-m", "harvest", "-n", "100000",
         "--backend", "ray", "-o", str(out)],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True)
    try:
        assert wait_until(lambda: episodes_journaled(out) >= 2, 300), "no episode finished"
        os.kill(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 143, err
        assert "Traceback" not in err and "Stack" not in err, err
        document = json.loads(out.read_text())
        assert document["status"] == "interrupted" and len(document["episodes"]) >= 2
    finally:
        kill_group(proc)
