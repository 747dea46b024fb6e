"""Ray vs local on this machine: cluster start-up and per-episode overhead.

    python benchmarks/ray_vs_local.py [--episodes 200] [--repeats 3]

Tiny episodes (ScriptedEnv, 1 step) make the run time all overhead; the same tasks go
through the local process executor (2 workers) and the Ray executor (2 tasks in flight on
a 2-CPU local cluster). Start-up: `ray.init` of a local cluster, and the first result.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.fakes import scripted_mission

from parcat.eval.evaluate import EvalConfig, make_tasks
from parcat.parallel.process_executor import ProcessExecutor
from parcat.parallel.ray_executor import RayExecutor, import_ray
from parcat.policies.specs import parse_policy_spec


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    ray = import_ray()
    mission = scripted_mission(max_steps=1, agents=2)
    config = EvalConfig((mission,), (parse_policy_spec("random"),), episodes=args.episodes)
    tasks = make_tasks(config)

    start = time.perf_counter()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False,
             runtime_env={"env_vars": {"PYTHONPATH": ":".join(sys.path)}})
    init_s = time.perf_counter() - start
    ray_exec = RayExecutor(2)
    start = time.perf_counter()
    ray_exec.run(tasks[:1])
    first_ray_s = time.perf_counter() - start
    local = ProcessExecutor(2)
    start = time.perf_counter()
    local.run(tasks[:1])
    first_local_s = time.perf_counter() - start

    per_task: dict[str, list[float]] = {"local process executor": [], "ray executor": []}
    for _ in range(args.repeats):
        for name, executor in (("local process executor", local), ("ray executor", ray_exec)):
            start = time.perf_counter()
            results = executor.run(tasks)
            elapsed = time.perf_counter() - start
            assert len(results) == len(tasks) and all(r.ok for r in results)
            per_task[name].append(elapsed / len(tasks) * 1e3)
    local.close()
    ray.shutdown()
    print(f"{len(tasks)} one-step episodes, 2 workers / 2 tasks in flight, "
          f"{args.repeats} interleaved repeats (median)")
    print(f"  ray.init, local 2-CPU cluster        {init_s * 1e3:10.0f} ms")
    print(f"  first result: ray executor           {first_ray_s * 1e3:10.0f} ms")
    print(f"  first result: local process executor {first_local_s * 1e3:10.0f} ms "
          "(fork server start included)")
    for name, values in per_task.items():
        print(f"  per episode: {name:24s} {statistics.median(values):8.3f} ms")
    ratio = statistics.median(per_task["ray executor"]) / statistics.median(
        per_task["local process executor"])
    print(f"  ray / local per-episode overhead     {ratio:10.1f} x")


if __name__ == "__main__":
    main()
