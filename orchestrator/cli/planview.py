"""Print a plan for people: cells, env changes per host per cell, restarts, estimated time.

What `orch plan` and `orch run --dry-run` show. Reads the pure plan; touches nothing.
"""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from orchestrator.core.plan import Plan, make_plan


def human_duration(seconds: float) -> str:
    seconds = int(round(seconds))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m" if h else (f"{m}m{s:02d}s" if m else f"{s}s")


def print_plan(plan: Plan, console: Console, *, list_trials: bool = False) -> None:
    m = plan.matrix
    console.print(
        f"[bold]{escape(m.name)}[/bold] on testbed [bold]{escape(plan.testbed.name)}[/bold]: "
        f"{len(plan.cells)} cells x {plan.replicates} replicates = {len(plan.steps)} trials, "
        f"order {m.order} (seed {plan.seed})"
    )
    console.print(_cells_table(plan))
    if list_trials:
        console.print(_trials_table(plan))
    console.print(
        f"restarts: {plan.restart_count} unit restarts in this order "
        f"(units whose env does not change stay up); {_other_orders(plan)}"
    )
    console.print(
        f"estimated duration: {human_duration(plan.estimated_duration_s)} "
        f"(startup estimates from the inventory + {m.repro.expected_duration_s:g} s per repro)"
    )
    _print_power(plan, console)


def _other_orders(plan: Plan) -> str:
    """Restart counts the other orders would need, so `order: min-restarts` can be weighed."""
    counts = []
    for order in ("randomized", "sequential", "min-restarts"):
        other = make_plan(plan.matrix, plan.testbed, plan.seed, plan.replicates, order=order)
        counts.append(f"{order} {other.restart_count}")
    return "per order: " + ", ".join(counts)


def _cells_table(plan: Plan) -> Table:
    base_env, redact = plan.baseline.env, plan.matrix.redactor.value
    table = Table(title="cells (env changes vs the baseline, per host)", show_lines=False)
    table.add_column("#", justify="right")
    for f in plan.matrix.factors:
        table.add_column(f.name)
    table.add_column("env vs baseline", overflow="fold")
    for i, cell in enumerate(plan.cells):
        env = cell.env
        diffs = []
        for role in env:
            changed = [
                f"{var}={_show(redact(var, value) if value is not None else None)}"
                for var, value in env[role].items()
                if base_env.get(role, {}).get(var) != value
            ]
            if changed:
                diffs.append(f"{role}: " + " ".join(changed))
        label = "(baseline)" if cell == plan.baseline else "\n".join(diffs)
        table.add_row(str(i), *[escape(lv) for _, lv in cell.levels], escape(label))
    return table


def _trials_table(plan: Plan) -> Table:
    table = Table(title="trials in run order")
    for col in ("trial", "round", "cell", "restarts", "waits on"):
        table.add_column(col)
    for s in plan.steps:
        table.add_row(
            str(s.trial.index),
            str(s.trial.round),
            escape(s.trial.cell.id),
            escape(", ".join(f"{r}:{u}" for r, u in s.restart_units) or "-"),
            ", ".join(s.wait_roles),
        )
    return table


def _show(value: str | None) -> str:
    return "<unset>" if value is None else (repr(value) if value == "" or " " in value else value)


def _print_power(plan: Plan, console: Console) -> None:
    """Minimum detectable difference for proportion metrics, when the repro says its n."""
    try:
        from orchestrator.core.stats import min_detectable_difference
    except ImportError:  # pragma: no cover - stats ships with orch
        return
    import re

    n_match = re.search(r"--sessions[ =](\d+)", plan.matrix.repro.command)
    props = [s.name for s in plan.matrix.repro.metrics if s.kind == "proportion"]
    if not n_match or not props:
        return
    n = int(n_match.group(1)) * plan.replicates
    for rate in (0.02, 0.05, 0.15):
        mdd = min_detectable_difference(n, rate)
        console.print(
            f"power: with {n} sessions per cell, a baseline rate of {rate:.0%} can be told "
            f"apart from {rate + mdd:.1%} or more (power 0.8, alpha 0.05)"
        )
