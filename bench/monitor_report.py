"""The figures of a bench/monitors.py run and what they say: each side's checks, CPU and
lateness (``Side``), the windows with the monitors on and paused (``Window``, ``Round``), the
estimators of what a check costs aegis above what it costs anyway, and the report.

A check's cost is a small difference between large numbers: at 8 checks a second the monitors
add a few ms of CPU a second to an ``aegis up`` that idles at 13 to 25, so each estimator takes
that idle part out its own way and the report prints them all:

- above the idle rate measured before the monitors were added;
- above the idle twin's CPU over the same window, plain and scaled by the two's idle ratio;
- above aegis's own CPU in the window that follows each with every monitor paused;
- the same, less what the twin's own CPU moved between those two windows.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fullstack import heading, percentile


@dataclass
class Side:
    name: str
    checks: int
    cpu_seconds: float
    lateness_ms: list[float]
    extra_rss_mb: float | None = None
    idle_cpu_seconds: float = 0.0  # the idle rate measured before, over the same window's length
    redis_cpu_seconds: float = 0.0  # of cpu_seconds, the embedded Redis's share
    twin_cpu_seconds: float = 0.0  # the idle twin's CPU over the same window
    # aegis's idle CPU over the twin's, measured side by side before the monitors: two
    # instances of one program idle at rates a few percent apart, as much as the monitors cost
    twin_scale: float = 1.0
    rounds: list[Round] = field(default_factory=list)

    @property
    def above_paused_ms_per_check(self) -> float:
        spent = sum(each.above_paused_cpu_seconds for each in self.rounds)
        return spent * 1000 / self.checks if self.checks else float("nan")

    @property
    def above_paused_and_twin_ms_per_check(self) -> float:
        spent = sum(r.above_paused_cpu_seconds - r.twin_moved_cpu_seconds for r in self.rounds)
        return spent * 1000 / self.checks if self.checks else float("nan")

    @property
    def cpu_ms_per_check(self) -> float:
        return self.cpu_seconds * 1000 / self.checks if self.checks else float("nan")

    @property
    def above_idle_ms_per_check(self) -> float:
        spent = self.cpu_seconds - self.idle_cpu_seconds
        return spent * 1000 / self.checks if self.checks else float("nan")

    @property
    def above_twin_ms_per_check(self) -> float:
        spent = self.cpu_seconds - self.twin_cpu_seconds
        return spent * 1000 / self.checks if self.checks else float("nan")

    @property
    def above_scaled_twin_ms_per_check(self) -> float:
        spent = self.cpu_seconds - self.twin_cpu_seconds * self.twin_scale
        return spent * 1000 / self.checks if self.checks else float("nan")


@dataclass
class Window:
    window: tuple[float, float]  # time.time() at its start and end
    cpu: tuple[float, ...]  # CPU seconds of aegis, its Redis, the twin and the baseline

    @property
    def seconds(self) -> float:
        return self.window[1] - self.window[0]


@dataclass
class Round:
    """A window with the monitors on, then one as long with all of them paused."""

    on: Window
    off: Window
    checks: int = 0  # aegis's checks the target saw in the window on

    @property
    def above_paused_cpu_seconds(self) -> float:
        return self.on.cpu[0] - self.off.cpu[0] * self.on.seconds / self.off.seconds

    @property
    def twin_moved_cpu_seconds(self) -> float:
        """How much more the idle twin spent in the window on than in the window off: what
        the machine's state (busier while aegis checks) does to an idle aegis's own work."""
        return self.on.cpu[2] - self.off.cpu[2] * self.on.seconds / self.off.seconds


def report(args, baseline: Side, aegis: Side, baseline_rss: float, cards: list) -> None:
    expected = args.monitors * args.seconds / args.interval
    heading(
        f"{args.monitors} http monitors every {args.interval} s, {args.seconds} s measured "
        f"(about {expected:.0f} checks expected)"
    )
    print(
        f"{'':10}{'checks':>8}{'CPU s':>8}{'CPU ms/check':>14}{'late p50 ms':>13}"
        f"{'p99 ms':>9}{'max ms':>9}{'RSS+ MB':>9}"
    )
    for side in (baseline, aegis):
        late = side.lateness_ms or [float("nan")]
        extra = "" if side.extra_rss_mb is None else f"{side.extra_rss_mb:9.1f}"
        print(
            f"{side.name:10}{side.checks:8}{side.cpu_seconds:8.2f}{side.cpu_ms_per_check:14.3f}"
            f"{percentile(late, 0.5):13.1f}{percentile(late, 0.99):9.1f}{max(late):9.1f}{extra}"
        )
    ratio = aegis.cpu_ms_per_check / baseline.cpu_ms_per_check
    p99 = percentile(aegis.lateness_ms or [float("nan")], 0.99)
    print(f"\nCPU per check, aegis / baseline: {ratio:.2f} (all in: aegis's idle cost included)")
    base = baseline.cpu_ms_per_check
    target = " (target ≤ 2{})"
    estimate(
        f"with aegis's idle rate from before ({aegis.idle_cpu_seconds:.2f} s over the window) "
        "taken out",
        aegis.above_idle_ms_per_check,
        base,
    )
    estimate(
        f"with the idle twin's CPU over the same window ({aegis.twin_cpu_seconds:.2f} s) taken out",
        aegis.above_twin_ms_per_check,
        base,
    )
    estimate(
        f"with the twin's CPU scaled by the two's idle ratio ({aegis.twin_scale:.3f}) taken out",
        aegis.above_scaled_twin_ms_per_check,
        base,
        target.format(""),
    )
    rounds = [r for r in aegis.rounds if r.checks]
    each = ", ".join(f"{r.above_paused_cpu_seconds * 1000 / r.checks / base:.2f}" for r in rounds)
    estimate(
        f"with aegis's own CPU with every monitor paused taken out (rounds of "
        f"{args.seconds / args.rounds:.0f} s on, then as long paused)",
        aegis.above_paused_ms_per_check,
        base,
        target.format(f"; each round: {each}"),
    )
    each = ", ".join(
        f"{(r.above_paused_cpu_seconds - r.twin_moved_cpu_seconds) * 1000 / r.checks / base:.2f}"
        for r in rounds
    )
    moved = sum(r.twin_moved_cpu_seconds for r in aegis.rounds)
    estimate(
        f"less what the idle twin's own CPU moved from the windows on to the windows paused "
        f"({moved:+.2f} s)",
        aegis.above_paused_and_twin_ms_per_check,
        base,
        target.format(f"; each round: {each}"),
    )
    print(f"aegis RSS above idle: {aegis.extra_rss_mb:.1f} MB (target ≤ 40 MB)")
    print(f"aegis slot lateness p99: {p99:.0f} ms (target ≤ 1000 ms)")
    print(f"(the baseline process's whole RSS, for scale: {baseline_rss:.0f} MB)")
    if cards:
        print(
            f"threshold crossed to card at the emulator, {len(cards)} of {args.cards} cards: "
            f"p50 {percentile(cards, 0.5):.0f} ms, p99 {percentile(cards, 0.99):.0f} ms "
            "(targets 1000 and 5000 ms)"
        )
    print(
        f"aegis's CPU counts aegis up (web, worker, clock) and its embedded Redis "
        f"({aegis.redis_cpu_seconds:.2f} s of the {aegis.cpu_seconds:.2f} s)."
    )


def estimate(how: str, ms_per_check: float, baseline_ms: float, target: str = "") -> None:
    """One estimator's line: a check's CPU above what aegis costs anyway, and x the baseline."""
    ratio = ms_per_check / baseline_ms
    print(f"  the same {how}: {ms_per_check:.3f} ms per check, {ratio:.2f} x the baseline{target}")
