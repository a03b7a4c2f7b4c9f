"""Probability integral transforms of per-point values, and the tests the verdict counts.

For a per-point value ``t_n`` of the data (a statistic of point n, or one feature of it) and the
same value ``t_n^(r)`` in R replicates of point n, the randomised PIT

    u_n = ( #{r : t_n^(r) < t_n} + V_n (1 + #{r : t_n^(r) = t_n}) ) / (R + 1),    V_n ~ U(0, 1)

is exactly uniform on (0, 1) when ``t_n`` and its replicates are independent draws from one
distribution, continuous or discrete (ties are broken at random; Czado, Gneiting & Held 2009).
Over N points the u's are then independent uniforms, so two questions have exact answers:

- **spread**: the share of u's in the outer deciles (``u < 0.1`` or ``u > 0.9``) is 0.2 in
  expectation. More means the data stray further than the replicates (a predictive *too
  narrow*), fewer that the replicates stray further than the data (*too wide*). Effect size:
  the share over 0.2.
- **bias**: the mean u is 1/2. Above, the data run higher than the replicates; below, lower.
  Effect size: the mean u - 1/2.

Values compared feature by feature (u_{n,f}, F features of point n) are not independent within
a point, so their tests average over each point's features first and compare the N averages
with their expectation using their own spread (a t-test).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch
from scipy import stats

TAIL = 0.1
"""The outer deciles: u below TAIL or above 1 - TAIL count towards the spread test."""
OUTER_SHARE = 2 * TAIL
Direction = Literal["too narrow", "too wide", "higher", "lower"]


class PITCounter:
    """Counts, replicate by replicate, how many replicates fall below and tie with each
    observed value, so that R replicates never need to be held at once.

    :param observed: the data's values, any shape ``E`` (``(N,)`` or ``(N, F)``).
    """

    def __init__(self, observed: torch.Tensor) -> None:
        self.observed = observed.detach().float().cpu()
        self.below = torch.zeros_like(self.observed, dtype=torch.int64)
        self.tied = torch.zeros_like(self.observed, dtype=torch.int64)
        self.replicates = 0

    def add(self, replicated: torch.Tensor) -> None:
        """Count one replicate's values (shape ``E``)."""
        replicated = replicated.detach().float().cpu()
        self.below += replicated < self.observed
        self.tied += replicated == self.observed
        self.replicates += 1

    def pit(self, rng: np.random.Generator) -> np.ndarray:
        """The randomised PIT of each observed value, shape ``E``, in (0, 1)."""
        jitter = rng.uniform(size=tuple(self.observed.shape))
        return (self.below.numpy() + jitter * (1 + self.tied.numpy())) / (self.replicates + 1)


@dataclass
class PITTest:
    """The spread and bias tests of one per-point quantity of one site under one check.

    :param check: ``"marginal"``, ``"per-point"`` (with ``"held-out "`` before it on held-out data).
    :param site: the replicated site.
    :param statistic: the statistic's name, or ``"features"`` for every feature one by one.
    :param pit: the PITs, ``(N,)``, or ``(N, F)`` feature by feature.
    :param exact: whether the u's are exactly uniform for a model that fits (replicates drawn
        independently of the data: the marginal check). The per-point check's are not: its
        replicates are drawn at the point's own z, so they cluster around the data and only an
        *excess* spread is a finding; its bias, which an amortised guide's error (q(z|x) not the
        posterior) produces as much as the model, is reported and not counted.
    :param higher: the finding's sentence when the data run higher than the replicates.
    :param lower: the finding's sentence when they run lower.
    """

    check: str
    site: str
    statistic: str
    pit: np.ndarray
    exact: bool
    higher: str = "the data run higher than the model's draws"
    lower: str = "the data run lower than the model's draws"
    spread_p_value: float = field(init=False)
    bias_p_value: float = field(init=False)

    def __post_init__(self) -> None:
        self.spread_p_value = self._spread_p_value()
        self.bias_p_value = self._bias_p_value()

    @property
    def points(self) -> int:
        """N, the number of points tested."""
        return int(self.pit.shape[0])

    def _per_point(self, values: np.ndarray) -> np.ndarray:
        return values if values.ndim == 1 else values.reshape(values.shape[0], -1).mean(1)

    @property
    def outer_share(self) -> float:
        """The share of PITs in the outer deciles (0.2 for a model that fits)."""
        return float(np.mean((self.pit < TAIL) | (self.pit > 1 - TAIL)))

    @property
    def mean_pit(self) -> float:
        """The mean PIT (0.5 for a model that fits)."""
        return float(np.mean(self.pit))

    def _spread_p_value(self) -> float:
        outer = self._per_point(((self.pit < TAIL) | (self.pit > 1 - TAIL)).astype(float))
        if self.exact and self.pit.ndim == 1:
            count = int(outer.sum())
            upper = stats.binom.sf(count - 1, self.points, OUTER_SHARE)
            lower = stats.binom.cdf(count, self.points, OUTER_SHARE)
            return float(min(1.0, 2 * min(upper, lower)))
        z = _t_statistic(outer, OUTER_SHARE)
        if self.exact:
            return float(2 * stats.norm.sf(abs(z)))
        return float(stats.norm.sf(z))  # the per-point check: an excess only

    def _bias_p_value(self) -> float:
        if self.exact and self.pit.ndim == 1:
            z = (self.mean_pit - 0.5) / np.sqrt(1 / (12 * self.points))
        else:
            z = _t_statistic(self._per_point(self.pit), 0.5)
        return float(2 * stats.norm.sf(abs(z)))

    @property
    def tail_shares(self) -> tuple[float, float]:
        """The shares of PITs below ``TAIL`` and above ``1 - TAIL`` (0.1 each for a model that fits)."""
        return float(np.mean(self.pit < TAIL)), float(np.mean(self.pit > 1 - TAIL))

    @property
    def one_sided_excess(self) -> Literal["higher", "lower"] | None:
        """``"lower"`` (``"higher"``) when the outer deciles hold more than expected and at least
        three quarters of them lie in the lower (upper) one: a shift, not a spread, so its
        finding is worded as a bias; ``None`` otherwise."""
        below, above = self.tail_shares
        if below + above <= OUTER_SHARE:
            return None
        if below >= 0.75 * (below + above):
            return "lower"
        if above >= 0.75 * (below + above):
            return "higher"
        return None

    @property
    def spread_direction(self) -> Direction:
        """``"too narrow"`` when the data stray further than the replicates, else ``"too wide"``."""
        return "too narrow" if self.outer_share > OUTER_SHARE else "too wide"

    @property
    def bias_direction(self) -> Direction:
        """``"higher"`` when the data run higher than the replicates, else ``"lower"``."""
        return "higher" if self.mean_pit > 0.5 else "lower"

    def summary(self) -> dict[str, float | int | str]:
        """JSON-ready figures: ``p_value`` (the smaller of the two), ``outer_share``,
        ``mean_pit``, both tests' p-values and ``points``."""
        return {
            "p_value": min(self.spread_p_value, self.bias_p_value),
            "outer_share": self.outer_share,
            "mean_pit": self.mean_pit,
            "spread_p_value": self.spread_p_value,
            "bias_p_value": self.bias_p_value,
            "points": self.points,
        }


def _t_statistic(values: np.ndarray, expected: float) -> float:
    """``(mean - expected) / standard error`` of ``values`` (N,); 0 when they do not vary and
    sit at ``expected``, +-inf when they do not vary elsewhere."""
    mean = float(np.mean(values))
    spread = float(np.std(values, ddof=1)) if values.size > 1 else 0.0
    if spread == 0.0:
        return 0.0 if mean == expected else float(np.sign(mean - expected) * np.inf)
    return (mean - expected) / (spread / np.sqrt(values.size))


@dataclass(frozen=True)
class Finding:
    """One way in which the data differ from the model's replicates.

    :param check: which check found it (``"marginal"``, ``"per-point"``, ``"held-out marginal"``...).
    :param site: the replicated site.
    :param statistic: the statistic, ``"features"``, or ``"statistic[element]"``.
    :param direction: ``"too narrow"``, ``"too wide"``, ``"higher"`` or ``"lower"``.
    :param effect: the effect size in words ("outer-decile share 0.45, 0.20 expected").
    :param p_value: the test's p-value, adjusted for the number of tests (Bonferroni).
    :param describes: what the direction means for this statistic ("rougher", "smoother").
    """

    check: str
    site: str
    statistic: str
    direction: Direction
    effect: str
    p_value: float
    describes: str

    def __str__(self) -> str:
        return f"{self.site}/{self.statistic} ({self.check} check): {self.describes} ({self.effect}; adjusted p = {self.p_value:.2g})"


_WHAT_SPREAD_MEANS = {
    "too narrow": "the data stray further than the model's draws: predictive too narrow",
    "too wide": "the model's draws stray further than the data: predictive too wide",
}


def findings_of(test: PITTest, tests: int, level: float) -> list[Finding]:
    """The findings of ``test`` at family-wise level ``level`` over ``tests`` tests (Bonferroni):
    its spread and (for an exact test) its bias, each when its adjusted p-value is below ``level``."""
    found = []
    spread = min(1.0, test.spread_p_value * tests)
    one_tail = test.one_sided_excess
    if spread < level and one_tail is not None:
        share = test.tail_shares[0 if one_tail == "lower" else 1]
        found.append(Finding(test.check, test.site, test.statistic, one_tail,
                             f"{share:.3f} of PITs in the {one_tail} decile, {TAIL:.3f} expected", spread,
                             (test.higher if one_tail == "higher" else test.lower) + ", at one tail"))
    elif spread < level:
        direction = test.spread_direction
        found.append(Finding(test.check, test.site, test.statistic, direction,
                             f"outer-decile share {test.outer_share:.3f}, {OUTER_SHARE:.3f} expected", spread,
                             _WHAT_SPREAD_MEANS[direction]))
    bias = min(1.0, test.bias_p_value * tests)
    if test.exact and bias < level:
        direction = test.bias_direction
        found.append(Finding(test.check, test.site, test.statistic, direction,
                             f"mean PIT {test.mean_pit:.3f}, 0.500 expected", bias,
                             test.higher if direction == "higher" else test.lower))
    return found
