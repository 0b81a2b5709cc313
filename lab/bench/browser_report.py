"""The browser benchmark's page and figure (lab/bench/browser.py measures)."""

from __future__ import annotations

from typing import Any


def _kb(n: int) -> str:
    return f"{n / 1024:,.1f}"


def _weight_table(rows: list[dict[str, Any]], total: dict[str, int]) -> list[str]:
    lines = ["| file | raw KiB | gzip -9 KiB | sent KiB |", "|---|---|---|---|"]
    lines += [f"| `{r['file']}` | {_kb(r['raw'])} | {_kb(r['gzip'])} | {_kb(r['sent'])} |" for r in rows]
    lines.append(
        f"| **total** | **{_kb(total['raw'])}** | **{_kb(total['gzip'])}** | **{_kb(total['sent'])}** |"
    )
    return lines


def _gaps(stats: dict[str, Any]) -> str:
    if not stats["frames"]:
        return "no frames"
    return f"{stats['p50_ms']} / {stats['p95_ms']} / {stats['max_ms']} ms ({stats['frames']} frames)"


def report(r: dict[str, Any]) -> str:
    m, w, g, t, f = r["machine"], r["weight"], r["gradient"], r["training"], r["frames"]
    reached = (
        f"not reached within {t['cap_s']:.0f} s (censored; best {t['best_accuracy']})"
        if t["censored"]
        else f"**{t['seconds_to_target']} s** ({t['versions']} versions evaluated by then)"
    )
    met = f["busy"]["p95_ms"] is not None and f["busy"]["p95_ms"] <= f["target_p95_ms"]
    lines = [
        "# The browser device",
        "",
        f"`{r['command']}`: the coordinator's /device/ page ({r['runtime'].split(',')[0]}) in chromium "
        f"{r['chromium']} at",
        "phone size (390×844, touch, Android Chrome's user agent, one browser profile per phone), against",
        "`fleet serve` processes on loopback. How it works and its limits: "
        "[browser-device.md](../browser-device.md).",
        "",
        f"Machine: {m['cpu']}, {m['cores']} cores, load {m['load_average']}, {m['date']}. The phones share "
        "this machine's CPUs: the times are a desktop's, not a phone's.",
        "",
        "## Page weight on a first visit",
        "",
        "Every file the first phone loaded from opening the page until its first task was pushed (the",
        "service worker's precache fetches the same files: counted once). *sent*: what the coordinator sends",
        "a browser that accepts gzip (it has gzip copies of the vendored runtime, made by `make vendor`; the",
        "rest goes as is).",
        "",
        *_weight_table(w["app"], w["app_total"]),
        "",
        "The model's files, fetched once per model (the parameters: once per task, one version shown):",
        "",
        *_weight_table(w["model"], w["model_total"]),
        "",
        "## Gradient: the page's worker against the Python client",
        "",
        f"The CNN's training graph on {g['batch']} real digits at perturbed parameters, in the page's Web",
        "Worker (ONNX Runtime Web, WebAssembly, one thread) and in client.GradientSession (onnxruntime, one",
        f"thread): max |diff| **{g['max_abs_diff']:.2e}** (target ≤ 1e-5), loss {g['loss_browser']:.6f} vs "
        f"{g['loss_python']:.6f} (|diff| {g['loss_diff']:.1e}). Compute time, median of {g['repeats']}: "
        f"browser {g['browser_ms_median']} ms, Python {g['python_ms_median']} ms.",
        "",
        f"## {t['devices']} phones to {t['target']:.0%}",
        "",
        f"{t['devices']} phone profiles, each holding its IID shard of real MNIST "
        f"({', '.join(str(n) for n in t['examples_per_device'])} digits) in the page's store, joined at once",
        f"(batch at most {t['max_batch']}, {t.get('strategy') or 'FedBuffEqual'} at learning rate "
        f"{t.get('learning_rate', 0.1)}; the coordinator evaluates every",
        f"10 versions on 1,000 held-out digits). Time to {t['target']:.0%}: {reached}.",
        "",
        "| phone | first task (s after joining) | tasks | last compute ms |",
        "|---|---|---|---|",
    ]
    for i, model in enumerate(t["device_models"]):
        compute = t["last_compute_ms"][i]
        lines.append(
            f"| {model} | {t['first_task_s'][i]} | {t['tasks_per_device'][i]} | "
            f"{'–' if compute is None else round(compute, 1)} |"
        )
    lines += [
        "",
        "## Frame gaps while the worker computes",
        "",
        f"One phone alone, holding {f['examples']} digits, the coordinator sizing its batch to a "
        f"{f['slo_ms']:.0f} ms SLO (batch cap {f['max_batch']}): median batch {f['batch_median']}, median "
        f"compute {f['compute_ms_median']} ms, {f['tasks']} tasks in {f['seconds']:.0f} s. Every",
        "requestAnimationFrame interval was recorded with whether a computation was in the worker.",
        "",
        "| frames | p50 / p95 / max |",
        "|---|---|",
        f"| while computing ({f['busy_share']:.0%} of frames) | {_gaps(f['busy'])} |",
        f"| otherwise | {_gaps(f['idle'])} |",
        "",
        f"Target: p95 ≤ {f['target_p95_ms']:.0f} ms while computing: **{'met' if met else 'missed'}**.",
    ]
    return "\n".join(lines) + "\n"


def plot(r: dict[str, Any]) -> Any:
    from lab.render import figure

    fig, (left, right) = figure(2, width=5.2, height=3.6)
    t, f = r["training"], r["frames"]
    curve = t["accuracy_curve"]
    if curve:
        left.plot([c[0] for c in curve], [c[2] for c in curve], marker=".", color="#1d3557")
    left.axhline(t["target"], color="#b8261f", linestyle="--", linewidth=1)
    left.set(xlabel="seconds since the phones joined", ylabel="test accuracy", ylim=(0, 1))
    left.set_title(f"{t['devices']} browser phones, CNN on MNIST", fontsize=10)
    edges = ["<10", "10–20", "20–30", "30–40", "40–50", "50–75", "75–100", "100–200", "200–500", "≥500"]
    right.bar(range(len(edges)), f["histogram"], color="#1b7f4a")
    right.set_xticks(range(len(edges)), edges, rotation=45, fontsize=7)
    right.axvline(4.5, color="#b8261f", linestyle="--", linewidth=1)
    right.set_yscale("log")  # the rare long gaps show
    right.set(xlabel="frame gap while computing (ms)", ylabel="frames (log)")
    right.set_title(f"batch sized to a {f['slo_ms']:.0f} ms SLO", fontsize=10)
    return fig
