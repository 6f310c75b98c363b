"""Pure text formatting for reports: numbers, intervals, hashes, durations.

Every function here turns an already-computed value into display text; nothing here computes a statistic.
Missing or non-finite values are shown as an em dash with no pretence of precision (a NaN never prints as a number).
"""

from __future__ import annotations

import math

DASH = "\u2014"


def is_num(x: object) -> bool:
    """True for a finite int/float (bools excluded)."""
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(float(x))


def pct(x: float | None, *, digits: int = 1, signed: bool = False) -> str:
    """A proportion as percent: ``pct(0.1234) == '12.3%'``; ``signed`` adds '+' for differences."""
    if not is_num(x):
        return DASH
    v = 100.0 * float(x)  # type: ignore[arg-type]
    text = f"{v:+.{digits}f}" if signed else f"{v:.{digits}f}"
    return text.replace("-", "\u2212") + "%"


def pp(x: float | None, *, digits: int = 1, signed: bool = True) -> str:
    """A difference of proportions in percentage points: ``pp(-0.031) == '−3.1 pp'``."""
    if not is_num(x):
        return DASH
    v = 100.0 * float(x)  # type: ignore[arg-type]
    text = f"{v:+.{digits}f}" if signed and round(v, digits) != 0 else f"{abs(v) if round(v, digits) == 0 else v:.{digits}f}"
    return text.replace("-", "\u2212") + " pp"


def num(x: float | None, *, digits: int = 3) -> str:
    """A plain number with fixed decimals; integers print without decimals."""
    if not is_num(x):
        return DASH
    if isinstance(x, int):
        return f"{x:,}"
    return f"{float(x):.{digits}f}".replace("-", "\u2212")  # type: ignore[arg-type]


def interval(lo: float | None, hi: float | None, *, scale: str = "pp", digits: int = 1) -> str:
    """A confidence interval as text: ``[−1.2, 4.5] pp`` (scale 'pp'), ``[10.0%, 20.0%]`` ('pct') or plain."""
    if not (is_num(lo) and is_num(hi)):
        return DASH
    if scale == "pp":
        return f"[{pp(lo, digits=digits)[:-3]}, {pp(hi, digits=digits)[:-3]}] pp"
    if scale == "pct":
        return f"[{pct(lo, digits=digits)}, {pct(hi, digits=digits)}]"
    return f"[{num(lo, digits=digits)}, {num(hi, digits=digits)}]"


def pvalue(p: float | None) -> str:
    """p-values the way journals print them: '<0.001', '0.012' (three decimals below 0.1), '0.43'."""
    if not is_num(p):
        return DASH
    v = float(p)  # type: ignore[arg-type]
    if v < 0.001:
        return "<0.001"
    if v < 0.1:
        return f"{v:.3f}"
    return f"{v:.2f}"


def short_hash(h: str | None, n: int = 12) -> str:
    """First ``n`` hex digits of a digest (``sha256:`` prefixes kept out); a dash when absent."""
    if not h:
        return DASH
    body = h.split(":", 1)[1] if h.startswith("sha256:") else h
    return body[:n]


def duration(seconds: float | None) -> str:
    """'850 ms', '12.3 s', '4 min 05 s', '2 h 03 min'."""
    if not is_num(seconds):
        return DASH
    s = float(seconds)  # type: ignore[arg-type]
    if s < 1:
        return f"{s * 1000:.0f} ms"
    if s < 60:
        return f"{s:.1f} s"
    if s < 3600:
        return f"{int(s // 60)} min {int(s % 60):02d} s"
    return f"{int(s // 3600)} h {int(s % 3600 // 60):02d} min"


def mean_std(mean: float | None, std: float | None, *, as_pct: bool = True, digits: int = 1) -> str:
    """'41.2% ± 3.0' (std in the same unit, percentage points when ``as_pct``)."""
    if not is_num(mean):
        return DASH
    if as_pct:
        head = pct(mean, digits=digits)
        tail = f" \u00b1 {100.0 * float(std):.{digits}f}" if is_num(std) else ""  # type: ignore[arg-type]
    else:
        head = num(mean, digits=digits + 2)
        tail = f" \u00b1 {float(std):.{digits + 2}f}" if is_num(std) else ""  # type: ignore[arg-type]
    return head + tail


def truncate(text: str, limit: int) -> str:
    """Cut ``text`` to ``limit`` characters, saying how much was cut (never silently)."""
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n… [{len(text) - limit:,} more characters not shown]"
