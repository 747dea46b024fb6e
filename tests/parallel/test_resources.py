"""Measuring the machine: CPUs from affinity and cgroup quota, GPUs from the environment."""

from __future__ import annotations

from pathlib import Path

import pytest

from parcat.core.resources import available_cpus, cgroup_cpu_quota, visible_gpus


def test_cgroup_v2_and_v1_quotas(tmp_path: Path) -> None:
    (tmp_path / "cpu.max").write_text("150000 100000\n")
    assert cgroup_cpu_quota(tmp_path) == 1.5
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert cgroup_cpu_quota(tmp_path) is None
    v1 = tmp_path / "v1"
    (v1 / "cpu").mkdir(parents=True)
    (v1 / "cpu" / "cpu.cfs_quota_us").write_text("300000")
    (v1 / "cpu" / "cpu.cfs_period_us").write_text("100000")
    assert cgroup_cpu_quota(v1) == 3.0
    assert cgroup_cpu_quota(tmp_path / "absent") is None


def test_available_cpus_is_within_the_affinity_mask() -> None:
    import os

    assert 1 <= available_cpus() <= len(os.sched_getaffinity(0))


def test_visible_gpus_follows_cuda_visible_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,2,5")
    assert visible_gpus() == 3
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")
    assert visible_gpus() == 0
