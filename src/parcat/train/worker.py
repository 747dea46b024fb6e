"""The environment worker process: an EnvSlice serving step and reset requests."""

from __future__ import annotations

import contextlib
import sys
import traceback
from multiprocessing.connection import Connection
from typing import Any

from parcat.missions import Mission
from parcat.parallel.handoff import Serving
from parcat.parallel.procs import become_worker
from parcat.parallel.resources import limit_blas_threads
from parcat.parallel.shm import ArrayBlock

CMD, EPOCH = 5, 6
"""Header slots (after the handoff's own) holding the command and the epoch."""
STEP, RESET = 1, 2


def env_worker_main(
    conn: Connection,
    parent_pid: int,
    mission: Mission,
    first: int,
    count: int,
    seed: int,
    specs: Any,
    block_name: str,
    spin: bool,
) -> None:
    """Step ``count`` environments on request until told to close or the parent is gone."""
    from parcat.train.envslice import EnvSlice

    become_worker(parent_pid)
    limit_blas_threads(1)
    block = ArrayBlock(specs, name=block_name)
    envs = None
    try:
        envs = EnvSlice(mission, first, count, seed, block.arrays)
        serving = Serving(block.header, conn, spin)  # before "ready": no request is missed
        conn.send(("ready",))
        while True:
            if not serving.wait_request():
                if conn.recv()[0] == "close":
                    break
                continue
            request = serving.take()
            try:
                if block.header[CMD] == RESET:
                    envs.reset_all(int(block.header[EPOCH]))
                else:
                    envs.step()
            except Exception as exc:
                formatted = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
                serving.finish(request, (None, type(exc).__name__, str(exc), formatted))
                continue
            serving.finish(request)
    except (EOFError, OSError, SystemExit):
        pass
    except Exception as exc:  # could not even build the environments
        with contextlib.suppress(OSError):
            conn.send(("setup_error", None, type(exc).__name__, str(exc)))
    finally:
        if envs is not None:
            envs.close()
        block.close()
        with contextlib.suppress(OSError):
            conn.close()
    sys.exit(0)
