"""A small hunt on the simulator, shared by the tests that kill one (tests/e2e's parallel kill -9,
helpers.killmore's kill points): four suspect flags on decode, the failure needing ALPHA and BETA
on together (half the sessions), no background, no trial-to-trial variation, so a hunt needs few
trials and a test stays short."""

from __future__ import annotations

FLAGS = ("alpha", "beta", "gamma", "delta")
DECODE_ENV = (
    "SIM_WARMUP_S=0.05\n"
    + "".join(f"HUNT_{f.upper()}=1\n" for f in FLAGS)
    + 'SIM_CULPRITS="HUNT_ALPHA&HUNT_BETA:0.5"\nSIM_BACKGROUND=0\nSIM_TRIAL_ICC=0\n'
)
MATRIX = (
    "name: small_hunt\nfactors:\n"
    + "".join(f"  {f}:\n    env: {{decode: HUNT_{f.upper()}}}\n    levels: [on, off]\n" for f in FLAGS)
    + """\
hunt:
  metric: corruption
  sessions_per_trial: 10
  max_sessions: 2000
repro:
  command: "{python} -m orchestrator.sim.repro --router {router_url} --sessions 10 --rounds 1 --seed {trial_seed}"
  timeout: 60
  metrics:
    corruption: {kind: proportion, regex: 'CORRUPTION sessions: (?P<k>\\d+)/(?P<n>\\d+)'}
"""
)
