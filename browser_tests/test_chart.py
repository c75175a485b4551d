"""render/chart.js in a bare page (no JupyterLab, seconds): a scene checked in Python is drawn as SVG with its
text alternative beside it, labels only where they fit, CJK measured as CJK, a new scene redraws, and a
ChartPlayer steps in the browser. The lessons' charts are exercised in JupyterLab by test_lessons.py."""
from __future__ import annotations

import json

import pytest

from simlab.render.chart import ESM, THEME, arrow, axis, chart_player, circle, line, panel, rect, scene, text
from simlab.render.style import BLUE, INK, ORANGE, PAPER

# a fake anywidget model: get / set / on / save_changes, enough for chart.js's render()
HARNESS = r"""
async ([src, state]) => {
  const mod = await import(URL.createObjectURL(new Blob([src], { type: "text/javascript" })));
  const handlers = {};
  const model = { state, get: k => model.state[k], save_changes() {},
                  set(k, v) { model.state[k] = v; (handlers["change:" + k] || []).forEach(f => f()); },
                  on(ev, f) { (handlers[ev] ||= []).push(f); } };
  const el = document.createElement("div");
  document.body.appendChild(el);
  mod.default.render({ model, el });
  window.chart = { model, el };
}
"""


def bars(label: str) -> dict:
    marks = [rect(0, 1, 0, 3, fill=BLUE, label=label, label_color=PAPER, tip="params 3 GB"),
             rect(1.2, 1.25, 0, 2, fill=ORANGE, label="too wide to fit"),
             text(0.5, 3, "3.00", baseline="bottom", bold=True), line([0, 2], [1, 1], INK, dash=True),
             circle(1.5, 2.5, 10, PAPER, stroke=INK, label="r0"), arrow(0, 0.5, 2, 0.5, INK, bend=0.15)]
    return scene(marks, title="memory per GPU", x=axis(0, 2, "", [(0.5, "stage 0\n(DP)"), (1.5, "stage 1")]),
                 y=axis(0, 3.5, "GB", [(0, "0"), (3, "3")]), legend=[("params", BLUE), ("model", BLUE, "hatch")],
                 alt="stage 0: 3.00 GB\nstage 1: 2.00 GB")


def open_chart(page, state: dict) -> None:
    page.set_content("<html><body></body></html>")
    page.evaluate(HARNESS, [ESM, json.loads(json.dumps(state))])


@pytest.mark.parametrize("label", ["params", "参数"])
def test_a_scene_is_drawn_with_its_text_alternative_beside_it(page, artifacts, label):
    errors = []
    page.on("pageerror", lambda err: errors.append(str(err)))
    open_chart(page, {"scene": bars(label), "theme": THEME})
    got = page.evaluate("""() => {
      const svg = document.querySelector(".simlab-chart svg.simlab-chart-svg");
      const alt = document.getElementById(svg.getAttribute("aria-describedby"));
      return { role: svg.getAttribute("role"), name: svg.getAttribute("aria-label"),
               alt: alt.textContent, altClass: alt.className, width: +svg.getAttribute("width"),
               rects: svg.querySelectorAll(".simlab-chart-panel > rect").length,
               texts: [...svg.querySelectorAll("text")].map(t => t.textContent),
               tip: svg.querySelector("rect title").textContent, heads: svg.querySelectorAll("marker").length };
    }""")
    assert errors == []
    assert got["role"] == "img" and got["name"] == "memory per GPU" and got["altClass"] == "simlab-chart-alt"
    assert got["alt"] == "stage 0: 3.00 GB\nstage 1: 2.00 GB" and got["tip"] == "params 3 GB"
    assert got["rects"] == 2 and got["heads"] == 1 and got["width"] == 640
    assert label in got["texts"] and "too wide to fit" not in got["texts"]  # a label is drawn only if it fits
    assert {"3.00", "r0", "stage 0(DP)", "GB", "memory per GPU", "model"} <= set(got["texts"])
    page.screenshot(path=str(artifacts / f"chart_{'en' if label == 'params' else 'zh'}.png"))


def test_a_new_scene_redraws_and_a_player_steps_in_the_browser(page):
    two = [bars("params"), scene([rect(0, 1, 0, 1, fill=ORANGE)], x=axis(0, 1), y=axis(0, 1), alt="second")]
    player = chart_player(two, captions=["<b>one</b>", "<b>two</b>"])
    state = {k: getattr(player, k) for k in ("frames", "captions", "value", "theme", "interval_ms", "label_prefix",
                                             "play_label", "pause_label", "prev_label", "next_label")}
    open_chart(page, state)
    alt = "() => document.querySelector('.simlab-chart-alt').textContent"
    assert page.evaluate(alt).startswith("stage 0")
    page.click(".simlab-next")
    assert page.evaluate(alt) == "second" and page.text_content(".simlab-caption") == "two"
    assert page.evaluate("() => window.chart.model.get('value')") == 1 and page.text_content(".simlab-label") == "step 1/1"
    page.click(".simlab-prev")
    assert page.evaluate(alt).startswith("stage 0")
    assert page.get_attribute(".simlab-next", "aria-label") == "next step"


def test_panels_flow_into_rows_and_the_legend_can_stand_right(page):
    p = [panel([rect(0, 1, 0, 1, fill=BLUE)], x=axis(0, 1), y=axis(0, 1), width=300, height=200, title=t)
         for t in ("simulated", "real")]
    open_chart(page, {"scene": scene(panels=p, columns=2, legend=[("params", BLUE)], legend_at="right", alt="x"),
                      "theme": THEME})
    size = page.evaluate("() => { const s = document.querySelector('svg.simlab-chart-svg');"
                         " return [+s.getAttribute('width'), +s.getAttribute('height')]; }")
    assert size[0] > 600 and size[1] == 200  # two panels side by side, the legend right of them


def test_words_past_the_edge_grow_the_drawing_instead_of_being_cut(page):
    """A row label right-aligned left of a hidden axis (lesson 3's "优化器状态") stays whole: the SVG's box grows."""
    marks = [text(0, 0.5, "优化器状态 optimizer state", anchor="end"), rect(0, 1, 0, 1, fill=BLUE)]
    open_chart(page, {"scene": scene(marks, x=axis(0, 1, hidden=True), y=axis(0, 1, hidden=True), width=200,
                                     height=100, alt="x"), "theme": THEME})
    box = page.evaluate("() => document.querySelector('svg.simlab-chart-svg').getAttribute('viewBox')")
    x0, _y0, w, _h = map(float, box.split())
    assert x0 < -150 and w > 350  # the label, about 200 px, to the left of x = 0
