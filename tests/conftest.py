"""Test configuration: hypothesis profile sized for a 2-core CI machine, and leak checks."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from hypothesis import HealthCheck, settings

from parcat.core.resources import FREE_CPUS_VARIABLE
from parcat.ipc.shm_names import block_creator, block_is_stale, this_creator

settings.register_profile(
    "ci", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("ci")

# CI machines are shared: plans that follow the machine's momentary load would make tests
# that check a plan depend on the neighbours. Tests of that behaviour set it themselves.
os.environ.setdefault(FREE_CPUS_VARIABLE, "all")


def parcat_blocks() -> set[str]:
    """parcat blocks made by this process tree or by processes now gone (leaks); other
    programs' blocks (a benchmark running beside the tests, a run in a container sharing
    /dev/shm) do not count."""
    folder = Path("/dev/shm")
    if not folder.is_dir():
        return set()
    me = psutil.Process()
    tree = {me.pid, *(p.pid for p in me.children(recursive=True))}
    namespace = this_creator().namespace
    found = set()
    for path in folder.iterdir():
        creator = block_creator(path.name)
        if creator is not None and creator.namespace == namespace \
                and (creator.pid in tree or block_is_stale(path.name)):
            found.add(path.name)
    return found


def worker_children() -> list[psutil.Process]:
    """Live descendants of this process, without the fork server and resource tracker
    (they outlive runs by design)."""
    found = []
    for proc in psutil.Process().children(recursive=True):
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            cmdline = " ".join(proc.cmdline())
        except psutil.NoSuchProcess:
            continue
        if "forkserver" not in cmdline and "resource_tracker" not in cmdline:
            found.append(proc)
    return found


@pytest.fixture
def clean_machine() -> Iterator[None]:
    """Fail the test if it leaves shared-memory blocks or worker processes behind."""
    before_shm = parcat_blocks()
    before_kids = {p.pid for p in worker_children()}
    yield

    def leftovers() -> tuple[set[str], list[psutil.Process]]:
        kids = [p for p in worker_children() if p.pid not in before_kids]
        return parcat_blocks() - before_shm, kids

    deadline = time.monotonic() + 10  # stopping workers may still be on their way out
    while any(leftovers()) and time.monotonic() < deadline:
        time.sleep(0.05)
    shm, kids = leftovers()
    assert not shm, f"shared memory leaked: {shm}"
    assert not kids, f"orphan processes: {kids}"


@pytest.fixture(autouse=True)
def signal_mask_as_found() -> Iterator[None]:
    """Fail a test that leaves this process's signal mask changed: a library call that
    returns (or is interrupted) with Ctrl-C blocked would leave the user's program, and
    every process it starts later, deaf to Ctrl-C."""
    before = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    yield
    after = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    if after != before:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)  # the next tests start as found
        pytest.fail(f"the signal mask was left changed: {sorted(before)} -> {sorted(after)}")
