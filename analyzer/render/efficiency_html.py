"""The compute-efficiency section of the HTML report: the headline, an inline SVG roofline (op
groups as points: arithmetic intensity against achieved FLOP/s, under the compute roof and the
bandwidth roof) and a table of the op groups. Offline (no script, no external resource); every name
escaped."""

from __future__ import annotations

import math
from html import escape

from ..analysis.efficiency.words import bandwidth, rate
from .efficiency_text import headline, pct
from ..report.present import fmt_us

W, H, PAD = 560, 320, 48
FAMILY_COLOURS = {"matmul": "#1f77b4", "convolution": "#17becf", "attention": "#9467bd",
                  "elementwise": "#ff7f0e", "normalisation": "#2ca02c", "softmax": "#d62728",
                  "reduction": "#8c564b", "embedding": "#e377c2",
                  "copy": "#7f7f7f"}


def _e(x) -> str:
    return escape(str(x), quote=True)


def _log_axis(lo: float, hi: float, size: float, flip: bool):
    lo, hi = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    hi = max(hi, lo + 1)

    def at(v: float) -> float:
        f = (math.log10(max(v, 10.0 ** lo)) - lo) / (hi - lo)
        return PAD + (1 - f) * (size - 2 * PAD) if flip else PAD + f * (size - 2 * PAD)

    return at, lo, hi


def roofline_svg(e: dict) -> str:
    """The plot ('' when no op has both an intensity and a rate)."""
    pts = [o for o in e.get("ops") or [] if o.get("intensity") and o.get("flops_per_s")]
    if not pts:
        return ""
    peak, bw = e.get("peak_flops_per_s"), e.get("peak_bytes_per_s")
    xs = [o["intensity"] for o in pts] + ([peak / bw] if peak and bw else [])
    ys = [o["flops_per_s"] for o in pts] + ([peak] if peak else [])
    x_at, xlo, xhi = _log_axis(min(xs) / 2, max(xs) * 2, W, False)
    y_at, ylo, yhi = _log_axis(min(ys) / 2, max(ys) * 2, H, True)
    out = [f'<svg class="roofline" viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img" '
           f'aria-label="roofline: op groups by arithmetic intensity and achieved FLOP/s">',
           f'<rect x="{PAD}" y="{PAD}" width="{W - 2 * PAD}" height="{H - 2 * PAD}" '
           'fill="none" stroke="#999"/>']
    for k in range(xlo, xhi + 1):
        out.append(f'<text x="{x_at(10.0 ** k):.1f}" y="{H - PAD + 14}" font-size="10" '
                   'text-anchor="middle">'
                   f'1e{k}</text>')
    for k in range(ylo, yhi + 1):
        out.append(f'<text x="{PAD - 4}" y="{y_at(10.0 ** k):.1f}" font-size="10" '
                   f'text-anchor="end">1e{k}</text>')
    out.append(f'<text x="{W / 2}" y="{H - 8}" font-size="11" text-anchor="middle">'
               'arithmetic intensity (FLOP/byte)'
               f'</text><text x="12" y="{H / 2}" font-size="11" transform="rotate(-90 12 {H / 2})" '
               f'text-anchor="middle">achieved FLOP/s</text>')
    if peak and bw:
        ridge = peak / bw
        x0 = 10.0 ** xlo
        out.append(f'<polyline fill="none" stroke="#c00" stroke-width="1.5" points="{x_at(x0):.1f},'
                   f'{y_at(x0 * bw):.1f} {x_at(ridge):.1f},{y_at(peak):.1f} '
                   f'{x_at(10.0 ** xhi):.1f},{y_at(peak):.1f}">'
                   f'<title>roofs: {_e(bandwidth(bw))} and {_e(rate(peak))} '
                   f'({_e(e.get("precision"))})</title>'
                   f'</polyline>')
    for o in pts:
        colour = FAMILY_COLOURS.get(o.get("family"), "#333")
        tip = (f"{o.get('name')} {o.get('shape')} {o.get('dtype')}: {rate(o['flops_per_s'])}, "
               f"{pct(o.get('pct_of_roofline'))} of roofline")
        cx, cy = x_at(o["intensity"]), y_at(o["flops_per_s"])
        out.append(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="4" '
                   f'fill="{colour}" fill-opacity="0.7"><title>{_e(tip)}</title></circle>')
    out.append("</svg>")
    return "".join(out)


def _num(v) -> str:
    """A number for data-v ('' when it is none)."""
    return repr(float(v)) if isinstance(v, (int, float)) and not isinstance(v, bool) else ""


def efficiency_html(report: dict) -> str:
    """The section's HTML ('' when the report has no efficiency object and no reason for its
    absence)."""
    e = report.get("efficiency")
    if not isinstance(e, dict):
        why = report.get("efficiency_unavailable")
        return (f'<section class="efficiency"><h2>Compute efficiency</h2>'
                f'<p>Not available: {_e(why)}.</p>'
                f'</section>') if why else ""
    rows = []
    for o in e.get("ops") or []:
        cells = ((o.get("name"), None), (o.get("shape"), None), (o.get("dtype"), None),
                 (o.get("count"), o.get("count")), (fmt_us(o.get("time_us")), o.get("time_us")),
                 (rate(o.get("flops_per_s")), o.get("flops_per_s")),
                 (pct(o.get("pct_of_roofline")), o.get("pct_of_roofline")),
                 (o.get("bound") or "-", None),
                 (fmt_us(o.get("lost_us_per_step")), o.get("lost_us_per_step")))
        # data-v: the number a click on the column's name sorts by (templates/report.js)
        rows.append("<tr>" + "".join(f'<td data-v="{_e(_num(raw))}">{_e(v)}</td>' if raw is not None
                                     else f"<td>{_e(v)}</td>" for v, raw in cells) + "</tr>")
    head = "".join(f"<th>{h}</th>" for h in ("op", "shapes", "dtype", "calls", "each", "FLOP/s",
                                              "% of roofline",
                                              "bound", "lost per step"))
    return ('<section class="efficiency"><h2>Compute efficiency</h2><ul>'
            + "".join(f"<li>{_e(x)}</li>" for x in headline(e)) + "</ul>" + roofline_svg(e)
            + f'<table class="data sortable"><thead><tr>{head}</tr></thead>'
            + f'<tbody>{"".join(rows)}</tbody></table>'
            + "</section>")
