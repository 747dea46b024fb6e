"""Real-time simulation: the environment and every agent in its own process, or the
sequential twin in simulated time (``parcat sim``).

```python
from parcat.sim import load_sim_config, run_sim, summarize

record = run_sim(load_sim_config("configs/sim.yaml"), mode="sequential")
print(summarize(record)["agents"])
```
"""

from __future__ import annotations

from parcat.sim.config import AgentConfig, DebugConfig, SimConfig, load_sim_config, parse_sim_config
from parcat.sim.metrics import summarize
from parcat.sim.progress import SimProgress
from parcat.sim.record import SimRecord
from parcat.sim.run import SimMode, run_sim

__all__ = ["AgentConfig", "DebugConfig", "SimConfig", "SimMode", "SimProgress", "SimRecord",
           "load_sim_config", "parse_sim_config", "run_sim", "summarize"]
