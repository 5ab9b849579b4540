"""The mean as a person should see it: the recommended estimate on top, its
95% interval as a band, the truth, and in words why one timestamp's interval
is wide; the windowed view beside it. Used by `rase demo` and `rase eval
utility` (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

import math

import numpy as np

Z95 = 1.959963984540054
MEAN_COLOR, TRUTH_COLOR, BAND_ALPHA = "tab:red", "black", 0.22


def _halo():  # noqa: ANN202
    from matplotlib import patheffects

    return [patheffects.Stroke(linewidth=3.2, foreground="white"), patheffects.Normal()]


def windowed_band(mean: np.ndarray, lo: np.ndarray, hi: np.ndarray, w: int, z: float = Z95
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The mean over the last w present timestamps and its interval, from the
    per-timestamp intervals taken as normal (sd = half width / z) and the
    timestamps' noise independent: var = sum sd^2 / k^2. Early timestamps
    (fewer than w) average what there is."""
    present = ~np.isnan(mean)
    sd = np.where(present, (hi - lo) / (2 * z), 0.0)
    k = np.convolve(present.astype(float), np.ones(w))[:len(mean)]
    s = np.convolve(np.nan_to_num(mean), np.ones(w))[:len(mean)]
    v = np.convolve(sd * sd, np.ones(w))[:len(mean)]
    with np.errstate(invalid="ignore", divide="ignore"):
        m = np.where(k > 0, s / k, np.nan)
        half = np.where(k > 0, z * np.sqrt(v) / k, np.nan)
    return m, m - half, m + half


def windowed_truth(truth: np.ndarray, w: int) -> np.ndarray:
    """The true mean averaged over the same last-w timestamps."""
    present = ~np.isnan(truth)
    k = np.convolve(present.astype(float), np.ones(w))[:len(truth)]
    s = np.convolve(np.nan_to_num(truth), np.ones(w))[:len(truth)]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(k > 0, s / k, np.nan)


def why_wide(n: float, eps: float, x_range: float, half_width: float, truth: float, mechanism_name: str = "br") -> str:
    """Words for a per-timestamp panel: where the width comes from (the
    mechanism's exact per-report sd at the true mean, from the registry)."""
    from rase_device.randomizer import Calibration
    from rase_common.mechanisms import Setting, mechanism

    setting = Setting.of(Calibration(x_min=0.0, x_max=x_range))
    try:
        sd = math.sqrt(float(mechanism(mechanism_name).report_variances(setting, eps, np.array([max(truth, 0.0)]))[0]))
    except (AttributeError, NotImplementedError, TypeError, ValueError):   # not a local mechanism (prio3)
        return (f"The 95% interval is about ±{half_width:,.0f} W per timestamp ({mechanism_name}, ε = {eps:g}, "
                f"n = {n:.0f}),\naround a true mean of {truth:,.0f} W.")
    return (f"Why so wide: each device randomizes its own reading ({mechanism_name}, ε = {eps:g}) before it leaves "
            f"the device:\nover a {x_range:,.0f} W range a report's sd is {sd:,.0f} W. The mean of n = {n:.0f} "
            f"reports keeps 1/√n of it:\na 95% interval of about ±{half_width:,.0f} W per timestamp, around a true "
            f"mean of {truth:,.0f} W.")


def why_narrower(w: int, half_width: float, half_width_t: float) -> str:
    return (f"Averaging the last w = {w} timestamps divides the noise by about √{w} = {math.sqrt(w):.0f}:\n"
            f"±{half_width:,.0f} W here against ±{half_width_t:,.0f} W per timestamp.")


def mean_panels(ax_t, ax_w, x: np.ndarray, *, mean: np.ndarray, lo: np.ndarray, hi: np.ndarray,  # noqa: ANN001
                truth: np.ndarray, w: int, n: float, eps: float, x_range: float, xlabel: str,
                win: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None, mechanism_name: str = "br") -> None:
    """Per-timestamp panel (ax_t) and windowed panel (ax_w): band, then truth,
    then the mean drawn last, so nothing hides it. `win` is (mean, lo, hi) of
    the windowed mean as published; without it, windowed_band computes it."""
    half_t = float(np.nanmedian((hi - lo) / 2))
    ax_t.fill_between(x, lo, hi, color=MEAN_COLOR, alpha=BAND_ALPHA, lw=0, label="95% interval of the mean")
    ax_t.plot(x, mean, color=MEAN_COLOR, lw=0.6, alpha=0.8, label="mean (the estimate to use)", zorder=3)
    # The truth in black with a white edge, so it shows through the dense per-timestamp mean.
    ax_t.plot(x, truth, color=TRUTH_COLOR, lw=1.4, label="true mean", zorder=4, path_effects=_halo())
    ax_t.set_title("Per timestamp", fontsize=10)
    ax_t.set_xlabel(xlabel)
    ax_t.set_ylabel("mean power per appliance (W)")
    ax_t.text(0.01, 0.02, why_wide(n, eps, x_range, half_t, float(np.nanmean(truth)), mechanism_name),
              transform=ax_t.transAxes, fontsize=7.5, va="bottom", ha="left",
              bbox={"facecolor": "white", "alpha": 0.85, "lw": 0})
    ax_t.legend(loc="upper right", fontsize=8)

    wm, wlo, whi = win if win is not None else windowed_band(mean, lo, hi, w)
    wt = windowed_truth(np.where(np.isnan(mean), np.nan, truth), w)
    full = np.arange(len(x)) >= w - 1                   # only windows of w timestamps
    half_w = float(np.nanmedian(((whi - wlo) / 2)[full])) if full.any() else float("nan")
    ax_w.fill_between(x[full], wlo[full], whi[full], color=MEAN_COLOR, alpha=BAND_ALPHA, lw=0,
                      label=f"95% interval, windowed w = {w}")
    ax_w.plot(x[full], wm[full], color=MEAN_COLOR, lw=1.1, label=f"mean, windowed w = {w}", zorder=3)
    ax_w.plot(x[full], wt[full], color=TRUTH_COLOR, lw=1.4, label=f"true mean, windowed w = {w}", zorder=4,
              path_effects=_halo())
    ax_w.set_title(f"Windowed: average of the last {w} timestamps", fontsize=10)
    ax_w.set_xlabel(xlabel)
    ax_w.set_ylabel("W")
    ax_w.text(0.01, 0.02, why_narrower(w, half_w, half_t), transform=ax_w.transAxes, fontsize=7.5, va="bottom",
              ha="left", bbox={"facecolor": "white", "alpha": 0.85, "lw": 0})
    ax_w.legend(loc="upper right", fontsize=8)
    # Room below the lines for the words, above them for the legend.
    for ax in (ax_t, ax_w):
        lo_y, hi_y = ax.get_ylim()
        span = hi_y - lo_y
        ax.set_ylim(lo_y - 0.3 * span, hi_y + 0.2 * span)
