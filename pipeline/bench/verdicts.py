"""What a bench run must not leave unsaid: each goal met or MISSED, and each measurement whose repeats disagree.

    goal_mark(goal, met) -> str         'goal <= 8' or 'goal <= 8: MISSED', for the line that prints the value
    spread(values) -> float | None      the ratio of the slowest repeat to the fastest
    noise_mark(values, unit) -> str     '' or '; NOISY: repeats 24.3-42.6 ms (1.75x apart)', past NOISE_RATIO
    goals(doc) -> [dict]                every goal the document's rows were held to: what, value, goal, met
    noisy(doc) -> [str]                 every row whose repeats differ by more than NOISE_RATIO
    closing_lines(doc) -> [str]         both, for the console's last lines and the report's section

A shared 2-core machine times one configuration at 24.3 ms and 42.6 ms in one run; a reader comparing medians needs
to know which figures that touched, and a missed goal needs saying where it is printed, not only in the JSON.
"""
from __future__ import annotations

NOISE_RATIO = 1.5  # slowest repeat over the fastest: past it the median is flagged, not trusted to a few percent


def goal_mark(goal: str, met: bool | None) -> str:
    """'goal <= 8' when met (or not judged), 'goal <= 8: MISSED' when not."""
    return f"goal {goal}" + (": MISSED" if met is False else "")


def spread(values) -> float | None:
    """max / min of the positive repeats, or None with fewer than two."""
    vals = [float(v) for v in values or () if v is not None and v > 0]
    return max(vals) / min(vals) if len(vals) >= 2 else None


def noise_mark(values, unit: str = "ms", scale: float = 1.0) -> str:
    """'' or '; NOISY: repeats 24.3-42.6 ms (1.75x apart, over 1.5x)': values (times 'scale') past NOISE_RATIO."""
    ratio = spread(values)
    if ratio is None or ratio <= NOISE_RATIO:
        return ""
    vals = [float(v) * scale for v in values if v is not None and v > 0]
    return (f"; NOISY: repeats {min(vals):.3g}-{max(vals):.3g} {unit} ({ratio:.2f}x apart, over "
            f"{NOISE_RATIO:g}x)")


def _row_goals(doc: dict) -> list[dict]:
    out = []
    for a in doc.get("auto", []):
        if a.get("meets_floor") is not None:
            out.append(_goal(f"auto ({a['backend']}) on {a['model']} vs the eager loop", f"x{a['speedup']:.2f}",
                             f">= x{a['floor']:g}", a["meets_floor"]))
    for a in doc.get("precision_auto", []):
        if a.get("meets_floor") is not None:
            out.append(_goal(f"--precision auto ({a['label']}) on {a['model']} vs the eager loop",
                             f"x{a['speedup']:.2f}", f">= x{a['floor']:g}", a["meets_floor"]))
    out += _peer_goals(doc)
    for r in doc.get("folder", []) + (doc.get("gpu_folder") or []):
        if r.get("meets_goal") is not None:
            out.append(_goal(f"{r['model']} folder run on {r['backend']}, of inference throughput",
                             f"{100 * r['ratio']:.0f} %", f">= {100 * r['goal']:.0f} %", r["meets_goal"]))
    for r in doc.get("output_check", []):
        out.append(_goal(f"{r['model']} NaN/inf check on {r['backend']}, of inference", f"{r['check_pct']:.2f} %",
                         f"<= {r['goal_pct']:g} %", r["meets_goal"]))
    for r in doc.get("video", []):
        if r.get("vs_fp32") is not None and r.get("floor") is not None:
            out.append(_goal(f"{r.get('model', '')} video {r['size']} {r['precision']} vs fp32's fps".strip(),
                             f"x{r['vs_fp32']:.2f}", f">= x{r['floor']:g}", r["vs_fp32"] >= r["floor"]))
        if r.get("of_inference_goal") is not None and r.get("of_inference") is not None:
            out.append(_goal(f"{r.get('model', '')} video {r['size']} at --precision auto ({r['backend']} "
                             f"{r['precision']}), of pure inference's fps", f"{100 * r['of_inference']:.0f} %",
                             f">= {100 * r['of_inference_goal']:.0f} %", r["of_inference"] >= r["of_inference_goal"]))
    return out


def _peer_goals(doc: dict) -> list[dict]:
    """Ours against the fastest peer at each size (Real-ESRGAN's), or against OpenVINO + NNCF's default int8 within
    a PSNR-Y loss budget (kind "nncf": our SRCNNs)."""
    out = []
    for p in doc.get("peers", []):
        for s in p["sizes"]:
            what = (f"--precision auto ({p['backend']} {p['precision']}) on {p['model']} at {s['size']}^2 vs "
                    + ("OpenVINO + NNCF default int8" if p.get("kind") == "nncf" else
                       f"the fastest peer ({s['fastest_peer']})"))
            if p.get("kind") == "nncf":
                peer = next(r for r in s["rows"] if r["runtime"] == s["fastest_peer"])
                value = f"x{s['ratio']:.2f} at {s['loss_db']:.3f} dB lost (NNCF: {peer['loss_db']:.3f} dB)"
                goal = f">= x{p['goal_ratio']:g} at <= {p['loss_budget_db']:g} dB"
            else:
                fid = "exact" if s["fidelity_db"] is None else f"{s['fidelity_db']:.1f} dB"
                value = f"x{s['ratio']:.2f} at {fid}"
                goal = f">= x{p['goal_ratio']:g} at >= {p['fidelity_floor_db']:g} dB"
            out.append(_goal(what, value, goal, s["meets_goal"]))
    return out


def _host_goals(doc: dict) -> list[dict]:
    words = {"serial_cpu_ms_per_mpix": "driving thread, ms CPU per output MPix",
             "host_cpu_ms_per_mpix": "process, ms CPU per output MPix", "of_encoder": "of the encoder alone"}
    out = []
    for r in doc.get("host_side") or []:
        for key, goal in r.get("goals", {}).items():
            if r.get(key) is None:
                continue
            higher = key == "of_encoder"
            value = f"{100 * r[key]:.0f} %" if higher else f"{r[key]:.2f}"
            out.append(_goal(f"host side, {r['kind']} (stand-in device): {words.get(key, key)}", value,
                             f">= {100 * goal:.0f} %" if higher else f"<= {goal:g}",
                             r[key] >= goal if higher else r[key] <= goal))
    return out


def _goal(what: str, value: str, goal: str, met: bool) -> dict:
    return {"what": what, "value": value, "goal": goal, "met": bool(met)}


def goals(doc: dict) -> list[dict]:
    """Every goal the document's rows were held to, in the order they ran."""
    return _row_goals(doc) + _host_goals(doc)


def noisy(doc: dict) -> list[str]:
    """Each row whose repeats differ by more than NOISE_RATIO: the timed calls of one configuration, a peer's
    round-robin repeats, a folder run's repeats, the host side's runs."""
    out = []
    for r in doc.get("results", []):
        mark = noise_mark(r.get("latencies_ms"))
        if mark:
            out.append(f"{r['model']} {r['sweep']} {r['size']}^2 x{r['scale']:g} b{r['batch']} {r['backend']}{mark}")
    for p in doc.get("peers", []):
        for s in p["sizes"]:
            out += [f"{p['model']} peers {s['size']}^2 {r['runtime']}{mark}" for r in s["rows"]
                    if (mark := noise_mark(r.get("latencies_ms")))]
    for r in doc.get("folder", []):
        mark = noise_mark(r.get("runs_folder_s"), "s")
        if mark:
            out.append(f"{r['model']} folder run on {r['backend']}{mark}")
    for r in doc.get("host_side") or []:
        mark = noise_mark(r.get("runs_host_cpu_s"), "s CPU")
        if mark:
            out.append(f"host side, {r['kind']} (stand-in device){mark}")
    return out


def closing_lines(doc: dict) -> list[str]:
    """The goals (MISSED first) and the noisy rows, as the console's last lines."""
    gs = sorted(goals(doc), key=lambda g: g["met"])
    lines = [f"goals: {sum(not g['met'] for g in gs)} MISSED of {len(gs)}" if gs else "goals: none measured"]
    lines += [f"  {'MISSED' if not g['met'] else 'met   '} {g['what']}: {g['value']} (goal {g['goal']})" for g in gs]
    noise = noisy(doc)
    lines.append(f"noise: {len(noise)} row(s) whose repeats differ by more than {NOISE_RATIO:g}x"
                 + (" (their medians may be off by tens of percent)" if noise else ""))
    lines += [f"  {n.replace('; NOISY: ', ': ')}" for n in noise]
    return lines
