"""GPU telemetry's "no nvidia-smi" path on a real SSH + systemd host (the testbed has no GPU):
the probe says no, a reading is recorded as missing with the reason (never an exception that
would void a trial), and the kernel-log XID count the query appends works on a real journal."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from testbed.fixture import Testbed
from testbed.helpers import transport

from orchestrator.core import gpustat
from orchestrator.edges.metrics import _has_nvidia_smi, _read_gpu

pytestmark = pytest.mark.testbed


def test_a_host_without_nvidia_smi_is_told_apart_and_its_reading_is_missing(testbed: Testbed) -> None:
    t = transport(testbed, "decode")
    try:
        handle = SimpleNamespace(transport=t, host=SimpleNamespace(label="decode"))
        assert _has_nvidia_smi(handle) is False  # type: ignore[arg-type]
        got = _read_gpu(handle)  # type: ignore[arg-type]
        assert isinstance(got, str) and got.startswith("decode: nvidia-smi: no GPU rows"), got
        out = t.run(gpustat.QUERY_COMMAND, check=False).stdout  # the XID part still ran
        assert out.split(gpustat.XID_MARK)[1].strip() == "0"
    finally:
        t.close()
