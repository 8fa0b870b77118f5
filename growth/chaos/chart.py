"""The run as a picture: deliveries over time, with every fault marked."""

from __future__ import annotations

from pathlib import Path

from growth.chaos.fleet import Event
from growth.chaos.receiver import ACCEPTED, Received

MARKS = {  # event kind -> (colour, line width, label)
    "kill": ("#d62728", 0.8, "SIGKILL + restart"),
    "sigterm": ("#ff7f0e", 2.0, "SIGTERM"),
    "db-restart": ("#9467bd", 3.0, "PostgreSQL restart"),
}


def draw(path: Path, *, received: list[Received], events: list[Event], started: float,
         title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    delivered = sorted(r.at - started for r in received if r.verdict == ACCEPTED)
    figure, axes = pyplot.subplots(figsize=(10, 4.5), dpi=110)
    axes.plot(delivered, range(1, len(delivered) + 1), color="#1f77b4", linewidth=1.6,
              label="messages delivered")
    labelled = set()
    for event in events:
        if event.kind not in MARKS:
            continue
        colour, width, label = MARKS[event.kind]
        axes.axvline(event.at - started, color=colour, linewidth=width, alpha=0.6,
                     label=None if event.kind in labelled else label)
        labelled.add(event.kind)
    axes.set_xlabel("seconds since start")
    axes.set_ylabel("recipients delivered")
    axes.set_title(title)
    axes.grid(alpha=0.3)
    axes.legend(loc="upper left")
    figure.tight_layout()
    figure.savefig(path)
    pyplot.close(figure)
