"""Matplotlib figures of a benchmark results document (`utils.evaluation.benchmark.run_benchmark`) and of acceptance
statistics (`utils.evaluation.acceptance`), a question each."""

from __future__ import annotations

__all__ = ["plot_tokens_per_step_histogram", "plot_conditional_acceptance", "plot_acceptance_by_position",
           "plot_sweep", "plot_configurations", "plot_time_breakdown", "plot_reliability", "plot_threshold_sweep",
           "plot_glyph_confusion"]


def _axes(ax, title: str):
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(8, 4.5))
    ax.set_title(title)
    ax.grid(alpha=0.3)
    return ax


def _drafted(results: dict) -> list[dict]:
    return [config for config in results["configurations"] if config["draft"] is not None]


def plot_tokens_per_step_histogram(config: dict, ax=None):
    """How many tokens each step emitted: a mass at 1 means the draft's first token is often wrong."""
    ax = _axes(ax, f"Tokens per step: {config['name']}")
    counts = config["tokens_per_step_histogram"]
    ax.bar(range(len(counts)), counts)
    ax.set_xlabel("tokens emitted in the step (accepted + 1)")
    ax.set_ylabel("steps")
    return ax


def plot_conditional_acceptance(results: dict, configs: list[dict] | None = None, ax=None):
    """P(draft position k accepted | positions before it accepted), per configuration, with the counts behind
    each point (a rate from 3 reached positions says little)."""
    ax = _axes(ax, "Acceptance by draft position (labels: accepted / reached)")
    for config in configs or _drafted(results):
        rows = [row for row in config["conditional_acceptance"] if row["rate"] is not None]
        positions, rates = [row["position"] for row in rows], [row["rate"] for row in rows]
        line, = ax.plot(positions, rates, marker="o", label=config["name"])
        for row in rows:
            ax.annotate(f"{row['accepted']}/{row['reached']}", (row["position"], row["rate"]), fontsize=8,
                        textcoords="offset points", xytext=(0, 6), ha="center", color=line.get_color())
    ax.set_xlabel("draft position k")
    ax.set_ylabel("P(accepted | positions before accepted)")
    ax.set_ylim(0, 1.15)
    ax.legend(fontsize=8, loc="lower left")
    return ax


def plot_acceptance_by_position(curves: dict[str, list[dict]], ax=None):
    """The share of steps that accepted draft position k among those that verified it, one line per way of drafting
    (`utils.evaluation.acceptance.acceptance_by_position` rows by name): how fast it falls along the block."""
    ax = _axes(ax, "Acceptance along the block: share of steps that accepted draft position k")
    for name, rows in curves.items():
        ax.plot([row["position"] for row in rows], [row["share"] for row in rows], marker="o", label=name)
    ax.set_xticks(sorted({row["position"] for rows in curves.values() for row in rows}))
    ax.set_xlabel("draft position k in the block")
    ax.set_ylabel("accepted / verified at position k")
    ax.set_ylim(0, 1.05)
    ax.legend(fontsize=8, loc="lower left")
    return ax


def plot_sweep(results: dict, draft_name: str, ax=None):
    """Speedup and tokens per step against num_assistant_tokens, for one draft's Top-K runs."""
    ax = _axes(ax, f"Draft tokens per step: {draft_name}")
    runs = sorted((config for config in _drafted(results)
                   if config["draft"].endswith(draft_name) and config["markov_head_top_k"] != 0
                   and config["num_assistant_tokens"] is not None), key=lambda config: config["num_assistant_tokens"])
    sizes = [config["num_assistant_tokens"] for config in runs]
    first = ax.plot(sizes, [config["mean_tokens_per_step"] for config in runs], marker="o", color="C0",
                    label="tokens per step (left)")
    ax.set_xlabel("num_assistant_tokens")
    ax.set_ylabel("tokens per step")
    right = ax.twinx()
    second = right.plot(sizes, [config["speedup"] for config in runs], marker="s", color="C1",
                        label="speedup vs target alone (right)")
    right.axhline(1.0, color="C1", linewidth=0.8, linestyle=":")
    right.set_ylabel("speedup (x)")
    ax.legend(first + second, [line.get_label() for line in first + second], fontsize=8, loc="upper left")
    return ax


def plot_configurations(results: dict, configs: list[str], title: str, ax=None):
    """Tokens per step and speedup of the named configurations side by side (formats, Markov computations)."""
    import numpy as np

    ax = _axes(ax, title)
    chosen = [config for config in results["configurations"] if config["name"] in configs]
    x = np.arange(len(chosen))
    bars = ax.bar(x - 0.2, [config["mean_tokens_per_step"] for config in chosen], 0.4, color="C0",
                  label="tokens per step (left)")
    ax.set_ylabel("tokens per step")
    right = ax.twinx()
    speed = right.bar(x + 0.2, [config["speedup"] for config in chosen], 0.4, color="C1",
                      label="speedup vs target alone (right)")
    right.axhline(1.0, color="C1", linewidth=0.8, linestyle=":")
    right.set_ylabel("speedup (x)")
    ax.set_xticks(x, [config["name"] for config in chosen], rotation=15, ha="right", fontsize=8)
    ax.legend([bars, speed], [bars.get_label(), speed.get_label()], fontsize=8, loc="upper left",
              bbox_to_anchor=(1.12, 1.0))
    return ax


def plot_time_breakdown(results: dict, ax=None):
    """Where the time goes, per generated token: vision, prefill, draft, Markov head, verification, other."""
    import numpy as np

    ax = _axes(ax, "Time per generated token")
    configs = results["configurations"]
    stages = list(configs[0]["time_breakdown_s"])
    bottom = np.zeros(len(configs))
    for stage in stages:
        values = np.array([1000 * c["time_breakdown_s"][stage] / c["generated_tokens"] for c in configs])
        ax.bar(range(len(configs)), values, bottom=bottom, label=stage)
        bottom += values
    ax.set_xticks(range(len(configs)), [c["name"] for c in configs], rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("ms per generated token")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return ax


def plot_reliability(config: dict, ax=None):
    """Confidence head calibration: predicted acceptance against observed, per confidence bin."""
    ax = _axes(ax, f"Confidence head: {config['name']} (AUC {config['confidence']['auc'] or float('nan'):.2f})")
    bins = [b for b in config["confidence"]["reliability"] if b["count"]]
    ax.plot([0, 1], [0, 1], color="gray", linestyle="--", linewidth=0.8, label="perfectly calibrated")
    ax.scatter([b["predicted"] for b in bins], [b["observed"] for b in bins],
               s=[10 + 2 * b["count"] for b in bins], label="bins (size = count)")
    ax.set_xlabel("predicted acceptance")
    ax.set_ylabel("observed acceptance")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1.05)
    ax.legend(fontsize=8)
    return ax


def plot_threshold_sweep(config: dict, *, default: float, times: list[float] | None = None, ax=None):
    """What each confidence threshold would have verified and kept, replayed on runs that verified every draft
    (`confidence.threshold_sweep`): drafts verified and tokens per step against the threshold, `default` marked;
    with `times` (`utils.evaluation.benchmark.threshold_sweep_times`), the estimated milliseconds per token on a
    second axis."""
    ax = _axes(ax, f"Confidence threshold, replayed: {config['name']}")
    sweep = config["confidence"]["threshold_sweep"]
    thresholds = [row["threshold"] for row in sweep]
    lines = ax.plot(thresholds, [row["drafts verified at threshold"] / row["steps"] for row in sweep], marker="o",
                    label="drafts verified per step")
    lines += ax.plot(thresholds, [1 + row["accepted drafts at threshold"] / row["steps"] for row in sweep],
                     marker="s", label="tokens per step")
    lines.append(ax.axvline(default, color="gray", linestyle="--", linewidth=0.8,
                            label=f"default threshold ({default:g})"))
    ax.set_xlabel("confidence threshold")
    ax.set_ylabel("per drafting step")
    ax.set_ylim(0, None)
    if times is not None:
        time_axis = ax.twinx()
        lines += time_axis.plot(thresholds, times, color="tab:red", marker="^",
                                label="ms per token (estimated from this run's stage times)")
        time_axis.set_ylabel("ms per token")
        time_axis.set_ylim(0, None)
    ax.legend(handles=lines, fontsize=8)
    return ax


def plot_glyph_confusion(confusion, ax=None):
    """What each look-alike character of the pages was read as (`utils.evaluation.glyph_confusion.GlyphConfusion`), as
    a share of its occurrences: a diagonal of 1 is a reader that tells them apart; any other cell is a confusion,
    labelled with its count."""
    import numpy as np

    rows, columns, table = confusion.matrix()
    shares = table / np.maximum(table.sum(axis=1, keepdims=True), 1)
    ax = _axes(ax, f"Look-alike glyphs: what each was read as ({confusion.characters()} characters)")
    ax.grid(False)
    image = ax.imshow(shares, cmap="Blues", vmin=0, vmax=1, aspect="auto")
    for row, column in zip(*np.nonzero(table)):
        if rows[row] != columns[column]:
            ax.text(column, row, str(table[row, column]), ha="center", va="center", fontsize=7, color="crimson")
    ax.set_xticks(range(len(columns)), columns, fontsize=8)
    ax.set_yticks(range(len(rows)), rows, fontsize=8)
    ax.set_xlabel("read as")
    ax.set_ylabel("on the page")
    ax.figure.colorbar(image, ax=ax, label="share of the character's occurrences")
    return ax
