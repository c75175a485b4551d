"""The browser checks can fail: a notebook with one of each fault must be reported for every one of them.

Without this, a selector that matches nothing (a renamed class, a new JupyterLab) would make every check
pass vacuously on the real lessons.
"""
from __future__ import annotations

import nbformat

from .notebook import Notebook
from .test_lessons import check_notebook

TINY_PNG = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==")

CELLS = [  # (source, the problem it must cause: a piece of the one-line report)
    ("import ipywidgets as w\n"
     "w.VBox([w.IntSlider(0, 0, 5, description='dead'), w.HTML('<pre>never changes</pre>')])",
     "slider 'dead' changed nothing"),
    ("t = w.IntSlider(0, 0, 5, description='raises')\n"
     "def boom(change):\n    raise ValueError('boom in a callback')\n"
     "t.observe(boom, names='value')\nw.VBox([t, w.HTML('x')])",
     "boom in a callback"),  # in the Log Console, not in any cell
    ("print('VBox(children=(IntSlider(value=0),))')", "widget not rendered"),
    ("w.Image(value=b'', format='png', layout=w.Layout(border='2px solid red', width='80px', height='40px'))",
     "picture"),  # an empty picture that still draws its box
    ("from IPython.display import HTML\n"
     f"HTML('<div style=\"width:4000px\"><img src=\"data:image/png;base64,{TINY_PNG}\" width=\"4000\"></div>')",
     "sticks out"),
    ("raise RuntimeError('a lesson error')", "RuntimeError: a lesson error"),
    ("1 + 1", "code cells ran"),  # never reached: Run All stops at the error
]


def test_every_check_reports_its_fault(lab, page):
    nb_file = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(src) for src, _ in CELLS])
    nb_file.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    path = lab.root / "selftest" / "faults.ipynb"
    path.parent.mkdir(exist_ok=True)
    nbformat.write(nb_file, path)
    nb = Notebook(page, lab, "selftest/faults.ipynb", change_timeout_s=5)  # its dead knobs stay dead
    try:
        check_notebook(nb, run_all_timeout_s=120)
    finally:
        nb.close()
    report = "\n".join(nb.problems)
    expected = [want for _, want in CELLS] + ["opens modified"]
    missing = [want for want in expected if want not in report]
    assert not missing, f"faults not reported: {missing}\nreported:\n{report}"


def test_only_jupyterlabs_own_glitch_earns_a_second_check():
    from types import SimpleNamespace

    from .test_lessons import LAB_GLITCH, checked_twice_on_lab_glitch

    class Page:  # what check() does to a page: Notebook.close() closes it
        def __init__(self):
            self.closed = False

    def runs(*answers):
        tries = iter(answers)
        calls = []

        def check(page):
            assert not page.closed, "checked again on the page the first check closed"
            calls.append(page)
            page.closed = True
            return SimpleNamespace(problems=list(next(tries)))
        return check, calls
    glitch = f"uncaught error in the page: {LAB_GLITCH}: Unexpected token"
    check, calls = runs([glitch], [])
    assert checked_twice_on_lab_glitch(check, Page(), Page) == [] and len(calls) == 2  # once more, and clean
    assert calls[0] is not calls[1]  # on a fresh page
    check, calls = runs([glitch], [glitch])
    assert checked_twice_on_lab_glitch(check, Page(), Page) == [glitch] and len(calls) == 2  # twice: it fails
    check, calls = runs([glitch, "cell 3: an error output"])
    assert len(checked_twice_on_lab_glitch(check, Page(), Page)) == 2 and len(calls) == 1  # anything else: once
