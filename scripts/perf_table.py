"""Turns the criterion results of `cargo bench --bench merge` into the tables
and the plot of docs/PERFORMANCE.md.

Reads target/criterion/<group>/<function>/<id>/new/estimates.json (the median
of each benchmark), prints Markdown tables of medians and ratios measured in
the same run, the scaling exponents, and writes docs/perf_inline_compact.svg.

Usage (from the repository root, after `cargo bench --bench merge`):
    python3 scripts/perf_table.py > /tmp/tables.md
"""
import json
import math
import os

ROOT = os.path.join("target", "criterion")


def median(group, function, bench_id):
    # criterion writes the id "32k/u8/n1" as the directory "32k_u8_n1".
    path = os.path.join(ROOT, group, function, bench_id.replace("/", "_"), "new", "estimates.json")
    with open(path) as f:
        return json.load(f)["median"]["point_estimate"]  # nanoseconds


def fmt(ns):
    if ns >= 1e6:
        return f"{ns / 1e6:.2f} ms"
    return f"{ns / 1e3:.1f} µs"


def by_handle():
    print("| choices x segments | merge | baseline | parse | baseline / merge | merge / parse |")
    print("|---|---:|---:|---:|---:|---:|")
    for c in (1, 8, 64):
        for s in (2, 32, 256):
            i = f"{c}x{s}"
            m, b, p = (median("by_handle", f, i) for f in ("merge", "baseline", "parse"))
            print(f"| {i} | {fmt(m)} | {fmt(b)} | {fmt(p)} | {b / m:.1f}x | {100 * m / p:.1f}% |")


def merged_bytes(positions, itemsize, n, form):
    rows = positions + positions // 2 - 1 if form == "compact" else positions
    return rows * 384 * itemsize * n


def inline(form):
    group = f"inline_{form}"
    print(f"| positions / dtypes / n | merge | baseline | parse | baseline / merge | merge / parse | merged rows / s |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for k in (1, 32, 128):
        for dtypes, item in (("u8", 1), ("u16", 2), ("u8_u16", 2)):
            for n in (1, 8):
                i = f"{k}k/{dtypes}/n{n}"
                m, b, p = (median(group, f, i) for f in ("merge", "baseline", "parse"))
                gbps = merged_bytes(k * 1024, item, n, form) / m  # bytes per ns = GB/s
                print(f"| {i} | {fmt(m)} | {fmt(b)} | {fmt(p)} | {b / m:.1f}x | {100 * m / p:.0f}% | {gbps:.2f} GB/s |")


def exponents(form):
    group = f"inline_{form}"
    print(f"| {form}: dtypes / n | exponent 1k -> 32k | exponent 32k -> 128k |")
    print("|---|---:|---:|")
    for dtypes in ("u8", "u16", "u8_u16"):
        for n in (1, 8):
            t = [median(group, "merge", f"{k}k/{dtypes}/n{n}") for k in (1, 32, 128)]
            e1 = math.log(t[1] / t[0]) / math.log(32)
            e2 = math.log(t[2] / t[1]) / math.log(4)
            print(f"| {dtypes} / n{n} | {e1:.2f} | {e2:.2f} |")


def svg(form, path):
    """Log-log plot of time against positions, merge and baseline, n = 1."""
    group = f"inline_{form}"
    series = []
    colors = {"merge": "#1f77b4", "baseline": "#d62728"}
    dashes = {"u8": "", "u16": "6,3", "u8_u16": "2,3"}
    for function in ("merge", "baseline"):
        for dtypes in ("u8", "u16", "u8_u16"):
            pts = [(k * 1024, median(group, function, f"{k}k/{dtypes}/n1")) for k in (1, 32, 128)]
            series.append((f"{function} {dtypes}", colors[function], dashes[dtypes], pts))
    w, h, pad = 640, 420, 60
    xs = [math.log10(x) for _, _, _, pts in series for x, _ in pts]
    ys = [math.log10(y / 1e6) for _, _, _, pts in series for _, y in pts]
    x0, x1 = min(xs), max(xs)
    y0, y1 = math.floor(min(ys)), math.ceil(max(ys))
    sx = lambda x: pad + (math.log10(x) - x0) / (x1 - x0) * (w - 2 * pad)
    sy = lambda y: h - pad - (math.log10(y / 1e6) - y0) / (y1 - y0) * (h - 2 * pad)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
           f'<rect width="{w}" height="{h}" fill="white"/>',
           f'<text x="{w / 2}" y="20" text-anchor="middle" font-size="14">inline {form}: median time per merge (n = 1, 48 x 8 rows), log-log</text>',
           f'<line x1="{pad}" y1="{h - pad}" x2="{w - pad}" y2="{h - pad}" stroke="black"/>',
           f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{h - pad}" stroke="black"/>']
    for k in (1, 32, 128):
        x = sx(k * 1024)
        out.append(f'<text x="{x}" y="{h - pad + 18}" text-anchor="middle">{k}k</text>')
    out.append(f'<text x="{w / 2}" y="{h - 15}" text-anchor="middle">decode positions (prompt = half)</text>')
    for e in range(y0, y1 + 1):
        y = h - pad - (e - y0) / (y1 - y0) * (h - 2 * pad)
        out.append(f'<line x1="{pad - 4}" y1="{y}" x2="{w - pad}" y2="{y}" stroke="#ddd"/>')
        out.append(f'<text x="{pad - 8}" y="{y + 4}" text-anchor="end">{10 ** e:g} ms</text>')
    for i, (label, color, dash, pts) in enumerate(series):
        d = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in pts)
        out.append(f'<polyline points="{d}" fill="none" stroke="{color}" stroke-width="2" stroke-dasharray="{dash}"/>')
        ly = pad + 14 * i
        out.append(f'<line x1="{pad + 10}" y1="{ly}" x2="{pad + 40}" y2="{ly}" stroke="{color}" stroke-width="2" stroke-dasharray="{dash}"/>')
        out.append(f'<text x="{pad + 46}" y="{ly + 4}">{label}</text>')
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def main():
    print("### By handle\n")
    by_handle()
    for form in ("compact", "npy"):
        print(f"\n### Inline {form}\n")
        inline(form)
    print("\n### Scaling (time ~ size^exponent, merge)\n")
    exponents("compact")
    print()
    exponents("npy")
    enc = median("target_16k_32k_u8", "base64_crate_encode", "")
    m = median("target_16k_32k_u8", "merge", "")
    print(f"\n### Target case (prompt 16k, decode 32k, uint8, n = 1)\n")
    print(f"merge {fmt(m)}, one base64-crate encode of the merged rows {fmt(enc)}: merge / encode = {m / enc:.2f}")
    svg("compact", os.path.join("docs", "perf_inline_compact.svg"))


if __name__ == "__main__":
    main()
