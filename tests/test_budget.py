"""The device budget: NVML is injected at the boundary; no GPU is needed here."""

from __future__ import annotations

import json
import os
from types import SimpleNamespace
from typing import Any

import pytest
from click.testing import CliRunner

from fakplan.budget import BUDGET_ENV, DeviceBudget, DeviceMemory, PynvmlBackend, probe_budget
from fakplan.cli import main
from fakplan.errors import FakplanError

H200_TOTAL = 143_771 * 2**20  # nvidia-smi on an H200: 143771 MiB


class FakeNvml:
    def __init__(self, totals: list[int]) -> None:
        self.totals = totals

    def device_count(self) -> int:
        return len(self.totals)

    def memory(self, index: int) -> DeviceMemory:
        total = self.totals[index]
        return DeviceMemory(
            index, "NVIDIA H200", total, total - 600 * 2**20, 600 * 2**20, capability="9.0"
        )


def no_nvml() -> FakeNvml:
    raise RuntimeError("NVML Shared Library Not Found")


def test_nvml_budget_is_the_smallest_card() -> None:
    result = probe_budget(env={}, nvml=lambda: FakeNvml([H200_TOTAL, H200_TOTAL - 2**30]))
    assert result.source == "nvml"
    assert result.budget_bytes == H200_TOTAL - 2**30
    assert "2 GPU(s) (NVIDIA H200)" in result.sentence


def test_the_budget_names_the_card_in_the_table() -> None:
    """NVML's name ("NVIDIA H200", as an H200 reported it) is the card.sku to write; a
    name fakplan does not know is null, not a guess."""
    result = probe_budget(env={}, nvml=lambda: FakeNvml([H200_TOTAL]))
    assert result.to_dict()["devices"][0]["sku"] == "H200-SXM-141GB"
    unknown = DeviceMemory(0, "NVIDIA Future GPU", H200_TOTAL, H200_TOTAL, 0)
    assert unknown.sku is None


class _Pynvml:
    """pynvml's calls as PynvmlBackend makes them, for one device; ``capability`` None:
    a driver that cannot say (the call raises, as NVMLError_NotSupported does)."""

    nvmlMemory_v2 = 2

    def __init__(self, capability: tuple[int, int] | None) -> None:
        self.capability = capability

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetName(self, handle: int) -> bytes:
        return b"NVIDIA Future GPU"

    def nvmlDeviceGetMemoryInfo(self, handle: int, version: int = 1) -> Any:
        used = 600 * 2**20
        return SimpleNamespace(total=H200_TOTAL, free=H200_TOTAL - used, used=used, reserved=0)

    def nvmlDeviceGetCudaComputeCapability(self, handle: int) -> tuple[int, int]:
        if self.capability is None:
            raise RuntimeError("Not Supported")
        return self.capability


@pytest.mark.parametrize(("found", "said"), [((9, 0), "9.0"), ((12, 1), "12.1"), (None, None)])
def test_nvml_states_the_compute_capability(
    found: tuple[int, int] | None, said: str | None
) -> None:
    """nvmlDeviceGetCudaComputeCapability's (major, minor) is the card.capability to write
    for a card the table lacks; a driver that cannot say leaves it null."""
    backend = PynvmlBackend.__new__(PynvmlBackend)
    backend._nvml = _Pynvml(found)
    device = backend.memory(0)
    assert device.capability == said and device.sku is None


def test_env_override_wins_and_says_so() -> None:
    result = probe_budget(env={BUDGET_ENV: "80 GiB"}, nvml=lambda: FakeNvml([H200_TOTAL]))
    assert (result.source, result.budget_bytes) == ("env", 80 * 2**30)
    assert BUDGET_ENV in result.sentence


def test_bad_override_is_bad_input() -> None:
    with pytest.raises(FakplanError, match=BUDGET_ENV) as info:
        probe_budget(env={BUDGET_ENV: "80 gigs"})
    assert "expected a whole number of bytes such as 85899345920" in str(info.value)


@pytest.mark.parametrize("zero", ["0", "0 B", "0 GiB"])
def test_an_override_of_nothing_is_bad_input(zero: str) -> None:
    with pytest.raises(FakplanError, match="a card of 0 B holds nothing"):
        probe_budget(env={BUDGET_ENV: zero})


def test_a_plain_integer_override_is_bytes_as_the_name_says() -> None:
    """FAKPLAN_DEVICE_BUDGET_BYTES=85899345920 is 80 GiB (80 x 2**30), the same as "80 GiB"."""
    plain = probe_budget(env={BUDGET_ENV: "85899345920"}, nvml=lambda: FakeNvml([H200_TOTAL]))
    assert (plain.source, plain.budget_bytes) == ("env", 80 * 1024 * 1024 * 1024)
    assert "80.00 GiB per card" in plain.sentence
    spaced = probe_budget(env={BUDGET_ENV: " 1073741824 "})
    assert spaced.budget_bytes == 1 << 30


def test_host_fallback_names_the_reason_and_the_reserve() -> None:
    result = probe_budget(env={}, nvml=no_nvml, host_ram=lambda: 24 * 2**30)
    assert result.source == "host"
    assert result.budget_bytes == 24 * 2**30 - round(24 * 2**30 * 0.10)
    assert "NVML unavailable (RuntimeError: NVML Shared Library Not Found)" in result.sentence


class FailingMidQuery(FakeNvml):
    def memory(self, index: int) -> DeviceMemory:
        raise RuntimeError("NVMLError_GpuIsLost: GPU is lost")


def test_a_driver_error_mid_query_is_unknown_not_host_ram() -> None:
    """NVML saw a GPU, then failed: the host's RAM would be a made-up card size."""
    result = probe_budget(
        env={}, nvml=lambda: FailingMidQuery([H200_TOTAL]), host_ram=lambda: 24 * 2**30
    )
    assert (result.source, result.budget_bytes) == ("unknown", None)
    assert "NVML sees 1 GPU(s) but failed reading their memory" in result.sentence
    assert "RuntimeError: NVMLError_GpuIsLost: GPU is lost" in result.sentence
    assert BUDGET_ENV in result.sentence


def test_no_driver_falls_back_to_the_host_and_says_so() -> None:
    def no_driver() -> FakeNvml:
        raise RuntimeError("Driver Not Loaded")

    result = probe_budget(env={}, nvml=no_driver, host_ram=lambda: 24 * 2**30)
    assert result.source == "host"
    assert "NVML unavailable (RuntimeError: Driver Not Loaded)" in result.sentence


def test_unknown_when_nothing_answers() -> None:
    result = probe_budget(env={}, nvml=no_nvml, host_ram=lambda: None)
    assert result == DeviceBudget("unknown", (), None, result.sentence)
    assert result.sentence.startswith("unknown:")


def test_budget_json(runner: CliRunner, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(BUDGET_ENV, "31.86 GiB")
    result = runner.invoke(main, ["budget", "--json"])
    data = json.loads(result.output)
    assert data["schema"] == "fakplan.budget/1"
    assert data["budget_bytes"] == 34_209_414_513


@pytest.mark.skipif(
    not os.environ.get("FAKPLAN_GPU_CHECK"), reason="a GPU check, run on a device machine"
)
def test_real_nvml() -> None:
    """On a machine with an NVIDIA GPU: NVML answers with nvidia-smi's total.

    Seen on an H200 (2026-11-29): NVML total 143,771 MiB (150,754,820,096 B), used
    615 MiB at idle; CUDA's total (cudaMemGetInfo, torch) was 150,109,880,320 B —
    NVML's total minus that reservation — and that is the total vLLM multiplies
    by gpu_memory_utilization.
    """
    import subprocess

    import torch

    result = probe_budget(env={})
    assert result.source == "nvml"
    smi = subprocess.run(
        ["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits", "-i", "0"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert result.devices[0].total_bytes == int(smi.stdout.strip()) * 2**20
    _free, cuda_total = torch.cuda.mem_get_info(0)
    assert cuda_total <= result.devices[0].total_bytes
    major, minor = torch.cuda.get_device_capability(0)
    assert result.devices[0].capability == f"{major}.{minor}"


def test_budget_for_a_cpu_card_says_so(runner: CliRunner, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(BUDGET_ENV, raising=False)
    result = runner.invoke(main, ["budget", "--device", "cpu", "--json"])
    data = json.loads(result.output)
    assert data["source"] == "host" and data["devices"] == []
    assert "the card is the CPU" in data["sentence"]
    assert data["budget_bytes"] < os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def test_an_override_padded_with_a_separator_is_its_digits() -> None:
    """The fuzzer's '0\\x1f' (a unit separator, whitespace to a regex, not to int()): the
    digits decide, so it is a card of 0 B and refused in words, never a traceback."""
    with pytest.raises(FakplanError, match="a card of 0 B holds nothing"):
        probe_budget(env={BUDGET_ENV: "0\x1f"})
    assert probe_budget(env={BUDGET_ENV: "\x1f1073741824\x1f"}).budget_bytes == 1 << 30
