"""The diagram of one speculative step, drawn with matplotlib: drafting, verification, the accept rule and the
rollback, on symbols (an example step of 5 drafts where 3 are accepted), not on measured tokens.

`python -m utils.notebook.diagram docs/speculative-step.svg` writes the file notebook 07 shows.
"""

from __future__ import annotations

import sys

__all__ = ["draw_speculative_step", "main"]

_COLOURS = {"anchor": "#fff9c4", "mask": "#f5f5f5", "draft": "#e1bee7", "accepted": "#c8e6c9",
            "rejected": "#ffcdd2", "discarded": "#eeeeee", "bonus": "#bbdefb", "target": "#ffffff"}


def _box(axis, x: float, y: float, text: str, kind: str) -> None:
    from matplotlib.patches import FancyBboxPatch

    axis.add_patch(FancyBboxPatch((x - 0.4, y - 0.3), 0.8, 0.6, boxstyle="round,pad=0.02",
                                  facecolor=_COLOURS[kind], edgecolor="#616161", linewidth=0.8))
    axis.text(x, y, text, ha="center", va="center", fontsize=9 if len(text) > 3 else 10,
              fontstyle="italic" if kind != "mask" else "normal")


def _row_label(axis, y: float, title: str, note: str) -> None:
    axis.text(-0.9, y + 0.08, title, ha="right", va="center", fontsize=10, fontweight="bold")
    axis.text(-0.9, y - 0.22, note, ha="right", va="center", fontsize=8, color="#616161")


def draw_speculative_step(*, drafts: int = 5, accepted: int = 3):
    """A figure of one step: block -> Markov walk -> one verification -> accept rule -> rollback.

    Args:
        drafts: the drafts verified in the step.
        accepted: a, the drafts the target accepts (0 <= a <= drafts).
    """
    import matplotlib.pyplot as plt

    if not 0 <= accepted <= drafts:
        raise ValueError(f"accepted={accepted} must be in [0, drafts={drafts}]")
    figure, axis = plt.subplots(figsize=(10, 5.6))
    columns = range(drafts + 1)
    _row_label(axis, 4, "draft block", "one pass of the draft")
    for k in columns:
        _box(axis, k, 4, "anchor" if k == 0 else "mask", "anchor" if k == 0 else "mask")
    _row_label(axis, 3, "Markov walk", "s_k = U_k + W2 W1[prev]")
    for k in range(1, drafts + 1):
        _box(axis, k, 3, f"c{k}", "draft")
        axis.annotate("", xy=(k, 3.3), xytext=(k - 1, 3.7), arrowprops={"arrowstyle": "->", "color": "#9e9e9e"})
        if k > 1:  # prev: the walk conditions c_k on c_(k-1) (on the anchor for c_1)
            axis.annotate("", xy=(k - 0.4, 3), xytext=(k - 0.6, 3), arrowprops={"arrowstyle": "->", "color": "#6a1b9a"})
        axis.text(k + 0.42, 3.32, f"p{k}", fontsize=7, color="#6a1b9a")
    _row_label(axis, 2, "verification", "one target pass")
    for k in columns:
        _box(axis, k, 2, "anchor" if k == 0 else f"c{k}", "anchor" if k == 0 else "draft")
        axis.annotate("", xy=(k, 1.3), xytext=(k, 1.7), arrowprops={"arrowstyle": "->", "color": "#9e9e9e"})
    _row_label(axis, 1, "target argmax", "t_k: the target's next token")
    for k in columns:
        _box(axis, k, 1, f"t{k}", "bonus" if k == accepted else "target")
    _row_label(axis, 0, "accept rule", "keep c_i while c_i = t_(i-1)")
    for k in range(1, drafts + 1):
        kind = "accepted" if k <= accepted else "rejected" if k == accepted + 1 else "discarded"
        _box(axis, k, 0, f"c{k}", kind)
    _box(axis, drafts + 1.3, 0, f"t{accepted}", "bonus")
    axis.text(drafts + 1.3, -0.55, "bonus", ha="center", fontsize=8)
    axis.text(-3.4, -1.05, f"emitted: c1..c{accepted} + t{accepted} = {accepted + 1} tokens.  Rollback: keep the "
              f"first {accepted + 1} of the {drafts + 1} verified positions\nin the KV cache, and rebuild each "
              f"linear-attention state as it was after them.", fontsize=9, ha="left", va="center")
    legend = [("accepted", "accepted"), ("rejected", "first rejected"), ("discarded", "discarded (verified)"),
              ("bonus", "bonus"), ("draft", "draft (p_k: confidence)")]
    for index, (kind, label) in enumerate(legend):
        x = -3.4 + index * 2.1
        axis.add_patch(plt.Rectangle((x, -1.95), 0.25, 0.22, facecolor=_COLOURS[kind], edgecolor="#616161"))
        axis.text(x + 0.32, -1.84, label, fontsize=8, va="center")
    axis.set(xlim=(-3.6, drafts + 2), ylim=(-2.1, 4.5))
    axis.axis("off")
    figure.tight_layout()
    return figure


def main(argv: list[str]) -> int:
    """Writes the diagram to the path given (SVG or PNG, by its suffix)."""
    if len(argv) != 1:
        print("usage: python -m utils.notebook.diagram OUT.svg", file=sys.stderr)
        return 2
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["svg.hashsalt"] = "dspark-step"  # the same ids on every run: a redraw changes no byte
    draw_speculative_step().savefig(argv[0], metadata={"Date": None} if argv[0].endswith(".svg") else None)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
