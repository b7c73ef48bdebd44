"""The bundled simulated prefill/decode deployment ("the embedded default").

A prefill server, a decode server and a PD router (``server.py``) plus the agent repro client
(``repro.py``) that reproduce the DeepSeek-V4 finding from DESIGN.md without a GPU or root:
tool-call corruption appears only when bf16 index-K, CUDA graph and multi-stream overlap are all
on and the decode batch is > 1, and an "ANOMALY" canary moves with index-K dtype although the
outcome does not. It exists so a new user can run a real sweep at once, and so CI can run orch
end to end against real processes.

The servers are stdlib-only and import nothing heavy from this package, so they start in well
under 0.3 s and can run under the system python3 of a test host.
"""

VERSION = "sim-0.1"
