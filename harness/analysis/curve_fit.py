"""The learning curves' fitted lines (rule learning_curves: ``learning_curves_fit.csv`` beside its table): per family
and metric (held-out agreement at draft step 1, and its mean over the draft steps the lr study averages), a least
squares line of agreement against log2 of the supervised target positions, over the family's rungs: its slope (the
agreement one doubling of the positions adds) with a 95% t interval (n - 2 degrees of freedom: none from two rungs),
and R^2. On the meeting family's rows (lyanna), where its line meets the reference family's (eagle): the positions
where the two lines cross, or why they do not within ``REACH`` times the largest rung: "lines diverge" (the gap
widens with positions), "does not meet within 100x", "already ahead" (lyanna's line at or above eagle's at the
largest rung). A line is an extrapolation: the table says so by the rungs and positions it rests on. Torch-free."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

METRICS = ("agreement_step1", "agreement_mean")
MEETS, REFERENCE = "lyanna", "eagle"  # where the paper's method would reach EAGLE's agreement, if it would
REACH = 100.0  # a crossing beyond this many times the largest rung's positions is reported as not meeting
FIT_COLUMNS = ["family", "metric", "steps", "rungs", "positions_min", "positions_max", "intercept",
               "slope_per_doubling", "slope_ci_low", "slope_ci_high", "r2", "meets", "meets_positions", "meeting"]
T_975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228)  # Student's t, 97.5%, df 1-10


def t_quantile(df: int) -> float:
    """Student's t 97.5% quantile at ``df`` degrees of freedom (a table to 10, then Cornish-Fisher's expansion)."""
    if df < 1:
        return float("nan")
    if df <= len(T_975):
        return T_975[df - 1]
    z = 1.959964
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


def fit_line(positions: np.ndarray, values: np.ndarray) -> dict[str, float]:
    """Least squares ``values`` = intercept + slope x log2(``positions``): intercept, slope, its 95% t interval
    (NaN with fewer than three points) and R^2."""
    x, y = np.log2(np.asarray(positions, dtype=float)), np.asarray(values, dtype=float)
    n = len(x)
    spread = float(((x - x.mean()) ** 2).sum())
    if n < 2 or spread == 0:
        nan = float("nan")
        return {"intercept": nan, "slope": nan, "low": nan, "high": nan, "r2": nan}
    slope = float(((x - x.mean()) * (y - y.mean())).sum() / spread)
    intercept = float(y.mean() - slope * x.mean())
    residual = float(((y - intercept - slope * x) ** 2).sum())
    total = float(((y - y.mean()) ** 2).sum())
    half = t_quantile(n - 2) * math.sqrt(residual / (n - 2) / spread) if n > 2 else float("nan")
    return {"intercept": intercept, "slope": slope, "low": slope - half, "high": slope + half,
            "r2": 1.0 - residual / total if total > 0 else float("nan")}


def family_fits(curves: pd.DataFrame) -> pd.DataFrame:
    """One row per family and metric of ``curves`` (the learning-curve table, with ``agreement_mean``)."""
    rows = []
    steps = int(curves.agreement_steps.iloc[0]) if len(curves) else 0
    for family, found in curves.groupby("family"):
        found = found.dropna(subset=["tokens"])
        for metric in METRICS:
            if found[metric].isna().all():  # the draft LM records no mean over draft steps
                continue
            line = fit_line(found.tokens.to_numpy(), found[metric].to_numpy())
            rows.append({"family": family, "metric": metric, "steps": 1 if metric == "agreement_step1" else steps,
                         "rungs": len(found), "positions_min": found.tokens.min(), "positions_max": found.tokens.max(),
                         "intercept": line["intercept"], "slope_per_doubling": line["slope"],
                         "slope_ci_low": line["low"], "slope_ci_high": line["high"], "r2": line["r2"]})
    return pd.DataFrame(rows, columns=FIT_COLUMNS[:-3])


def meeting(mine: pd.Series, theirs: pd.Series, reach: float = REACH) -> tuple[float, str]:
    """(positions, in words) where ``mine``'s fitted line meets ``theirs`` (two rows of ``family_fits``), judged
    from the larger of their largest rungs up to ``reach`` times it."""
    largest = math.log2(max(mine.positions_max, theirs.positions_max))
    gap = (theirs.intercept - mine.intercept) + (theirs.slope_per_doubling - mine.slope_per_doubling) * largest
    if any(math.isnan(value) for value in (gap, mine.slope_per_doubling, theirs.slope_per_doubling)):
        return float("nan"), "no fit"
    if gap <= 0:
        return float("nan"), "already ahead"
    closing = mine.slope_per_doubling - theirs.slope_per_doubling  # agreement the gap loses per doubling
    if closing <= 0:
        return float("nan"), "lines diverge"
    crossing = largest + gap / closing
    if crossing > largest + math.log2(reach):
        return float("nan"), f"does not meet within {reach:g}x"
    positions = 2.0**crossing
    return positions, f"meets at {positions:,.0f} positions ({positions / 2.0**largest:.1f}x the largest rung)"


def fit_table(curves: pd.DataFrame, meets: str = MEETS, reference: str = REFERENCE) -> pd.DataFrame:
    """The fitted lines of every family, and on ``meets``' rows where they meet ``reference``'s (both present)."""
    fits = family_fits(curves).assign(meets="", meets_positions=np.nan, meeting="")
    for metric in METRICS:
        mine = fits[(fits.family == meets) & (fits.metric == metric)]
        theirs = fits[(fits.family == reference) & (fits.metric == metric)]
        if mine.empty or theirs.empty:
            continue
        positions, words = meeting(mine.iloc[0], theirs.iloc[0])
        fits.loc[mine.index, ["meets", "meets_positions", "meeting"]] = [reference, positions, words]
    return fits[FIT_COLUMNS]
