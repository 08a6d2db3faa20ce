"""Graph breaks, read as the growth of torch's ``counters["graph_break"]`` (reason -> count)."""

from __future__ import annotations

from recompprof._torch.versions import torch_info

MAX_TRACKED = 1000  # distinct reason texts remembered; beyond that breaks are counted without text


class GraphBreakReader:
    """Returns the graph breaks (reason, count) recorded since the last read."""

    def __init__(self) -> None:
        self._last: dict[str, int] = {}
        self._last_total = 0
        self.live = False
        self.why_off = ""

    def install(self) -> None:
        info = torch_info()
        if not info.has("graph_breaks"):
            self.why_off = info.why_off("graph_breaks")
            return
        try:
            from torch._dynamo.utils import counters
        except ImportError as exc:
            self.why_off = f"torch._dynamo.utils.counters missing ({exc})"
            return
        self.live = True
        self._last = dict(list(counters["graph_break"].items())[:MAX_TRACKED])
        self._last_total = sum(counters["graph_break"].values())

    def uninstall(self) -> None:
        self.live = False

    def take(self) -> list[tuple[str, int]]:
        if not self.live:
            return []
        from torch._dynamo.utils import counters

        current = counters["graph_break"]
        total = sum(current.values())
        if total < self._last_total:  # counters were cleared (torch._dynamo.reset / counters.clear)
            self._last, self._last_total = {}, 0
        if total == self._last_total:
            return []
        new: list[tuple[str, int]] = []
        for reason, count in current.items():
            before = self._last.get(reason, 0)
            if count > before:
                new.append((reason, count - before))
                if reason in self._last or len(self._last) < MAX_TRACKED:
                    self._last[reason] = count
        untracked = total - self._last_total - sum(n for _, n in new)
        if untracked > 0:
            new.append(("(graph break reason not tracked: too many distinct reasons)", untracked))
        self._last_total = total
        return new
