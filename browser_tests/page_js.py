"""The in-page half of the browser tests: `window.simlab`, installed once per page by `notebook.Notebook`.

It reads JupyterLab's own models through `window.jupyterapp` (the lab runs with expose_app_in_browser),
finds the widgets of the notebook on screen and their controls, and fingerprints what a widget shows:
the bytes of every picture (blob: URLs change on every update even when the picture does not, so the
bytes are hashed), the markup of every chart drawn in the browser (render/chart.py's SVG), the reveal veil's
geometry, and the text of its readouts — not the controls' own
labels, which change whenever a control moves and would prove nothing.
"""

JS = r"""
(() => {
  if (window.simlab) return;
  const TOP = ".jupyter-widgets, .simlab-player, .simlab-chart";  // a displayed widget's root (ipywidgets, anywidget)
  const CHART = "svg.simlab-chart-svg";  // a chart drawn in the browser: every draw puts in a new one
  const READOUT = ".widget-html-content, .widget-htmlmath-content, .simlab-caption, .simlab-readout, "
                + ".widget-output .jp-OutputArea-output";
  const panel = () => window.jupyterapp.shell.currentWidget;
  const hashes = new Map();
  let nextId = 0;

  async function digest(src) {
    if (!src) return "no-src";
    if (hashes.has(src)) return hashes.get(src);
    let h;
    try {
      const bytes = await (await fetch(src)).arrayBuffer();
      h = [...new Uint8Array(await crypto.subtle.digest("SHA-256", bytes))].slice(0, 10)
            .map(b => b.toString(16).padStart(2, "0")).join("");
    } catch (e) { h = "unreadable:" + src.slice(0, 40); }  // a blob revoked under us: still a change
    if (hashes.size > 500) hashes.clear();
    hashes.set(src, h);
    return h;
  }
  const hashText = s => {  // FNV-1a: a chart's markup, short enough to compare often
    let h = 0x811c9dc5;
    for (let i = 0; i < s.length; i++) { h ^= s.charCodeAt(i); h = Math.imul(h, 0x01000193); }
    return (h >>> 0).toString(16) + ":" + s.length;
  };
  const tag = el => (el.dataset.simlabId ||= String(nextId++));
  const label = el => {
    const box = el.closest(".widget-inline-hbox, .widget-play, .simlab-player, .widget-button, .widget-toggle-buttons, "
                           + ".widget-checkbox");
    const clean = t => (t || "").replace(/\u200b/g, "").trim();  // ipywidgets' empty label is a zero-width space
    const text = (el.tagName === "BUTTON" ? clean(el.textContent) : "") ||
                 (box && box.querySelector("label") ? clean(box.querySelector("label").textContent) : "") ||
                 (box && box.matches(".widget-checkbox") ? clean(box.textContent) : "") ||
                 el.getAttribute("title") || el.className || el.tagName;
    return text.trim().slice(0, 40);
  };

  window.simlab = {
    panel,
    kernelIdle() {
      const k = panel().sessionContext.session && panel().sessionContext.session.kernel;
      return !!k && k.status === "idle";
    },
    codeCells() { return panel().content.widgets.filter(c => c.model.type === "code"); },
    // every code cell has run (a count, no [*]) and the kernel is idle
    runState() {
      const cells = this.codeCells();
      return { idle: this.kernelIdle(), total: cells.length,
               done: cells.filter(c => c.model.executionCount !== null).length,
               queued: [...panel().content.node.querySelectorAll(".jp-InputPrompt")]
                         .filter(e => e.textContent.includes("*")).length };
    },
    cellOutputs() {
      return this.codeCells().map((c, i) => ({ index: i, id: c.model.id, count: c.model.executionCount,
                                               outputs: c.model.outputs.toJSON() }));
    },
    fresh() {
      const p = panel(), spec = p.model.getMetadata("kernelspec") || {};
      return { dirty: p.model.dirty, saved: spec.display_name || null,
               kernel: p.sessionContext.kernelDisplayName };
    },
    widgets() {
      const roots = [];
      panel().content.node.querySelectorAll(".jp-OutputArea-output").forEach(o =>
        o.querySelectorAll(TOP).forEach(w => {
          if (!w.parentElement.closest(TOP) && !roots.includes(w)) roots.push(w);
        }));
      return roots.map(w => ({ id: tag(w), kind: w.matches(".simlab-player") ? "player" :
                                                 w.matches(".simlab-chart") ? "chart" : "ipywidgets",
                               text: w.textContent.trim().slice(0, 60) }));
    },
    controls(wid) {
      const w = document.querySelector(`[data-simlab-id="${wid}"]`), out = [], seen = new Set();
      const add = (el, kind) => {
        if (seen.has(el)) return; seen.add(el);
        const off = el.disabled || el.getAttribute("disabled") !== null ||
                    !!el.closest(".mod-disabled, [disabled]");
        // a slider that moves a player (its own, or an ipywidgets Play linked beside it) steps frames
        const row = el.closest(".widget-hbox");
        const player = !!el.closest(".simlab-player") || !!(row && row.querySelector(".widget-play"));
        out.push({ id: tag(el), kind, label: label(el), disabled: off, player, range: el.tagName === "INPUT" });
      };
      w.querySelectorAll(".simlab-play").forEach(e => add(e, "play"));
      w.querySelectorAll(".widget-play").forEach(e => { const b = e.querySelector("button"); if (b) add(b, "play"); });
      w.querySelectorAll(".simlab-next").forEach(e => add(e, "step"));
      w.querySelectorAll(".noUi-handle, input[type=range]").forEach(e => add(e, "slider"));
      w.querySelectorAll("select").forEach(e => add(e, "dropdown"));
      w.querySelectorAll(".widget-text input[type=number]").forEach(e => add(e, "number"));
      w.querySelectorAll(".widget-toggle-buttons").forEach(e => add(e, "toggle"));  // a choice, like a dropdown
      w.querySelectorAll(".widget-checkbox input[type=checkbox]").forEach(e => add(e, "checkbox"));  // on / off
      w.querySelectorAll("button").forEach(e => {
        if (seen.has(e) || e.closest(".widget-play, .simlab-bar, .widget-toggle-buttons")) return;
        if (e.matches(".simlab-run") || /real|\brun\b/i.test(e.textContent)) add(e, "run");
      });
      return out;
    },
    atEnd(cid) {  // noUiSlider handles carry aria values, range inputs their own; a step button its player's
      let e = document.querySelector(`[data-simlab-id="${cid}"]`);
      if (e.matches(".simlab-next")) e = e.closest(".simlab-player").querySelector("input.simlab-step");
      const now = parseFloat(e.getAttribute("aria-valuenow") ?? e.value);
      const max = parseFloat(e.getAttribute("aria-valuemax") ?? e.max);
      return now >= max;
    },
    pause(cid) {  // a simlab player's play button toggles; an ipywidgets Play has a pause button second
      const e = document.querySelector(`[data-simlab-id="${cid}"]`);
      (e.matches(".simlab-play") ? e : e.closest(".widget-play").querySelectorAll("button")[1]).click();
    },
    // a range input: JupyterLab takes the keyboard focus back from it, so set it as a drag would
    nudge(cid, by) {
      const e = document.querySelector(`[data-simlab-id="${cid}"]`);
      e.value = String(parseFloat(e.value) + by);
      e.dispatchEvent(new Event("input", { bubbles: true }));
      e.dispatchEvent(new Event("change", { bubbles: true }));
    },
    async signature(wid) {
      const w = document.querySelector(`[data-simlab-id="${wid}"]`), parts = [];
      for (const img of w.querySelectorAll("img")) parts.push(await digest(img.getAttribute("src")));
      w.querySelectorAll(CHART).forEach(c => parts.push(hashText(c.outerHTML.replace(/\b(s\d+-[hp]\d+|simlab-alt-\d+)\b/g, ""))));
      w.querySelectorAll(".simlab-veil").forEach(v => parts.push(v.style.cssText));
      w.querySelectorAll(READOUT).forEach(e => parts.push(e.textContent));
      return parts.join("|");
    },
    widgetText(wid) { return document.querySelector(`[data-simlab-id="${wid}"]`).textContent; },
    // pictures that failed, that are empty but still draw a box, or that stick out of their output area
    pictureProblems() {
      const out = [];
      panel().content.node.querySelectorAll(".jp-OutputArea-output img").forEach(img => {
        const r = img.getBoundingClientRect(), shown = r.width > 0 && r.height > 0;
        const where = (img.className || "img") + " in cell " + (img.closest(".jp-CodeCell") ?
          [...panel().content.node.querySelectorAll(".jp-CodeCell")].indexOf(img.closest(".jp-CodeCell")) : "?");
        const src = img.getAttribute("src");
        if (src && shown && img.complete && img.naturalWidth === 0) out.push("broken picture: " + where);
        else if (!src && shown) out.push(`empty picture drawn as a ${Math.round(r.width)}×${Math.round(r.height)} box: ` + where);
        const box = img.closest(".jp-OutputArea-output"), area = box.getBoundingClientRect();
        // past the right edge: the output area scrolls sideways (it is overflow:auto) or clips it
        if (shown && r.right > area.right + 1)
          out.push(`picture sticks out ${Math.round(r.right - area.right)} px past its output area (picture `
                   + `${Math.round(r.width)} px wide from x=${Math.round(r.left - area.left)}, area ${Math.round(area.width)} px): ` + where);
      });
      panel().content.node.querySelectorAll(".jp-OutputArea-output " + CHART).forEach(svg => {
        const r = svg.getBoundingClientRect(), area = svg.closest(".jp-OutputArea-output").getBoundingClientRect();
        if (r.width > 0 && r.right > area.right + 1)
          out.push(`chart sticks out ${Math.round(r.right - area.right)} px past its output area: `
                   + (svg.getAttribute("aria-label") || "").slice(0, 40));
      });
      return out;
    },
    rawWidgetText() {
      return [...panel().content.node.querySelectorAll(".jp-OutputArea-output")]
        .map(o => o.textContent).filter(t => /\b[A-Z]\w*Box\(children=|Error displaying widget|Failed to load model/.test(t))
        .map(t => t.trim().slice(0, 100));
    },
    widgetTracebacks() {  // errors printed inside Output widgets (they are not in the notebook's model)
      return [...panel().content.node.querySelectorAll('.jupyter-widgets .jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]')]
        .map(o => o.textContent).filter(t => /Traceback|Error/.test(t)).map(t => t.trim().slice(-300));
    },
    async logEntries() {
      await window.jupyterapp.commands.execute("logconsole:open", { source: panel().context.path });
      await new Promise(r => setTimeout(r, 300));
      return [...document.querySelectorAll(".jp-LogConsolePanel .jp-OutputArea-child")]
        .map(e => e.textContent.trim().slice(-400)).filter(t => t);
    },
    // latency: arm, then act; `latency` resolves to ms from the first key/click/change to the new picture, or,
    // for a chart, to the frame after its new SVG is in the DOM (the browser has laid it out and painted it then)
    arm(wid, timeoutMs) {
      const w = document.querySelector(`[data-simlab-id="${wid}"]`);
      let t0 = null;
      const start = () => { if (t0 === null) t0 = performance.now(); };
      for (const ev of ["keydown", "mousedown", "click", "input", "change"]) document.addEventListener(ev, start, { capture: true, once: true });
      this.latency = new Promise(resolve => {
        const done = async img => {
          obs.disconnect();
          if (img) { try { await img.decode(); } catch (e) {} }
          requestAnimationFrame(() => resolve(t0 === null ? null : performance.now() - t0));
        };
        const obs = new MutationObserver(muts => {
          for (const m of muts) {
            const t = m.target;
            if (m.type === "attributes" && t.tagName === "IMG" && m.attributeName === "src") return done(t);
            if (m.type === "attributes" && t.classList.contains("simlab-veil")) return done(null);
            for (const n of m.addedNodes) {
              if (n.matches && (n.matches(CHART) || n.querySelector(CHART))) return done(null);
              const img = n.tagName === "IMG" ? n : (n.querySelector && n.querySelector("img"));
              if (img) return done(img);
            }
          }
        });
        obs.observe(w, { subtree: true, attributes: true, childList: true, attributeFilter: ["src", "style"] });
        setTimeout(() => { obs.disconnect(); resolve(null); }, timeoutMs);
      });
    },
  };
})();
"""
