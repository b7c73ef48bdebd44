"""PURE: a host's static GPU facts (model, driver, CUDA version) from one nvidia-smi command.

Provenance, not telemetry (core.gpustat reads power and clocks per trial): asked once per host
per run. The edge runs COMMAND; a host without nvidia-smi prints NO_NVIDIA_SMI, and the report
says "not available" rather than leaving the reader to guess whether anyone looked.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

NOT_AVAILABLE = "not available"
NO_NVIDIA_SMI = "--no-nvidia-smi--"
BANNER = "--banner--"
COMMAND = (
    "if command -v nvidia-smi >/dev/null 2>&1; then "
    "nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -n 64; "
    f"echo {BANNER}; nvidia-smi 2>&1 | head -n 6; "
    f"else echo {NO_NVIDIA_SMI}; fi"
)
_CUDA = re.compile(r"CUDA Version:\s*([0-9][0-9.]*)")
_DRIVER = re.compile(r"Driver Version:\s*([0-9][0-9.]*)")
_LIMIT = 200  # characters per field


@dataclass(frozen=True)
class GpuInfo:
    """What the host's GPUs are; every field reads "not available" on a host without nvidia-smi
    (or when nvidia-smi fails: no driver loaded)."""

    model: str = NOT_AVAILABLE  # "2 x NVIDIA H100 80GB HBM3" (models counted, in first-seen order)
    driver: str = NOT_AVAILABLE
    cuda: str = NOT_AVAILABLE

    def lines(self) -> dict[str, str]:
        return dict(zip(FIELDS, (self.model, self.driver, self.cuda), strict=True))

    @property
    def known(self) -> bool:
        """Whether nvidia-smi told anything: a field other than "not available"."""
        return any(v != NOT_AVAILABLE for v in (self.model, self.driver, self.cuda))

    def in_words(self) -> str:
        """'2 x NVIDIA H100 80GB HBM3, driver 550.54.15, CUDA 12.4': what a comparison quotes."""
        return f"{self.model}, driver {self.driver}, CUDA {self.cuda}"


FIELDS = ("gpu_model", "gpu_driver", "cuda")  # GpuInfo.lines()' keys in a run.json host line


def of_host(described: Mapping[str, str] | None) -> GpuInfo | None:
    """The GPU facts a run.json host line holds (edges.provenance.describe_host wrote them), or None
    where it holds none: a run.json of an older orch, or a run ended before its servers answered."""
    if not described or not any(k in described for k in FIELDS):
        return None
    return GpuInfo(*(described.get(k, NOT_AVAILABLE) for k in FIELDS))


def parse(output: str) -> GpuInfo:
    """GpuInfo from COMMAND's output (the CSV rows, the banner line, the header of nvidia-smi)."""
    if NO_NVIDIA_SMI in output or not output.strip():
        return GpuInfo()
    rows, _, banner = output.partition(BANNER)
    models: dict[str, int] = {}
    drivers: list[str] = []
    for line in rows.splitlines():
        name, sep, driver = line.rpartition(",")
        if not sep or not re.fullmatch(r"\s*[0-9][0-9.]*\s*", driver):
            continue  # an error line ("NVIDIA-SMI has failed ...") is not a GPU
        models[name.strip()[:_LIMIT]] = models.get(name.strip()[:_LIMIT], 0) + 1
        drivers.append(driver.strip())
    model = ", ".join(f"{n} x {m}" if n > 1 else m for m, n in models.items()) or NOT_AVAILABLE
    driver_match = _DRIVER.search(banner)
    driver = drivers[0] if drivers else (driver_match.group(1) if driver_match else NOT_AVAILABLE)
    cuda = _CUDA.search(banner)
    return GpuInfo(model[:_LIMIT], driver[:_LIMIT], cuda.group(1) if cuda else NOT_AVAILABLE)
