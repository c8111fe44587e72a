"""bench's "Against the peers" section (pipeline.bench.peers): per model and size, ncnn, OpenVINO, ONNX Runtime and
PyTorch eager on the same weights beside `--precision auto`'s pick, with its ratio to the fastest and the goal."""
from __future__ import annotations

from pipeline.htmlreport import Code, Heading, para
from pipeline.report.tables import speedup, table


def _fidelity(r: dict) -> str:
    if r.get("reference"):
        return "reference"
    return "identical" if r["fidelity_db"] is None else f"{r['fidelity_db']:.1f}"


def peers_blocks(doc: dict) -> list:
    """The section's blocks; a one-line reason per model without peers; nothing when neither is in the doc."""
    sections, not_run = doc.get("peers") or [], doc.get("peers_not_run") or []
    if not sections and not not_run:
        return []
    blocks = [Heading("Against the peers: the same weights in the runtimes a user would pick")]
    for p in sections:
        if p.get("kind") == "nncf":
            blocks += _nncf_blocks(p)
            continue
        blocks.append(para(
            f"{p['model']}: each runtime on the same held-out crop, timed round-robin ({p['repeats']} repeats, "
            f"medians; {p['threads']} threads for ncnn and PyTorch, OpenVINO and ONNX Runtime at their defaults). "
            "Fidelity = PSNR dB against PyTorch fp32's output on the same input. Ours is what ",
            Code("--precision auto"), f" loads ({p['backend']} {p['precision']}); goal: "
            f">= {p['goal_ratio']:g}x the fastest peer at >= {p['fidelity_floor_db']:g} dB ("
            + ("this CPU has an int8 dot product: VNNI or AMX" if p["cpu_has_int8_dot"] else "AVX2-only CPU")
            + ")."))
        rows = []
        for s in p["sizes"]:
            for r in s["rows"]:
                ours = r["runtime"] == "ours"
                rows.append([f"{s['size']}x{s['size']}", r["runtime"], r["describe"], r["median_ms"], _fidelity(r),
                             speedup(s["ratio"]) if ours else "",
                             ("met" if s["meets_goal"] else "MISSED") if ours else ""])
        blocks.append(table(["input", "runtime", "what", "median ms", "fidelity dB", "vs fastest peer", "goal"],
                            rows))
    blocks += [para(line) for line in not_run]
    return blocks


def _nncf_blocks(p: dict) -> list:
    """Our model against OpenVINO + NNCF's default int8: ms medians and each one's PSNR-Y loss against its fp32."""
    intro = para(
        f"{p['model']}: OpenVINO + NNCF's default int8 (nncf.quantize at its defaults on our fp32 export, compiled "
        f"at OpenVINO's defaults) and ours on the same held-out crop, timed round-robin ({p['repeats']} repeats, "
        f"medians). Loss = {p['loss_measure']}. Ours is what ", Code("--precision auto"),
        f" loads ({p['backend']} {p['precision']}); goal: >= {p['goal_ratio']:g}x NNCF's speed at <= "
        f"{p['loss_budget_db']:g} dB lost ("
        + ("this CPU has an int8 dot product: VNNI or AMX" if p["cpu_has_int8_dot"] else "AVX2-only CPU") + ").")
    rows = []
    for s in p["sizes"]:
        for r in s["rows"]:
            ours = r["runtime"] == "ours"
            rows.append([f"{s['size']}x{s['size']}", r["runtime"], r["describe"], r["median_ms"],
                         f"{r['loss_db']:.3f}", speedup(s["ratio"]) if ours else "",
                         ("met" if s["meets_goal"] else "MISSED") if ours else ""])
    return [intro, table(["input", "runtime", "what", "median ms", "PSNR-Y loss dB", "vs NNCF int8", "goal"], rows)]
