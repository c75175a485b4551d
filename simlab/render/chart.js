// simlab's Chart: a scene (plain JSON, built and checked in Python by simlab/render/chart.py) drawn as SVG.
// The kernel computes, the browser draws: a knob change sends a new scene, never a picture. Every colour,
// the font stack and the font size come from Python (`theme`, from render/style.py); none is written here.
// DOM classes for tests: simlab-chart (root), simlab-chart-svg, simlab-chart-alt; a player adds player_bar.js's.
const NS = "http://www.w3.org/2000/svg";
let nextId = 0;
const measurer = document.createElement("canvas").getContext("2d");
let inked = { x0: 0, x1: 0, y0: 0, y1: 0 };  // the extent of the words drawn so far, in the drawing's px

function svg(tag, attrs, parent) {
  const e = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) if (v !== undefined && v !== null) e.setAttribute(k, v);
  if (parent) parent.appendChild(e);
  return e;
}
function html(tag, cls, text) {
  const e = document.createElement(tag); if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text; return e;
}
const lines = s => String(s).split("\n");
function width(th, s, size, bold) {  // px a text takes in the course's font (canvas: works before layout)
  measurer.font = `${bold ? "bold " : ""}${size}px ${th.font}`;
  return Math.max(0, ...lines(s).map(l => measurer.measureText(l).width));
}

// one text, several lines (\n), its block centred on y ("middle"), hanging from it ("top") or standing on it
function label(parent, th, x, y, s, o) {
  const size = o.size || th.font_px, lh = size * 1.2, ls = lines(s);
  const block = ls.length * lh, base = o.baseline || "middle";
  const centre = base === "top" ? y + block / 2 : base === "bottom" ? y - block / 2 : y;
  if (!o.turned) {  // where words reach: a long CJK row label may run past the drawing's edge (see draw)
    const w = width(th, s, size, o.bold), a = o.anchor || "middle", left = a === "start" ? x : a === "end" ? x - w : x - w / 2;
    inked.x0 = Math.min(inked.x0, left); inked.x1 = Math.max(inked.x1, left + w);
    inked.y0 = Math.min(inked.y0, centre - block / 2); inked.y1 = Math.max(inked.y1, centre + block / 2);
  }
  if (o.halo) {  // a pale box behind the words, so a line under them cannot cross them (matplotlib's bbox)
    const w = width(th, s, size, o.bold) + 4, a = o.anchor || "middle";
    svg("rect", { x: a === "start" ? x - 2 : a === "end" ? x - w + 2 : x - w / 2, y: centre - block / 2, width: w,
                  height: block, rx: 2, fill: th.paper, "fill-opacity": 0.85 }, parent);
  }
  const t = svg("text", { x, "text-anchor": o.anchor || "middle", "font-size": size, fill: o.color || th.ink,
                          "font-weight": o.bold ? "bold" : null, "dominant-baseline": "central" }, parent);
  ls.forEach((l, i) => { const sp = svg("tspan", { x, y: centre + (i - (ls.length - 1) / 2) * lh }, t);
                         sp.textContent = l; });
  return t;
}

function defs(root, th) {  // arrow heads and hatches, one per colour, made when first used
  const d = svg("defs", {}, root), made = new Map(), tag = `s${nextId++}`;
  return {
    head(color) {
      const id = `${tag}-h${made.size}`;
      if (made.has("h" + color)) return made.get("h" + color);
      const m = svg("marker", { id, viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 9, markerHeight: 9,
                                markerUnits: "userSpaceOnUse", orient: "auto-start-reverse" }, d);
      svg("path", { d: "M0,0 L10,5 L0,10 z", fill: color }, m);
      made.set("h" + color, `url(#${id})`); return made.get("h" + color);
    },
    hatch(color) {
      const id = `${tag}-p${made.size}`;
      if (made.has("p" + color)) return made.get("p" + color);
      const p = svg("pattern", { id, width: 6, height: 6, patternUnits: "userSpaceOnUse",
                                 patternTransform: "rotate(45)" }, d);
      svg("rect", { width: 6, height: 6, fill: th.paper }, p);
      svg("line", { x1: 0, y1: 0, x2: 0, y2: 6, stroke: color, "stroke-width": 1.5 }, p);
      made.set("p" + color, `url(#${id})`); return made.get("p" + color);
    },
  };
}

// an axis without ticks of its own gets round ones (1, 2, 2.5, 5 × 10^k), about one per `every` px
function autoTicks(a, px, every) {
  const raw = (a.max - a.min) / Math.max(2, Math.floor(px / every)), mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 2.5, 5, 10].map(k => k * mag).find(v => v >= raw * (1 - 1e-9));
  const digits = Math.max(0, -Math.floor(Math.log10(step) + 1e-9) + (String(step / mag).includes(".") ? 1 : 0));
  const out = [];
  for (let k = Math.ceil(a.min / step - 1e-9); k * step <= a.max + step * 1e-9; k++)
    out.push([k * step, (k * step).toFixed(digits)]);
  return out;
}
function ticksOf(axis, px, every) { return axis.hidden ? [] : (axis.ticks || autoTicks(axis, px, every)); }

// the margins a panel's tick labels, axis labels and title need (measured, so CJK fits too)
function margins(th, p) {
  const fs = th.font_px, lh = fs * 1.2, x = p.x, y = p.y;
  const xt = ticksOf(x, p.width, 90), yt = ticksOf(y, p.height, 45);
  const yw = Math.max(0, ...yt.map(t => width(th, t[1], fs)));
  const xl = Math.max(1, ...xt.map(t => lines(t[1]).length));
  const lastX = xt.length ? width(th, xt.at(-1)[1], fs) / 2 : 0;
  return { left: y.hidden ? 4 : yw + 10 + (y.label ? lh + 4 : 0),
           bottom: x.hidden ? 4 : 8 + xl * lh + (x.label ? lh + 4 : 0),
           top: (p.title ? lines(p.title).length * lh + 6 : 6), right: x.hidden ? 4 : Math.max(8, lastX) };
}

function panel(root, th, fx, p, ox, oy) {
  const fs = th.font_px, lh = fs * 1.2, m = margins(th, p), x = p.x, y = p.y;
  const xt = ticksOf(x, p.width, 90), yt = ticksOf(y, p.height, 45);
  let pw = p.width - m.left - m.right, ph = p.height - m.top - m.bottom, kx = pw / (x.max - x.min),
      ky = ph / (y.max - y.min), px0 = ox + m.left, py0 = oy + m.top;
  if (p.aspect === "equal") {  // one unit is as long across as up: a circle stays a circle
    const k = Math.min(kx, ky); px0 += (pw - k * (x.max - x.min)) / 2; py0 += (ph - k * (y.max - y.min)) / 2;
    pw = k * (x.max - x.min); ph = k * (y.max - y.min); kx = ky = k;
  }
  const sx = v => px0 + (v - x.min) * kx;
  const sy = y.invert ? v => py0 + (v - y.min) * ky : v => py0 + (y.max - v) * ky;
  const g = svg("g", { class: "simlab-chart-panel" }, root);
  if (p.title) label(g, th, p.title_at === "center" ? ox + p.width / 2 : px0, oy + 4, p.title,
                     { anchor: p.title_at === "center" ? "middle" : "start", baseline: "top", color: p.title_color });
  if (!x.hidden) {  // matplotlib's look: left and bottom spines, ticks outside, top and right open
    svg("line", { x1: px0, x2: px0 + pw, y1: py0 + ph, y2: py0 + ph, stroke: th.ink, "stroke-width": 0.8 }, g);
    for (const [v, s] of xt) {
      svg("line", { x1: sx(v), x2: sx(v), y1: py0 + ph, y2: py0 + ph + 4, stroke: th.ink, "stroke-width": 0.8 }, g);
      label(g, th, sx(v), py0 + ph + 6, s, { baseline: "top" });
    }
    const xl = Math.max(1, ...xt.map(t => lines(t[1]).length));
    if (x.label) label(g, th, px0 + pw / 2, py0 + ph + 10 + xl * lh, x.label, { baseline: "top" });
  }
  if (!y.hidden) {
    svg("line", { x1: px0, x2: px0, y1: py0, y2: py0 + ph, stroke: th.ink, "stroke-width": 0.8 }, g);
    for (const [v, s] of yt) {
      svg("line", { x1: px0 - 4, x2: px0, y1: sy(v), y2: sy(v), stroke: th.ink, "stroke-width": 0.8 }, g);
      label(g, th, px0 - 6, sy(v), s, { anchor: "end" });
    }
    if (y.label) { const t = label(g, th, 0, 0, y.label, { turned: true });
                   t.setAttribute("transform", `translate(${ox + lh / 2 + 2},${py0 + ph / 2}) rotate(-90)`); }
  }
  for (const mk of p.marks) mark(g, th, fx, mk, sx, sy, kx);
}

function mark(g, th, fx, mk, sx, sy, kx) {
  const dash = mk.dash ? "5,3" : null;
  if (mk.kind === "rect") {
    const x = Math.min(sx(mk.x0), sx(mk.x1)), y = Math.min(sy(mk.y0), sy(mk.y1));
    const w = Math.abs(sx(mk.x1) - sx(mk.x0)), h = Math.abs(sy(mk.y1) - sy(mk.y0));
    const r = svg("rect", { x, y, width: w, height: h, fill: mk.hatch ? fx.hatch(mk.hatch) : mk.fill,
                            stroke: mk.stroke || "none", "stroke-width": mk.width ?? 1, "stroke-dasharray": dash }, g);
    if (mk.tip) svg("title", {}, r).textContent = mk.tip;
    // the first of its labels that fits inside (a long name, then a short one), else none
    const size = mk.size || th.font_px, options = [].concat(mk.label ?? []);
    const fits = options.find(s => width(th, s, size, mk.bold) + 4 <= w && lines(s).length * size * 1.2 <= h + 2);
    if (fits !== undefined) label(g, th, x + w / 2, y + h / 2, fits, { size, color: mk.label_color, bold: mk.bold });
  } else if (mk.kind === "line") {
    svg("polyline", { points: mk.x.map((v, i) => `${sx(v)},${sy(mk.y[i])}`).join(" "), fill: "none",
                      stroke: mk.stroke, "stroke-width": mk.width ?? 1.5, "stroke-dasharray": dash }, g);
  } else if (mk.kind === "text") {
    label(g, th, sx(mk.x) + (mk.dx || 0), sy(mk.y) - (mk.dy || 0), mk.text,
          { anchor: mk.anchor, size: mk.size, color: mk.color, bold: mk.bold, halo: mk.halo, baseline: mk.baseline });
  } else if (mk.kind === "circle") {
    const r = mk.r_unit === "data" ? mk.r * kx : mk.r;
    svg("circle", { cx: sx(mk.x), cy: sy(mk.y), r, fill: mk.fill, stroke: mk.stroke || "none",
                    "stroke-width": mk.width ?? 1.2 }, g);
    if (mk.label !== undefined) label(g, th, sx(mk.x), sy(mk.y), mk.label, { size: mk.size, color: mk.label_color });
  } else if (mk.kind === "arrow") {
    const x1 = sx(mk.x0), y1 = sy(mk.y0), x2 = sx(mk.x1), y2 = sy(mk.y1), b = mk.bend || 0;
    // matplotlib's arc3: the control point sits `bend` × the chord off its middle, to the chord's right
    const cx = (x1 + x2) / 2 - b * (y2 - y1), cy = (y1 + y2) / 2 + b * (x2 - x1);
    svg("path", { d: `M${x1},${y1} Q${cx},${cy} ${x2},${y2}`, fill: "none", stroke: mk.stroke,
                  "stroke-width": mk.width ?? 1.5, "stroke-dasharray": dash, "marker-end": fx.head(mk.stroke) }, g);
  }
}

// legend entries [label, colour, style]: style "box" (default), "line", "dash", "hatch", "dashed-box"
function legend(root, th, fx, entries, x0, y0, maxWidth, vertical) {
  const fs = th.font_px, lh = fs * 1.2 + 4;
  let x = x0, y = y0, widest = 0;
  for (const [name, color, style] of entries) {
    const w = 22 + width(th, name, fs) + 14;
    if (!vertical && x > x0 && x + w > x0 + maxWidth) { x = x0; y += lh; }
    const mid = y + lh / 2;
    if (style === "line" || style === "dash")
      svg("line", { x1: x, x2: x + 16, y1: mid, y2: mid, stroke: color, "stroke-width": 1.6,
                    "stroke-dasharray": style === "dash" ? "4,2" : null }, root);
    else svg("rect", { x, y: mid - 6, width: 16, height: 12, fill: style === "hatch" ? fx.hatch(color) : color,
                       stroke: style === "hatch" ? color : th.soft_ink, "stroke-width": 0.8,
                       "stroke-dasharray": style === "dashed-box" ? "3,2" : null }, root);
    label(root, th, x + 22, mid, name, { anchor: "start" });
    widest = Math.max(widest, w);
    if (vertical) y += lh; else x += w;
  }
  return { width: widest, height: entries.length ? (vertical ? y - y0 : y + lh - y0) : 0 };
}

// the whole scene: its title, its panels in rows of `columns`, its legend (under them, or right of them)
function draw(box, sc, th) {
  const fs = th.font_px, alt = html("div", "simlab-chart-alt"), id = `simlab-alt-${nextId++}`;
  inked = { x0: 0, x1: 0, y0: 0, y1: 0 };
  const panels = sc.panels || [{ x: sc.x, y: sc.y, marks: sc.marks, width: sc.width, height: sc.height,
                                 aspect: sc.aspect }];
  const cols = Math.max(1, sc.columns || 1), rows = [];
  for (let i = 0; i < panels.length; i += cols) rows.push(panels.slice(i, i + cols));
  const titleH = sc.title ? lines(sc.title).length * (fs + 1) * 1.2 + 8 : 0;
  const wide = Math.max(...rows.map(r => r.reduce((s, p) => s + p.width, 0)));
  const root = svg("svg", { class: "simlab-chart-svg", role: "img", "aria-label": sc.title || lines(sc.alt)[0],
                            "aria-describedby": id, "font-family": th.font, "font-size": fs });
  const fx = defs(root, th);
  if (sc.title) label(root, th, 4, 4, sc.title, { anchor: "start", baseline: "top", size: fs + 1 });
  let y = titleH;
  for (const r of rows) {
    let x = 0;
    for (const p of r) { panel(root, th, fx, p, x, y); x += p.width; }
    y += Math.max(...r.map(p => p.height));
  }
  let w = wide, h = y;
  const entries = sc.legend || [];
  if (entries.length && sc.legend_at === "right") {
    const below = titleH + 8 + (panels[0].title ? lines(panels[0].title).length * fs * 1.2 + 6 : 0);  // under a title
    const l = legend(root, th, fx, entries, wide + 8, below, 0, true);
    w = wide + 16 + l.width; h = Math.max(h, below + l.height);
  } else if (entries.length) h = y + 4 + legend(root, th, fx, entries, 8, y + 4, wide - 16, false).height;
  // grow the drawing to hold every word (matplotlib's "tight" box does the same): nothing is cut at an edge
  const out = (v, edge, by) => (by > 0 ? v > edge : v < edge) ? v + by : edge;  // 2 px beyond a word that sticks out
  const x0 = Math.floor(out(inked.x0, 0, -2)), y0 = Math.floor(out(inked.y0, 0, -2));
  w = Math.ceil(out(inked.x1, w, 2)) - x0; h = Math.ceil(out(inked.y1, h, 2)) - y0;
  Object.entries({ width: w, height: h, viewBox: `${x0} ${y0} ${w} ${h}` }).forEach(([k, v]) => root.setAttribute(k, v));
  root.style.cssText = "display:block;max-width:100%;height:auto;overflow:visible";
  alt.id = id;
  const pre = html("pre", null, sc.alt);
  pre.style.cssText = "white-space:pre;overflow-x:auto;margin:2px 0;line-height:1.25";
  alt.appendChild(pre);
  // a screen reader reads the readout; the eye gets it only where the scene asks (show_alt)
  if (!sc.show_alt) alt.style.cssText = "position:absolute;width:1px;height:1px;overflow:hidden;"
                                        + "clip:rect(0 0 0 0);clip-path:inset(50%);white-space:nowrap";
  box.replaceChildren(root, alt);
}

function render({ model, el: root }) {
  root.classList.add("simlab-chart");
  root.style.position = "relative";
  const box = html("div", "simlab-chart-box");
  const th = () => model.get("theme");
  if (model.get("frames") === undefined) {  // a Chart: one scene
    const show = () => { if (model.get("scene").alt !== undefined) draw(box, model.get("scene"), th()); };
    root.append(box);
    model.on("change:scene", show);
    show();
    return;
  }
  // a ChartPlayer: one scene per frame, stepped here, in the browser, like render/player.py's FramePlayer; its bar
  // is player_bar.js's `playerBar`, which the widget's front end carries in front of this file (chart.py's ESM)
  const player = playerBar(model, root, box, () => model.get("frames").length,
                           k => { if (k >= 0) draw(box, model.get("frames")[k], th()); });
  for (const name of ["value", "frames", "captions"]) model.on(`change:${name}`, player.update);
  player.update();
  return () => player.stop();
}
export default { render };
