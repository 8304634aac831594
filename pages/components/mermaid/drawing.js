// The app's Mermaid 11 drawing: Streamlit's component protocol by hand (postMessage), Mermaid with
// securityLevel "strict" and SVG text labels (no HTML in a label), zoom that never draws text under
// MIN_TEXT_PX at Fit (the box scrolls instead), wheel to pan, Ctrl + wheel (or a pinch) to zoom at the
// cursor, drag to pan, and buttons to copy a link to the workflow and the drawing as a PNG.
//
// A first drawing may come with the render (args.image: the same Mermaid 11 drawing made on the server,
// flowcore/ui/first_drawing.py): it is shown at once as an inert <img> (a data: URL; an SVG in an image runs
// no script and loads nothing; its text is never markup here), and Mermaid, loaded once the page has painted
// and is idle, draws the text again and takes its place in the same frame, at the same zoom.
"use strict";

const MIN_TEXT_PX = 11;
const ZOOMS = [0.25, 0.33, 0.5, 0.67, 0.75, 0.9, 1, 1.1, 1.25, 1.5, 1.75, 2, 2.5, 3, 4];
const $ = (id) => document.getElementById(id);
const view = $("view"), stage = $("stage"), errorBox = $("error");
const state = { code: null, args: {}, fit: true, scale: 1, natural: null, rendering: Promise.resolve(), n: 0,
  imageOf: null };  // imageOf: the text whose server drawing is shown (an <img>), until Mermaid redraws it

function post(type, extra) {
  window.parent.postMessage(Object.assign({ isStreamlitMessage: true, type }, extra), "*");
}

// Mermaid (3.5 MB of script) is loaded once this drawing is near the window or the page around it has
// finished its first paint, whichever comes first: a drawing further down (History's parent and round) does
// not hold up the grey placeholders of the page's first screen, which share this thread.
function appPainted() {
  try {
    const d = window.parent.document;
    return !d.querySelector('[data-testid="stSkeleton"]')
      && !!d.querySelector('[data-testid="stApp"][data-test-script-state="notRunning"]');
  } catch (e) { return true; }  // not inside the app: nothing to wait for
}

const wanted = new Promise((resolve) => {
  const seen = new IntersectionObserver((entries) => {
    if (entries.some((e) => e.isIntersecting)) { seen.disconnect(); resolve(); }
  }, { rootMargin: "200px" });
  seen.observe(document.body);
  const check = () => (appPainted() ? resolve() : setTimeout(check, 100));
  check();
});

// With the server's image shown, Mermaid waits for the page's first paint and an idle moment instead.
const painted = new Promise((resolve) => {
  const check = () => (appPainted() ? resolve() : setTimeout(check, 100));
  check();
});
const idle = () => new Promise((resolve) => (window.requestIdleCallback
  ? window.requestIdleCallback(() => resolve(), { timeout: 2000 }) : setTimeout(resolve, 200)));
let loadNow;
const go = new Promise((resolve) => { loadNow = resolve; });

let loaded = null;
function loadMermaid(later) {
  (later ? painted.then(idle) : wanted).then(loadNow);
  loaded = loaded || go.then(() => new Promise((resolve, reject) => {
    const script = document.createElement("script");
    script.src = "mermaid.min.js";  // this folder's own (script-src 'self')
    script.onload = () => {
      mermaid.initialize({
        startOnLoad: false, securityLevel: "strict", theme: "default", maxEdges: 2000,
        flowchart: { htmlLabels: false, useMaxWidth: false }, htmlLabels: false,
      });
      resolve();
    };
    script.onerror = () => { loaded = null; reject(new Error("mermaid.min.js did not load")); };
    document.head.append(script);
  }));
  return loaded;
}

function fontPx() {
  return Number(state.args.font_px) || 16;
}

function minScale() {  // the smallest zoom Fit may choose: text at MIN_TEXT_PX
  return MIN_TEXT_PX / fontPx();
}

function fitScale() {
  if (!state.natural) return 1;
  const room = Math.max(view.clientWidth - 26, 50);
  return Math.min(1, Math.max(minScale(), room / state.natural.w));
}

function picture() {  // Mermaid's <svg>, or the server's drawing as an <img>
  return stage.querySelector(":scope > svg, :scope > img");
}

function apply(scale, anchor) {
  const pic = picture();
  if (!pic || !state.natural) return;
  const before = state.scale;
  state.scale = scale;
  pic.setAttribute("width", String(state.natural.w * scale));
  pic.setAttribute("height", String(state.natural.h * scale));
  if (anchor) {  // keep the point under the cursor where it is
    const k = scale / before;
    view.scrollLeft = (view.scrollLeft + anchor.x) * k - anchor.x;
    view.scrollTop = (view.scrollTop + anchor.y) * k - anchor.y;
  }
  $("zoom").textContent = Math.round(scale * 100) + "%" + (state.fit ? " (fit)" : "");
  document.body.dataset.scale = String(scale);
  document.body.dataset.textPx = String(Math.round(fontPx() * scale * 100) / 100);
  resize();
}

function resize() {
  const maxH = Number(state.args.max_height) || 720, minH = Number(state.args.min_height) || 120;
  const content = state.natural ? state.natural.h * state.scale + 26 : 0;
  const boxH = Math.max(minH, Math.min(maxH, content + 2 + (view.scrollWidth > view.clientWidth ? 14 : 0)));
  view.style.height = boxH + "px";
  const total = $("bar").offsetHeight + boxH + (errorBox.hidden ? 0 : errorBox.offsetHeight + 6) + 4;
  post("streamlit:setFrameHeight", { height: total });
}

function showError(message) {
  errorBox.hidden = !message;
  errorBox.textContent = message || "";  // text, never markup
  resize();
}

function positive(v) {
  return typeof v === "number" && isFinite(v) && v > 0 && v < 1e6;
}

async function showImage(code, image) {  // the server's drawing, as an image only
  const img = new Image();
  img.alt = "Drawing";
  img.draggable = false;
  img.src = image.src;
  try { await img.decode(); } catch (e) { return; }  // not an image: Mermaid draws the text
  if (code !== state.code) return;
  const natural = positive(image.w) && positive(image.h) ? { w: image.w, h: image.h }
    : { w: img.naturalWidth || 400, h: img.naturalHeight || 200 };
  show(img, natural, "server", code);
}

// The picture in the frame (Mermaid's <svg> or the server's <img>), in one task: no frame without a picture.
// imageOf: the text whose server image is shown, until Mermaid redraws it.
function show(pic, natural, source, imageOf) {
  state.natural = natural;
  stage.replaceChildren(pic);
  stage.classList.remove("stale");
  state.imageOf = imageOf;
  showError("");
  apply(state.fit ? fitScale() : state.scale);
  document.body.dataset.drawn = String(state.n);
  document.body.dataset.source = source;
}

async function draw(code) {
  const later = state.imageOf === code;  // its image is shown: Mermaid can wait for the page to paint
  try {
    await loadMermaid(later);
  } catch (e) {
    if (!later) showError("Mermaid could not draw this text: " + String((e && e.message) || e).slice(0, 600));
    return;
  }
  if (code !== state.code) return;  // another text came meanwhile: it is drawn next
  const id = "mf-drawing-" + (++state.n);
  try {
    const { svg } = await mermaid.render(id, code);
    const doc = new DOMParser().parseFromString(svg, "image/svg+xml");
    const el = doc.documentElement;
    if (el.nodeName !== "svg") throw new Error("Mermaid returned no drawing");
    const box = el.viewBox && el.viewBox.baseVal;
    el.removeAttribute("style");  // Mermaid's max-width; the zoom sets the size
    show(document.importNode(el, true), { w: box && box.width ? box.width : 400, h: box && box.height ? box.height : 200 },
      "browser", null);
  } catch (e) {
    document.getElementById(id)?.remove();  // Mermaid's scratch element of a failed render
    document.getElementById("d" + id)?.remove();
    showError("Mermaid could not draw this text: " + String((e && e.message) || e).slice(0, 600));
  }
}

window.addEventListener("message", (event) => {
  const msg = event.data;
  if (!msg || msg.type !== "streamlit:render") return;
  const args = msg.args || {};
  state.args = args;
  if (args.code === state.code) { resize(); return; }
  if (state.code === null && typeof args.zoom === "number") { state.fit = false; state.scale = args.zoom; }
  state.code = args.code;
  // the server's image of an earlier text stays until this one is drawn (Mermaid may still be loading, or never
  // load): shown dimmed, it is not passed off as this text's drawing
  stage.classList.toggle("stale", state.imageOf !== null && state.imageOf !== args.code);
  const image = args.image;
  const offered = !!image && typeof image.src === "string" && image.src.startsWith("data:image/svg+xml;base64,");
  document.body.dataset.offered = offered ? "image" : "none";  // whether the server drew this text (tests)
  if (offered) {
    state.rendering = state.rendering.then(() => args.code === state.code ? showImage(args.code, image) : null);
  } else {
    loadMermaid(false).catch(() => {});  // needed now: not after a drawing still waiting for the page's idle time
  }
  state.rendering = state.rendering.then(() => args.code === state.code ? draw(args.code) : null);
});

function zoomTo(scale, anchor) {
  state.fit = false;
  apply(Math.min(4, Math.max(0.1, scale)), anchor);
}

function step(dir) {
  const i = ZOOMS.findIndex((z) => z >= state.scale - 1e-6);
  const next = dir > 0 ? ZOOMS.find((z) => z > state.scale + 1e-6) : [...ZOOMS].reverse().find((z) => z < state.scale - 1e-6);
  zoomTo(next || ZOOMS[Math.max(0, Math.min(ZOOMS.length - 1, i))]);
}

$("in").addEventListener("click", () => step(1));
$("out").addEventListener("click", () => step(-1));
$("one").addEventListener("click", () => zoomTo(1));
$("fit").addEventListener("click", () => { state.fit = true; apply(fitScale()); view.scrollTo(0, 0); });
window.addEventListener("resize", () => { if (state.fit) apply(fitScale()); else resize(); });

view.addEventListener("wheel", (e) => {  // plain wheel pans (the box scrolls); Ctrl + wheel or a pinch zooms
  if (!e.ctrlKey && !e.metaKey) return;
  e.preventDefault();
  const r = view.getBoundingClientRect();
  zoomTo(state.scale * Math.exp(-e.deltaY * 0.0015), { x: e.clientX - r.left, y: e.clientY - r.top });
}, { passive: false });

let drag = null;
view.addEventListener("pointerdown", (e) => {
  if (e.button !== 0) return;
  drag = { x: e.clientX, y: e.clientY, left: view.scrollLeft, top: view.scrollTop };
  view.classList.add("dragging");
  view.setPointerCapture(e.pointerId);
});
view.addEventListener("pointermove", (e) => {
  if (!drag) return;
  view.scrollLeft = drag.left - (e.clientX - drag.x);
  view.scrollTop = drag.top - (e.clientY - drag.y);
});
const stop = () => { drag = null; view.classList.remove("dragging"); };
view.addEventListener("pointerup", stop);
view.addEventListener("pointercancel", stop);

function note(text) {
  $("note").textContent = text;
  setTimeout(() => { if ($("note").textContent === text) $("note").textContent = ""; }, 2500);
}

function pageUrl() {
  try { return window.parent.location.href; } catch (e) { return document.referrer; }
}

$("link").addEventListener("click", async () => {
  try { await navigator.clipboard.writeText(pageUrl()); note("Link copied"); }
  catch (e) { note("Copy refused by the browser"); }
});

function pngBlob(scale) {  // the drawing as it is, at twice its natural size, on white
  const pic = picture();
  const w = Math.ceil(state.natural.w * scale), h = Math.ceil(state.natural.h * scale);
  let url = pic.src;  // the server's image: drawn as it is
  if (pic.tagName.toLowerCase() === "svg") {
    const copy = pic.cloneNode(true);
    copy.setAttribute("width", String(w));
    copy.setAttribute("height", String(h));
    copy.setAttribute("xmlns", "http://www.w3.org/2000/svg");
    url = URL.createObjectURL(new Blob([new XMLSerializer().serializeToString(copy)], { type: "image/svg+xml" }));
  }
  return new Promise((resolve, reject) => {
    const img = new Image();
    img.onload = () => {
      const canvas = document.createElement("canvas");
      canvas.width = w; canvas.height = h;
      const g = canvas.getContext("2d");
      g.fillStyle = "#ffffff"; g.fillRect(0, 0, w, h); g.drawImage(img, 0, 0, w, h);
      URL.revokeObjectURL(url);
      canvas.toBlob((b) => (b ? resolve(b) : reject(new Error("no image"))), "image/png");
    };
    img.onerror = () => { URL.revokeObjectURL(url); reject(new Error("the drawing could not be rasterised")); };
    img.src = url;
  });
}

$("png").addEventListener("click", async () => {
  if (!state.natural || !picture()) return;
  try {
    const blob = pngBlob(2);  // a promise: the clipboard write starts inside the click
    await navigator.clipboard.write([new ClipboardItem({ "image/png": blob })]);
    note("PNG copied");
  } catch (e) { note("Copy refused by the browser"); }
});

post("streamlit:componentReady", { apiVersion: 1 });
