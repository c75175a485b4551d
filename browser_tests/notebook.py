"""Drive one notebook in JupyterLab from Python (Playwright, sync API): open, run all, check, interact.

Every check returns a list of problems (one line each) instead of asserting at once, so a lesson's test
reports everything wrong with it in one failure rather than only the first thing.
"""
from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field

from .page_js import JS

OPEN_TIMEOUT_S = 90
SETTLE_S = 0.25          # the kernel idle and a widget's fingerprint unchanged for this long: settled
CHANGE_TIMEOUT_S = 45    # a knob's new picture or readout (a re-simulation) must come within this: a
                         # shared 2-core CI machine can take 10 s to redraw a player's frames
RUN_TIMEOUT_S = 180      # a real run started from a button (lesson 6: 8 processes on 2 cores)


@dataclass
class Exercised:
    """What happened to the controls of one widget: which changed what it shows, which did not."""
    widget: str
    changed: list = field(default_factory=list)     # "slider 'world size'", …
    unchanged: list = field(default_factory=list)
    disabled: list = field(default_factory=list)
    skipped: list = field(default_factory=list)     # real-run buttons past the lesson's first one


class Notebook:
    """One page showing one notebook of `lab`; `problems` collects what the checks found."""

    def __init__(self, page, lab, path: str, change_timeout_s: float = CHANGE_TIMEOUT_S):
        self.page, self.lab, self.path = page, lab, path
        self.change_timeout_s = change_timeout_s
        self.problems: list[str] = []
        page.on("pageerror", lambda err: self.problems.append(f"uncaught error in the page: {err}"))

    # -- opening and running -------------------------------------------------------------------------------
    def open(self) -> None:
        """Open with ?reset (a clean workspace: only this notebook), wait for the kernel to be idle."""
        self.page.goto(f"{self.lab.url}/lab/tree/{self.path}?reset")
        self.page.wait_for_function(
            "() => { const p = window.jupyterapp && window.jupyterapp.shell.currentWidget;"
            " return !!(p && p.content && p.context && p.context.isReady && p.sessionContext.session"
            " && p.sessionContext.session.kernel && p.sessionContext.session.kernel.status === 'idle'); }",
            timeout=OPEN_TIMEOUT_S * 1000)
        self.page.evaluate(JS)

    def js(self, expression: str, arg=None):
        return self.page.evaluate(f"(arg) => window.simlab.{expression}", arg)

    def check_fresh(self) -> None:
        """A saved notebook opened fresh must not be modified: its kernelspec must name the installed one
        (JupyterLab rewrites a different display name at once and marks the notebook dirty)."""
        time.sleep(1.0)  # the kernelspec rewrite happens right after the kernel connects
        fresh = self.js("fresh()")
        saved = json.loads((self.lab.root / self.path).read_text())["metadata"].get("kernelspec", {})
        if saved.get("display_name") != fresh["kernel"]:  # the model already holds the rewritten name
            self.problems.append(f"saved kernelspec display_name {saved.get('display_name')!r} is not the "
                                 f"installed kernel's {fresh['kernel']!r}: the notebook opens modified")
        elif fresh["dirty"]:
            self.problems.append("the notebook is marked modified right after opening")

    def run_all(self, timeout_s: float) -> float:
        """Clear every output, Run All, wait until every code cell has a count and the kernel is idle."""
        self.page.evaluate("() => window.jupyterapp.commands.execute('notebook:clear-all-cell-outputs')")
        start = time.monotonic()
        self.page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
        while True:
            state = self.js("runState()")
            if state["idle"] and not state["queued"] and (state["done"] == state["total"] or self._errors()):
                break
            if time.monotonic() - start > timeout_s:
                self.problems.append(f"Run All did not finish in {timeout_s:.0f} s: {state}")
                break
            time.sleep(0.5)
        seconds = time.monotonic() - start
        time.sleep(1.0)  # widget views render after their display message
        state = self.js("runState()")
        if state["done"] != state["total"]:
            self.problems.append(f"only {state['done']} of {state['total']} code cells ran")
        self.problems.extend(self._errors())
        return seconds

    def _errors(self) -> list[str]:
        found = []
        for cell in self.js("cellOutputs()"):
            for out in cell["outputs"]:
                if out.get("output_type") == "error":
                    found.append(f"cell {cell['index']} ({cell['id']}): {out['ename']}: {out['evalue'][:200]}")
                elif out.get("name") == "stderr" and "Traceback" in "".join(out.get("text", "")):
                    found.append(f"cell {cell['index']} ({cell['id']}) printed a traceback: "
                                 + "".join(out["text"])[-200:])
        return found

    # -- what is on screen -----------------------------------------------------------------------------------
    def check_rendering(self) -> list[dict]:
        """Every widget rendered (no raw repr, no 'Error displaying widget'), no broken or too-wide picture.
        Returns the widgets found."""
        self.problems.extend(f"widget not rendered: {t!r}" for t in self.js("rawWidgetText()"))
        self.problems.extend(self.js("pictureProblems()"))
        self.problems.extend(f"traceback inside a widget: {t}" for t in self.js("widgetTracebacks()"))
        return self.js("widgets()")

    def check_log_console(self) -> None:
        """Exceptions in widget callbacks land in the Log Console, nowhere else: it must be empty."""
        self.problems.extend(f"log console: {entry}" for entry in self.page.evaluate(
            "() => window.simlab.logEntries()"))

    # -- interacting -------------------------------------------------------------------------------------------
    def signature(self, widget_id: str) -> str:
        return self.page.evaluate("(w) => window.simlab.signature(w)", widget_id)

    def settle(self, widget_id: str, timeout_s: float = CHANGE_TIMEOUT_S) -> str:
        """Wait until the kernel is idle and the widget's fingerprint stays the same; return it."""
        deadline, last, since = time.monotonic() + timeout_s, None, time.monotonic()
        while time.monotonic() < deadline:
            sig = self.signature(widget_id) if self.js("kernelIdle()") else None
            if sig is None or sig != last:
                last, since = sig, time.monotonic()
            elif time.monotonic() - since >= SETTLE_S:
                return sig
            time.sleep(0.05)
        return last if last is not None else self.signature(widget_id)

    def wait_change(self, widget_id: str, before: str, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.signature(widget_id) != before:
                return True
            time.sleep(0.05)
        return False

    def control(self, control_id: str):
        return self.page.locator(f'[data-simlab-id="{control_id}"]')

    def act(self, control: dict, back: bool = False) -> None:
        """One change of a control — a key press, a click, a new option — or, with `back`, its undoing."""
        el, kind = self.control(control["id"]), control["kind"]
        if kind in ("slider", "step"):  # forward: one step up, or down from the top; back: the other way
            if not back:
                control["moved"] = -1 if self.js("atEnd(arg)", control["id"]) else 1
            by = -control.get("moved", 1) if back else control["moved"]
            if kind == "step":  # a real click on ▶ or ◀ (its sibling in the player's bar)
                (el if by > 0 else el.locator("xpath=..").locator(".simlab-prev")).click()
            elif control["range"]:
                self.page.evaluate("([c, by]) => window.simlab.nudge(c, by)", [control["id"], by])
            else:
                el.press("ArrowRight" if by > 0 else "ArrowLeft")
        elif kind == "dropdown":
            count = el.locator("option").count()
            index = el.evaluate("e => e.selectedIndex")
            el.select_option(index=(index + (-1 if back else 1)) % max(count, 1))
        elif kind == "toggle":  # forward: the next button; back: the one that was on before
            buttons = el.locator("button")
            if not back:
                control["was"] = el.evaluate("e => [...e.querySelectorAll('button')]"
                                             ".findIndex(b => b.classList.contains('mod-active'))")
            buttons.nth(control["was"] if back else (control["was"] + 1) % buttons.count()).click()
        elif kind == "checkbox":  # on, or back off: a click either way
            el.click()
        elif kind == "number":
            el.press("ArrowDown" if back else "ArrowUp")
            el.press("Enter")
            el.evaluate("e => e.blur()")  # some text widgets send their value on blur only
        else:  # play, run: a click
            el.click()

    def exercise(self, widget: dict, controls: list[dict], run_real: bool) -> Exercised:
        """Change each control once and check the widget's picture or readout changed; put it back after
        (a knob left at an invalid value would make every later knob look dead)."""
        report = Exercised(f"{widget['kind']} {widget['text'][:40]!r}")
        # the real run first: on the configuration the lesson chose, not one the knobs below leave behind
        for control in sorted(controls, key=lambda c: c["kind"] != "run"):
            name = f"{control['kind']} {control['label']!r}"
            if control["disabled"] or (control["kind"] == "run" and not run_real):
                (report.disabled if control["disabled"] else report.skipped).append(name)
                continue
            before = self.settle(widget["id"])
            self.act(control)
            wait = RUN_TIMEOUT_S if control["kind"] == "run" else self.change_timeout_s
            changed = self.wait_change(widget["id"], before, wait)
            if control["kind"] == "play" and changed:  # pause, so frames stop moving under the next control
                self.page.evaluate("(c) => window.simlab.pause(c)", control["id"])
            (report.changed if changed else report.unchanged).append(name)
            if control["kind"] == "run":  # until the kernel is idle and no "running… 3 s" ticks on
                deadline = time.monotonic() + RUN_TIMEOUT_S
                while time.monotonic() < deadline:
                    self.settle(widget["id"], RUN_TIMEOUT_S)
                    text = self.js("widgetText(arg)", widget["id"])
                    if "running…" not in text:
                        break
                else:
                    self.problems.append(f"{name}: still running after {RUN_TIMEOUT_S} s")
                if re.search(r"failed|Traceback|\w+Error\b", text):
                    self.problems.append(f"{name}: the real run reported a failure: …{text[-200:]}")
            elif control["kind"] in ("dropdown", "toggle", "number", "checkbox") and changed:  # likely invalid ones
                self.settle(widget["id"])
                self.act(control, back=True)
        self.settle(widget["id"])
        return report

    def close(self) -> None:
        """Shut this notebook's kernel down (the lab keeps running for the next lesson)."""
        try:
            self.page.evaluate("() => window.jupyterapp.shell.currentWidget.sessionContext.shutdown()")
        except Exception:  # the page may already be gone after a failure: the lab's teardown stops it
            pass
        self.page.close()
