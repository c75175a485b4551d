"""The browser-drawn chart's Python half: builders make the marks the contract names, `validate` refuses every
bad scene in one line naming the part (NaN, inf, an unknown kind or key, a colour not from the palette), a scene
survives a JSON round trip unchanged, and the widgets keep a hint as their text form. chart.js itself is drawn
in a bare browser page by browser_tests/test_chart.py."""
import json
import math

import numpy as np
import pytest

from simlab import i18n
from simlab.render.chart import (
    ESM,
    FONT_PX,
    THEME,
    Chart,
    ChartPlayer,
    arrow,
    axis,
    chart_player,
    circle,
    line,
    panel,
    rect,
    scene,
    text,
    validate,
)
from simlab.render.style import BLUE, FONT_STACK, INK, ORANGE, PAPER

pytestmark = pytest.mark.usefixtures("english_afterwards")  # tests/conftest.py: English again after each test


def bars() -> dict:
    return scene([rect(0, 1, 0, 3, fill=BLUE, label=["params", "p"], tip="3 GB"), text(0.5, 3, "3", baseline="bottom"),
                  line([0, 1], [1, 1], INK, dash=True), circle(0.5, 2, 10, PAPER, stroke=INK, label="r0"),
                  arrow(0, 0, 1, 1, ORANGE, bend=0.15)],
                 title="t", x=axis(0, 1, "x", [(0.5, "a")]), y=axis(0, 3.3, "GB"), legend=[("params", BLUE)],
                 alt="params 3 GB")


def test_builders_make_the_marks_of_the_contract():
    assert rect(0, 1, 2, 3, fill=BLUE) == {"kind": "rect", "x0": 0, "x1": 1, "y0": 2, "y1": 3, "fill": BLUE}
    assert line([0, 1], (2, 3), INK) == {"kind": "line", "x": [0, 1], "y": [2, 3], "stroke": INK, "dash": False,
                                         "width": 1.5}
    assert text(1, 2, "hi") == {"kind": "text", "x": 1, "y": 2, "text": "hi", "anchor": "middle"}
    assert circle(1, 2, 10, BLUE, label="0") == {"kind": "circle", "x": 1, "y": 2, "r": 10, "fill": BLUE, "label": "0"}
    assert arrow(0, 0, 1, 1, INK) == {"kind": "arrow", "x0": 0, "y0": 0, "x1": 1, "y1": 1, "stroke": INK, "width": 1.5}
    assert axis(0, 5, "t", [(0, "0")], invert=True) == {"min": 0, "max": 5, "label": "t", "ticks": [[0, "0"]],
                                                         "invert": True}
    s = bars()
    assert (s["width"], s["height"], s["title"], s["alt"]) == (640, 260, "t", "params 3 GB")
    assert [m["kind"] for m in s["marks"]] == ["rect", "text", "line", "circle", "arrow"]


def test_a_scene_survives_a_json_round_trip_and_numpy_numbers_become_plain():
    s = bars()
    assert json.loads(json.dumps(s)) == s
    with_numpy = scene([rect(np.float32(0.5), np.int64(1), 0, np.float64(2.5), fill=BLUE)],
                       x=axis(np.float64(0), 2), y=axis(0, 3), alt="a")
    assert json.loads(json.dumps(with_numpy)) == with_numpy
    assert type(with_numpy["marks"][0]["x0"]) is float and with_numpy["marks"][0]["x0"] == 0.5
    assert validate(s) == s  # validating twice changes nothing


@pytest.mark.parametrize("change, message", [
    (lambda s: s["marks"].append({"kind": "blob"}), "scene.marks[5].kind: 'blob' is not one of rect, line"),
    (lambda s: s["marks"][0].update(x1=math.nan), "scene.marks[0].x1: nan is not a finite number"),
    (lambda s: s["marks"][2]["y"].__setitem__(1, math.inf), r"scene.marks\[2\].y\[1\]: inf is not a finite number"),
    (lambda s: s["marks"][0].update(y0=-math.inf), "scene.marks[0].y0: -inf is not a finite number"),
    (lambda s: s["marks"][0].update(x0="1"), "scene.marks[0].x0: '1' is not a number"),
    (lambda s: s["marks"][0].update(x0=True), "scene.marks[0].x0: True is not a number"),
    (lambda s: s["marks"][0].update(fill="red"), "scene.marks[0].fill: 'red' is not a colour"),
    (lambda s: s["marks"][0].update(colour=BLUE), "scene.marks[0].colour: 'colour' is not a key here"),
    (lambda s: s["marks"][0].pop("y1"), "scene.marks[0]: needs 'y1'"),
    (lambda s: s["marks"][2].update(x=[0]), "scene.marks[2]: x has 1 points, y 2"),
    (lambda s: s["marks"][1].update(anchor="left"), "scene.marks[1].anchor: 'left' is not one of start, middle"),
    (lambda s: s["x"].update(max=0), r"scene.x: \(0.0, 0.0\) is not min < max"),
    (lambda s: s["y"].update(max=math.nan), "scene.y.max: nan is not a finite number"),
    (lambda s: s.update(width=0), "scene.width: 0.0 is not a positive size"),
    (lambda s: s.pop("alt"), "scene: needs 'alt'"),
    (lambda s: s.update(legend=[["params"]]), r"scene.legend\[0\]: \['params'\] is not \[label, colour\]"),
    (lambda s: s.update(legend=[["params", BLUE, "stripes"]]), "scene.legend[0][2]: 'stripes' is not one of box"),
    (lambda s: s["x"].update(ticks=[[math.nan, "a"]]), r"scene.x.ticks\[0\]\[0\]: nan is not a finite number"),
    (lambda s: s.update(panels=[]), "scene: give either panels or x, y and marks, not both"),
])
def test_a_bad_scene_is_refused_in_one_line_naming_the_part(change, message):
    s = json.loads(json.dumps(bars()))
    change(s)
    with pytest.raises(ValueError, match=message if "\\" in message else message.replace("[", r"\[")
                       .replace("]", r"\]").replace("(", r"\(").replace(")", r"\)")) as err:
        validate(s)
    assert "\n" not in str(err.value)
    chart = Chart(bars())
    with pytest.raises(ValueError):  # the widget checks what it is given, and keeps what it had
        chart.scene = s
    assert chart.scene == bars()


def test_panels_are_checked_like_a_scene():
    p = panel([rect(0, 1, 0, 1, fill=BLUE)], x=axis(0, 1), y=axis(0, 1), width=300, height=200, title="sim")
    s = scene(panels=[p, p], columns=2, legend=[("a", BLUE, "hatch")], legend_at="right", alt="two")
    assert len(s["panels"]) == 2 and s["panels"][0]["title"] == "sim" and json.loads(json.dumps(s)) == s
    with pytest.raises(ValueError, match=r"^scene.panels: \[\] has no panel$"):
        scene(panels=[], alt="none")
    with pytest.raises(ValueError, match=r"^scene.panels\[1\].marks\[0\].x0: nan is not a finite number$"):
        scene(panels=[p, {**p, "marks": [rect(math.nan, 1, 0, 1, fill=BLUE)]}], alt="x")
    with pytest.raises(ValueError, match=r"^scene.panels\[0\].height: -1.0 is not a positive size$"):
        scene(panels=[{**p, "height": -1}], alt="x")


def test_the_chart_widget_syncs_its_scene_and_theme_and_says_what_it_is_before_it_runs():
    chart = Chart(bars())
    assert repr(chart) == "▶ run this cell to get the picture" and chart.alt == "params 3 GB"
    state = chart.get_state()
    assert state["scene"] == bars() and state["theme"] == THEME and "scene" in chart.keys
    assert THEME["font"] == FONT_STACK and FONT_PX == 14  # 10 pt at 100 px per inch, as the figures
    assert chart._esm == ESM and "export default { render }" in chart._esm and "function playerBar(" in ESM
    i18n.set_language("zh")
    assert repr(Chart(bars())).startswith("▶ ") and repr(Chart(bars())) != "▶ run this cell to get the picture"


def test_the_esm_writes_no_colour_of_its_own():
    """Colours reach chart.js only through the theme and the scenes (render/style.py's palette)."""
    import re
    assert re.findall(r"#[0-9a-fA-F]{3,8}\b", ESM) == []


def test_a_chart_player_holds_one_checked_scene_per_step():
    one, two = bars(), scene([], x=axis(0, 1), y=axis(0, 1), alt="empty")
    player = chart_player([one, two], captions=["a", "b"], seconds=4.0, label="tick ")
    assert isinstance(player, ChartPlayer) and player.count == 2 and player.value == 0 and player.alt == "params 3 GB"
    assert player.label_prefix == "tick " and player.interval_ms == 1500 and player.captions == ["a", "b"]
    player.value = 7  # clamped to the last step
    assert player.value == 1 and player.alt == "empty"
    player.set_frames([two], captions=["only"])
    assert player.count == 1 and player.value == 0 and player.captions == ["only"]
    with pytest.raises(ValueError, match="frames: need at least one scene"):
        player.set_frames([])
    with pytest.raises(ValueError, match=r"scene.marks\[0\].kind"):
        player.set_frames([{**two, "marks": [{"kind": "blob"}]}])
    assert player.frames == [two] and player.captions == ["only"]  # a refused set leaves the player as it was
    player.set_frames([two])
    assert player.captions == []
    assert repr(player) == "▶ run this cell to get the player"
