// Every player's controls, one piece of code: render/player.py's FramePlayer (pictures), chart.js's ChartPlayer
// (scenes) and pipeline_scene.py's GanttTimeline (a veil over one chart) each put this file in front of their own
// front end (`player.PLAYER_BAR`). Above the picture: ◀, Play, ▶, a slider and "prefix k/last"; under it, the
// step's caption. Stepping happens here, in the browser; `value` syncs to the kernel. DOM classes for the browser
// tests: simlab-player, simlab-bar, simlab-prev, simlab-play, simlab-next, simlab-step, simlab-label, simlab-caption.
//
// playerBar(model, root, box, count, draw): `box` holds the picture, `count()` is the number of steps and
// `draw(k)` shows step k (k = -1 while there is none). Returns `update`, to call when what is shown may have
// changed (value, captions, the steps themselves), and `stop`, the widget's cleanup.
function playerBar(model, root, box, count, draw) {
  const make = (tag, cls, text) => { const e = document.createElement(tag); if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text; return e; };
  root.classList.add("simlab-player");
  const bar = make("div", "simlab-bar"), prev = make("button", "simlab-prev", "◀"),
        play = make("button", "simlab-play", model.get("play_label")), next = make("button", "simlab-next", "▶"),
        step = make("input", "simlab-step"), tag = make("span", "simlab-label"), cap = make("div", "simlab-caption");
  prev.setAttribute("aria-label", model.get("prev_label")); next.setAttribute("aria-label", model.get("next_label"));
  step.type = "range"; step.min = 0; step.step = 1; step.style.width = "240px";
  step.setAttribute("aria-label", model.get("label_prefix").trim());
  bar.style.cssText = "display:flex;gap:6px;align-items:center;margin:2px 0";
  bar.append(prev, play, next, step, tag);
  root.append(bar, box, cap);
  let timer = null;
  function update() {
    const k = Math.min(model.get("value"), count() - 1), shown = Math.max(k, 0), last = Math.max(count() - 1, 0);
    const caps = model.get("captions");
    step.max = last; step.value = shown;
    tag.textContent = model.get("label_prefix") + shown + "/" + last;
    cap.innerHTML = caps.length ? caps[Math.min(shown, caps.length - 1)] : "";
    draw(k);
  }
  function go(k) { model.set("value", Math.max(0, Math.min(count() - 1, k))); model.save_changes(); }
  function stop() { if (timer) clearInterval(timer); timer = null; play.textContent = model.get("play_label"); }
  play.onclick = () => {
    if (timer) return stop();
    if (model.get("value") >= count() - 1) go(0);
    play.textContent = model.get("pause_label");
    timer = setInterval(() => { const k = model.get("value") + 1; go(k); if (k >= count() - 1) stop(); },
                        model.get("interval_ms"));
  };
  prev.onclick = () => { stop(); go(model.get("value") - 1); };
  next.onclick = () => { stop(); go(model.get("value") + 1); };
  step.oninput = () => { stop(); go(parseInt(step.value)); };
  return { update, stop };
}
