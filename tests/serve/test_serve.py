"""``parcat serve`` and ``-p http://...``: a real server process on loopback, real clients.

Every server is a real ``python -m parcat serve`` on port 0, stopped in ``finally``; no
assertion is on time, only on counts and results.
"""

from __future__ import annotations

import io
import json
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from parcat.cli.main import main
from parcat.core.errors import PolicyError, TransientError
from parcat.envs.missions import load_mission
from parcat.policies.remote import RemotePolicy, encode_observations, served_stateless
from tests.serve.servers import ROOT, parcat, read_url, running_server, stop

EVAL = ("eval", "-m", "harvest", "-n", "4", "--set", "max_steps=30", "-f", "json",
        "--no-progress")
RUN_TIMEOUT_S = 300.0


@pytest.fixture(scope="module")
def mlp_server() -> Any:
    """One ``parcat serve -p mlp,width=256 -m harvest`` for the tests that only use it."""
    with running_server("-p", "mlp,width=256", "-m", "harvest") as (_, url):
        yield url


def run_eval(policy: str, jobs: int, replays: Path, *flags: str) -> dict[str, Any]:
    done = subprocess.run(parcat(*EVAL, "-p", policy, "--jobs", str(jobs),
                                 "--replay-dir", str(replays), *flags),
                          cwd=ROOT, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def played(result: dict[str, Any], replays: Path) -> list[Any]:
    """What the episodes did: rewards, steps, stats per episode and every recorded action."""
    episodes = [(e["episode_index"], e["seed"], e["steps"], e["status"], e["stats"],
                 [a["reward"] for a in e["agents"]]) for e in result["episodes"]]
    actions = []
    for path in sorted(replays.glob("*.npz")):
        with np.load(path, allow_pickle=False) as npz:
            actions.append([npz[name].tobytes() for name in npz.files
                            if name.startswith("act_")])
    return [episodes, actions]


@pytest.mark.parametrize(("jobs", "flags"), [
    (1, ()), (2, ()),
    (1, ("--parallel-policy", "--policy-strategy", "batch")),  # an episode's agents: 1 request
], ids=["jobs-1", "jobs-2", "batch"])
def test_eval_through_the_server_equals_the_policy_in_process(
        mlp_server: str, jobs: int, flags: tuple[str, ...], tmp_path: Path) -> None:
    local = run_eval("mlp,width=256", jobs, tmp_path / "local", *flags)
    served = run_eval(mlp_server, jobs, tmp_path / "served", *flags)
    assert played(served, tmp_path / "served") == played(local, tmp_path / "local")
    assert len(list((tmp_path / "served").glob("*.npz"))) == 4


def test_a_stateful_policy_gets_a_session_per_client(tmp_path: Path) -> None:
    """``random`` keeps a generator: each client's instance is reset with its own seed."""
    with running_server("-p", "random", "-m", "harvest") as (_, url):
        info = httpx.get(f"{url}/info").json()
        served = run_eval(url, 2, tmp_path / "served")
    assert info["stateless"] is False
    local = run_eval("random", 2, tmp_path / "local")
    assert played(served, tmp_path / "served") == played(local, tmp_path / "local")


def test_concurrent_clients_are_batched_into_one_policy_call(mlp_server: str) -> None:
    agents = load_mission("harvest").agents()
    before = httpx.get(f"{mlp_server}/stats").json()
    errors: list[BaseException] = []

    def client(index: int) -> None:
        try:
            policy = RemotePolicy(agents[index % len(agents)], mlp_server)
            obs = np.zeros(103, np.float32)
            for _ in range(100):
                policy.step(obs)
            policy.close()
        except BaseException as exc:  # reported below, not lost in the thread
            errors.append(exc)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=RUN_TIMEOUT_S)
    assert not errors
    after = httpx.get(f"{mlp_server}/stats").json()
    observations = after["observations"] - before["observations"]
    calls = after["batches"] - before["batches"]
    assert observations == 800
    assert calls < observations  # a mean batch above 1
    assert after["max_batch"] > 1 and after["latency_p95_ms"] > 0


def npz(**arrays: Any) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def npy(array: Any) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=True)  # an object array goes as a pickle
    return buffer.getvalue()


BAD_REQUESTS = [
    ("post", "/step?agent=agent_0", b"not an npz", "body is not an .npy or .npz of stacked"),
    ("post", "/step?agent=agent_0", npy(np.array([None], dtype=object)),
     "body is not an .npy or .npz of stacked"),
    ("post", "/step?agent=agent_0", npz(**{"obs.x": np.array([None], dtype=object)}),
     "body is not an .npy or .npz of stacked"),
    ("post", "/step?agent=agent_0", npy(np.float32(1.0)), "body is not an .npy or .npz"),
    ("post", "/step?agent=agent_9", npy(np.zeros((1, 103), np.float32)),
     "unknown agent 'agent_9'; this server plays mission 'harvest', agents: agent_0"),
    ("post", "/step?agent=agent_0", npy(np.zeros((1, 7), np.float32)),
     "observations for agent 'agent_0' do not fit its observation space"),
    ("post", "/step?agent=agent_0", npz(other=np.zeros(3)),
     "an .npz body must hold arrays named 'obs.KEY'"),
    ("get", "/nowhere", b"", "404 Not Found: GET /nowhere"),
    ("get", "/step", b"", "405 Method Not Allowed: GET /step"),
]


def test_a_bad_request_gets_400_with_one_line_and_the_server_keeps_serving(
        mlp_server: str) -> None:
    with httpx.Client(base_url=mlp_server) as client:
        for method, path, body, message in BAD_REQUESTS:
            reply = client.request(method.upper(), path, content=body)
            assert reply.status_code in (400, 404, 405), path
            error = reply.json()["error"]
            assert message in error and "\n" not in error
        good = client.post("/step?agent=agent_0",
                           content=encode_observations([np.zeros(103, np.float32)]))
        assert good.status_code == 200
        assert client.get("/stats").json()["bad_requests"] >= len(BAD_REQUESTS)


@pytest.mark.parametrize(("policy", "error"), [
    ("tests.fakes:CrashingPolicy,at_step=1", "raised ValueError: policy crashed on step 2"),
    ("tests.fakes:ExitingPolicy,how=sys_exit", "raised SystemExit"),
])
def test_a_policy_that_raises_fails_its_episode_not_the_server(policy: str, error: str) -> None:
    """The server answers 500 with the policy's error (the client's episode fails) and
    keeps serving; a policy's ``sys.exit()`` is such an error, not the server's end."""
    with running_server("-p", policy, "-m", "harvest") as (proc, url):
        done = subprocess.run(parcat(*EVAL, "-p", url, "--jobs", "1"), cwd=ROOT,
                              capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
        result = json.loads(done.stdout)
        assert {e["status"] for e in result["episodes"]} == {"failed"}
        assert error in json.dumps(result["episodes"][0]["error"])
        assert proc.poll() is None
        assert httpx.get(f"{url}/info").status_code == 200


def test_a_server_on_a_unix_socket_plays_as_the_policy_in_process(tmp_path: Path) -> None:
    sock = tmp_path / "policy.sock"
    with running_server("-p", "mlp,width=64", "-m", "harvest", "--socket", str(sock)):
        served = run_eval(f"unix:{sock}", 2, tmp_path / "served")
        named = RemotePolicy(load_mission("harvest").agents()[0], f"unix:{sock}", agent="agent_1")
        try:
            assert named.agent == "agent_1" and named.stateless
        finally:
            named.close()
    local = run_eval("mlp,width=64", 2, tmp_path / "local")
    assert played(served, tmp_path / "served") == played(local, tmp_path / "local")
    done = subprocess.run(parcat(*EVAL, "-p", f"unix:{sock}"), cwd=ROOT, capture_output=True,
                          text=True, timeout=RUN_TIMEOUT_S)
    assert done.returncode == 2 and "is unreachable" in done.stderr  # the server is gone
    assert len(done.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_stops_the_server_cleanly_and_removes_its_socket(
        sig: signal.Signals, code: int, tmp_path: Path, mlp_server: str) -> None:
    sock = tmp_path / "policy.sock"
    proc = subprocess.Popen(parcat("serve", "-p", "noop", "-m", "harvest", "--port", "0",
                                   "--socket", str(sock)),
                            cwd=ROOT, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        url = read_url(proc)
        assert sock.is_socket()
        transport = httpx.HTTPTransport(uds=str(sock))
        with httpx.Client(transport=transport, base_url="http://serve") as client:
            assert client.get("/info").json()["mission"] == "harvest"
        RemotePolicy(load_mission("harvest").agents()[0], url).step(np.zeros(103, np.float32))
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=RUN_TIMEOUT_S)
    finally:
        stop(proc)
    assert proc.returncode == code
    assert not sock.exists()
    last = err.strip().splitlines()[-1]
    assert last.startswith("parcat: serve: stopped: 1 requests, 1 observations")
    assert "Traceback" not in err


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_an_unreachable_server_is_one_line_exit_2() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    done = subprocess.run(parcat(*EVAL, "-p", url), cwd=ROOT, capture_output=True, text=True,
                          timeout=RUN_TIMEOUT_S)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1
    assert done.stderr.startswith(f"parcat: error: policy server {url} is unreachable (")


def test_a_server_of_another_game_is_refused_before_the_run(mlp_server: str) -> None:
    done = subprocess.run(parcat(*EVAL, "-p", mlp_server, "--set", "view=3"), cwd=ROOT,
                          capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1
    assert "with observation space Box(" in done.stderr
    assert "serve it with the same --set values as the run" in done.stderr
    agents = load_mission("harvest", {"agents": 6}).agents()
    with pytest.raises(PolicyError, match="serves mission 'harvest' without agent 'agent_5'"):
        RemotePolicy(agents[5], mlp_server)
    with pytest.raises(PolicyError, match=r"serves mission 'harvest', not 'evade'"):
        RemotePolicy(load_mission("evade").agents()[0], mlp_server)


def test_the_url_may_name_the_agent_it_plays(mlp_server: str) -> None:
    agent = load_mission("harvest").agents()[0]
    assert RemotePolicy(agent, f"{mlp_server}/agent_3").agent == "agent_3"
    with pytest.raises(PolicyError, match="expected http://HOST:PORT"):
        RemotePolicy(agent, "http://127.0.0.1/agent_0")


def run_sim(policy: str, tmp_path: Path) -> dict[str, Any]:
    config = tmp_path / f"sim-{abs(hash(policy))}.yaml"
    config.write_text(f"environment: {{mission: evade, period: 0.01}}\n"
                      f"agents: [{{agent: evader, policy: '{policy}', cycle_time: 0.02}}]\n"
                      "default_policy: greedy\niters: 60\nseed: 0\noutput: null\n")
    done = subprocess.run(parcat("sim", "-c", str(config), "--mode", "sequential", "-f", "json",
                                 "--no-progress"),
                          cwd=ROOT, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_sim_plays_a_served_policy_as_the_one_in_process(tmp_path: Path) -> None:
    """A stateful heuristic served to ``parcat sim``: the same simulation, step for step."""
    with running_server("-p", "greedy", "-m", "evade") as (_, url):
        served = run_sim(url, tmp_path)
    local = run_sim("greedy", tmp_path)
    assert served["steps"] == local["steps"] == 60
    assert served["mission_metrics"] == local["mission_metrics"]
    def cycles(summary: dict[str, Any]) -> list[Any]:
        return [(a["agent"], a["cycles"], a["default_steps"]) for a in summary["agents"]]

    assert cycles(served) == cycles(local)


def serve_once(*args: str) -> subprocess.CompletedProcess[str]:
    """``parcat serve ARGS`` expected to refuse to start."""
    return subprocess.run(parcat("serve", "-p", "noop", "-m", "harvest", "--port", "0", *args),
                          cwd=ROOT, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)


def test_a_socket_path_is_taken_over_only_from_a_dead_server(tmp_path: Path) -> None:
    stale = tmp_path / "stale.sock"
    with socket.socket(socket.AF_UNIX) as dead:  # bound, then gone without unlinking
        dead.bind(str(stale))
    with running_server("-p", "noop", "-m", "harvest", "--socket", str(stale)):
        transport = httpx.HTTPTransport(uds=str(stale))
        with httpx.Client(transport=transport, base_url="http://serve") as client:
            assert client.get("/info").status_code == 200
        live = serve_once("--socket", str(stale))
        assert live.returncode == 2
        assert live.stderr == (f"parcat: error: --socket {stale}: another server listens on "
                               "it; give another path\n")
        assert stale.is_socket()  # the live server's, left alone
    other = tmp_path / "notes.txt"
    other.write_text("keep me")
    refused = serve_once("--socket", str(other))
    assert refused.returncode == 2
    assert refused.stderr == (f"parcat: error: --socket {other}: exists and is not a socket; "
                              "give a new path\n")
    assert other.read_text() == "keep me"


def test_a_port_in_use_is_one_line_exit_2(mlp_server: str) -> None:
    port = mlp_server.rsplit(":", 1)[1]
    done = serve_once("--port", port)
    assert done.returncode == 2
    assert done.stderr.startswith(f"parcat: error: cannot listen on http://127.0.0.1:{port}")
    assert done.stderr.count("\n") == 1


def test_a_server_lost_mid_run_is_a_transient_error() -> None:
    agent = load_mission("harvest").agents()[0]
    with running_server("-p", "noop", "-m", "harvest") as (proc, url):
        policy = RemotePolicy(agent, url)
        assert policy.step(np.zeros(103, np.float32)) == 0
        proc.kill()
        proc.wait()
        with pytest.raises(TransientError, match=f"policy server {url}: "):
            policy.step(np.zeros(103, np.float32))
    policy.close()


def test_a_hung_policy_neither_blocks_the_server_nor_its_sigterm(tmp_path: Path) -> None:
    """The policy runs on its own thread: /stats answers while it hangs, and SIGTERM stops
    the server (its requests in flight get a short grace, then the connection closes)."""
    marker = tmp_path / "hanging"
    agent = load_mission("harvest").agents()[0]
    with running_server("-p", f"tests.fakes:HangingPolicy,at_step=0,marker={marker}",
                        "-m", "harvest") as (proc, url):
        policy = RemotePolicy(agent, url)
        policy.reset(0)
        outcome: list[BaseException] = []

        def step() -> None:
            try:
                policy.step(np.zeros(103, np.float32))
            except BaseException as exc:  # the connection closes when the server stops
                outcome.append(exc)

        stepping = threading.Thread(target=step, daemon=True)
        stepping.start()
        wait_for(marker.exists)
        assert httpx.get(f"{url}/stats", timeout=RUN_TIMEOUT_S).json()["requests"] == 0
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=RUN_TIMEOUT_S)
        stepping.join(timeout=RUN_TIMEOUT_S)
    assert proc.returncode == 143
    assert err.strip().splitlines()[-1].startswith("parcat: serve: stopped: no requests served")
    assert [type(e) for e in outcome] == [TransientError]
    policy.close()


def wait_for(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.05)


GOALS = ("--set", "agents=2", "--set", "max_steps=10", "--set", "goal_radius=0.5")


def test_a_run_directory_is_served_with_its_mission_and_each_agents_weights(
        tmp_path: Path) -> None:
    run = tmp_path / "run"
    trained = subprocess.run(
        parcat("train", "-m", "goal_tasks", *GOALS, "--epochs", "1", "--steps-per-epoch", "8",
               "--env-workers", "0", "--gradient-steps", "2", "--eval-episodes", "1",
               "--run-dir", str(run), "--no-progress"),
        cwd=ROOT, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    assert trained.returncode == 0, trained.stderr

    def evaluate(*args: str) -> list[Any]:
        done = subprocess.run(parcat("eval", "-n", "3", "-f", "json", "--jobs", "1", *args),
                              cwd=ROOT, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
        assert done.returncode == 0, done.stderr
        return [[a["reward"] for a in e["agents"]] for e in json.loads(done.stdout)["episodes"]]

    with running_server("-p", str(run)) as (_, url):  # no -m: the run's mission
        served = evaluate("-m", "goal_tasks", *GOALS, "-p", url)
    assert served == evaluate("-p", str(run))


@pytest.mark.parametrize(("args", "line"), [
    (["-m", "harvest"], "give the policy to serve with -p SPEC, e.g. parcat serve -p "
     "mlp,width=256 -m harvest"),
    (["-p", "mlpp", "-m", "harvest"], "policy 'mlpp' is not a built-in, a module:Class or a "
     "checkpoint directory (did you mean 'mlp'?)"),
    (["-p", "mlp"], "give a mission with -m NAME, or a run directory with -p RUN"),
    (["-p", "mlp", "-m", "harvest", "--host", "256.1.1.1"],
     "cannot listen on http://256.1.1.1:0: "),
])
def test_bad_input_to_serve_is_one_line_exit_2(args: list[str], line: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"parcat: error: {line}") and err.count("\n") == 1


def test_a_served_stateless_policy_is_played_in_lockstep_one_request_a_round() -> None:
    """The client is parcat's own: a plan for ``-p http://...`` plays the lane's episodes in
    lockstep, so a round's observations of every episode go to the server in one request."""
    with running_server("-p", "mlp,width=32", "-m", "harvest", "--set", "max_steps=6") as (
            _, url):
        done = subprocess.run(parcat("plan", "-m", "harvest", "--set", "max_steps=6", "-n", "8",
                                     "-p", url, "-f", "json"),
                              cwd=ROOT, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
        assert done.returncode == 0, done.stderr
        plan = json.loads(done.stdout)
        assert plan["lockstep"] > 1 and plan["strategy"] == "inline"


class BlasThreadsPolicy:
    """Answers with the number of BLAS threads its calls run with (at most 4)."""

    stateless = True

    def __init__(self, spec: Any) -> None:
        self.n = int(spec.action_space.n)

    def reset(self, seed: int) -> None:
        """Nothing to reset."""

    def step(self, obs: Any) -> int:
        return self.step_batch([obs])[0]

    def step_batch(self, obs_batch: list[Any]) -> list[int]:
        from threadpoolctl import threadpool_info

        threads = max(p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas")
        return [min(threads, self.n - 1)] * len(obs_batch)


def test_the_served_policy_runs_with_one_blas_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """A second BLAS thread spinning after every small batch cost the server 17x the CPU
    (6.6 s against 0.38 s for eval -n 16 of mlp,width=256): its calls get one, whatever
    the environment asks for."""
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "2")
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    with running_server("-p", "tests.serve.test_serve:BlasThreadsPolicy",
                        "-m", "harvest") as (_, url):
        policy = RemotePolicy(load_mission("harvest").agents()[0], url)
        try:
            assert policy.step(np.zeros(103, np.float32)) == 1
        finally:
            policy.close()


def test_a_served_policy_plays_in_this_process_not_in_a_worker(mlp_server: str) -> None:
    """The served code runs in the server's process, so the client needs no isolation: no
    fork server, no worker (they cost about as much CPU as the run's own stepping)."""
    done = subprocess.run(parcat("plan", "-m", "harvest", "-n", "16", "-p", mlp_server,
                                 "--jobs", "1", "-f", "json"),
                          cwd=ROOT, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    assert (plan["executor"], plan["lockstep"]) == ("inline", 16)
    assert "outside parcat" not in done.stdout + done.stderr


def test_the_default_plan_holds_a_stateless_servers_episodes_in_one_lane(
        mlp_server: str) -> None:
    """Each lane's step is one request whatever its rows: with a stateless server, more
    lanes would only split the batches (and one that joins late plays after this one); a
    stateful server's calls go one agent at a time, so its lanes keep running side by side."""
    assert served_stateless(mlp_server) is True
    assert served_stateless("http://127.0.0.1:9") is False  # nothing listens: not known

    def plan(url: str) -> dict[str, Any]:
        done = subprocess.run(parcat("plan", "-m", "harvest", "-n", "16", "-p", url, "-f",
                                     "json"), cwd=ROOT, capture_output=True, text=True,
                              timeout=RUN_TIMEOUT_S)
        assert done.returncode == 0, done.stderr
        return dict(json.loads(done.stdout))

    assert (plan(mlp_server)["episode_workers"], plan(mlp_server)["lockstep"]) == (1, 16)
    with running_server("-p", "random", "-m", "harvest") as (_, url):
        assert served_stateless(url) is False
        stateful = plan(url)
        assert stateful["episode_workers"] == min(stateful["cpus_available"], 16)
