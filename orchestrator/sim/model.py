"""What the simulated servers do with a request: corruption, latency, anomalies (PURE).

Calibrated on the DeepSeek-V4 finding in DESIGN.md section 1:

* corruption needs bf16 index-K AND CUDA graph AND multi-stream overlap AND a decode batch > 1;
  per request q = 0.057, so a 3-round session is corrupted with p = 1 - (1 - q)^3 ~ 0.16
  (the observed 15-18 %); otherwise a background q = 0.0017 (~0.5 % of sessions);
* overlap only acts inside captured CUDA graphs, so with CUDA graph off it changes nothing;
* the "ANOMALY" canary fires ~2.7 times per request with bf16 index-K and ~8.3 with fp8
  (320 vs 997 over 120 requests), independently of corruption: a metric that moves while the
  outcome does not;
* decode latency 15-40 ms per request: faster with CUDA graph on (a little faster still with
  overlap, which only acts inside the graph), slower when the batch is larger than
  --cuda-graph-max-bs (those batches run eagerly, as in SGLang).

Simplification: corruption depends on the CUDA-graph *flag*, not on whether a given batch was
replayed from a graph, so the finding shows at the default --cuda-graph-max-bs under 40
sessions just as it did in production.

Randomness is drawn from a generator seeded by (SIM_SEED, role, request identity), never from
thread timing, so a run with the same seeds gives the same outcomes.
"""

from __future__ import annotations

import math
import random
from typing import Literal

from orchestrator.sim.culprits import request_rate
from orchestrator.sim.flags import SimConfig

Q_BUG = 0.057
Q_BACKGROUND = 0.0017
NO_TOOL_SHARE = 0.2  # corrupted requests that answer in plain text instead of a leaky call
ANOMALY_MEAN_BF16 = 2.7
ANOMALY_MEAN_FP8 = 8.3

GRAPHED_BASE_MS = 15.0
EAGER_BASE_MS = 28.0
OVERLAP_SPEEDUP = 0.85  # overlap hides some communication, but only inside a captured graph
BATCH_SLOPE = 1 / 80  # each extra request in the batch adds 1.25 % to the step time

Outcome = Literal["ok", "leak", "no_tool"]


def bug_active(cfg: SimConfig, batch: int) -> bool:
    """The DSV4 interaction: all three flags on and more than one request being decoded."""
    return cfg.bf16_index_k and cfg.cuda_graph and cfg.multi_stream_overlap and batch > 1


def corruption_probability(cfg: SimConfig, batch: int) -> float:
    return Q_BUG if bug_active(cfg, batch) else Q_BACKGROUND


def culprit_probability(cfg: SimConfig, session: str, rounds: int) -> float:
    """Per-request rate under the configurable flag model. The trial's rate is drawn once per
    trial: the repro names sessions `r<seed>-<i>`, so the part before '-' is the trial."""
    assert cfg.culprits is not None
    trial = session.partition("-")[0]
    rate = cfg.culprits.trial_rate(cfg.culprit_flags, request_rng(cfg.seed, "decode", trial, "trial-rate"))
    return request_rate(rate, rounds)


def session_corruption_rate(q: float, rounds: int) -> float:
    """Chance that at least one of `rounds` requests of a session is corrupted."""
    return 1.0 - (1.0 - q) ** rounds


def decide_outcome(
    cfg: SimConfig, batch: int, u: float, u_kind: float, *, session: str = "", rounds: int = 3
) -> Outcome:
    """u, u_kind: independent uniform draws in [0, 1). With a configured flag model
    (sim/culprits.py) the rate is that model's, varied per trial (keyed by the session's trial)."""
    q = corruption_probability(cfg, batch) if cfg.culprits is None else culprit_probability(cfg, session, rounds)
    if u >= q:
        return "ok"
    return "no_tool" if u_kind < NO_TOOL_SHARE else "leak"


def graphed(cfg: SimConfig, batch: int) -> bool:
    """SGLang replays a captured graph only for batches up to --cuda-graph-max-bs."""
    return cfg.cuda_graph and batch <= cfg.cuda_graph_max_bs


def decode_latency_s(cfg: SimConfig, batch: int, u: float) -> float:
    """Time to decode one request's answer at this batch size; u jitters it by -15..+25 %."""
    base = EAGER_BASE_MS
    if graphed(cfg, batch):
        base = GRAPHED_BASE_MS * (OVERLAP_SPEEDUP if cfg.multi_stream_overlap else 1.0)
    factor = 1.0 + BATCH_SLOPE * max(batch - 1, 0)
    return base * factor * (0.85 + 0.4 * u) / 1000.0


def generate_latency_s(cfg: SimConfig, tokens: int) -> float:
    """A native /generate of `tokens` tokens alone in the batch: one decode step per token, a
    twentieth of a whole tool-call answer's time (orch's 1-token readiness probe takes ~1 ms)."""
    return tokens * decode_latency_s(cfg, 1, 0.5) / 20


def prefill_latency_s(prompt_tokens: int, u: float) -> float:
    """A few ms: 2 ms fixed plus 2 us per prompt token, jittered."""
    return (0.002 + 2e-6 * prompt_tokens) * (0.9 + 0.2 * u)


def anomaly_mean(cfg: SimConfig) -> float:
    return ANOMALY_MEAN_BF16 if cfg.bf16_index_k else ANOMALY_MEAN_FP8


def poisson(rng: random.Random, mean: float) -> int:
    """Knuth's method; fine for the small means used here."""
    limit, k, p = math.exp(-mean), 0, 1.0
    while True:
        p *= rng.random()
        if p <= limit:
            return k
        k += 1


def request_rng(seed: int, role: str, key: str, stream: str) -> random.Random:
    """A generator for one request and one purpose. String seeds are hashed with SHA-512 by
    random.Random, so this is stable across processes (no PYTHONHASHSEED dependence)."""
    return random.Random(f"{seed}:{role}:{stream}:{key}")
