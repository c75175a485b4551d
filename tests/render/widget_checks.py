"""Checks the widget tests share (not part of simlab: only tests use them)."""
import ipywidgets as w


def off_grid(widget) -> list[str]:
    """The sliders in `widget`'s tree whose value is not on their step grid: the browser would snap each one
    to the grid and sync the snapped value back, so the widget would not start where the lesson says.
    A FloatLogSlider's grid is base**(min + k·step); a linear slider's is min + k·step."""
    import math
    found, todo = [], [widget]
    while todo:
        node = todo.pop()
        todo.extend(getattr(node, "children", ()))
        if isinstance(node, w.FloatLogSlider):
            ks = [(math.log(node.value, node.base) - node.min) / node.step]
        elif isinstance(node, (w.FloatSlider, w.IntSlider, w.FloatRangeSlider, w.IntRangeSlider)):
            values = node.value if isinstance(node.value, tuple) else (node.value,)
            ks = [(v - node.min) / node.step for v in values]
        else:
            continue
        if any(abs(k - round(k)) > 1e-6 for k in ks):
            found.append(f"{node.description or type(node).__name__}={node.value} (step {node.step})")
    return found
