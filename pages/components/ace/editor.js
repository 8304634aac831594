// The Editor's text box: Ace from streamlit-ace's own build, without its React, Material UI and Arrow.
// Streamlit's component protocol by hand (postMessage), as pages/components/mermaid/drawing.js does. The
// stock frame ran all of that before the first line of text showed; this runs Ace alone (pages/ace.py).
//
// The build's vendor chunk only registers its modules (webpackJsonpstreamlit_ace); nothing in it runs until
// it is required here. Two are: Ace itself and the build's module-URL table (where each theme, mode and key
// binding file is), found by what they define rather than by number, which changes with every build.
(() => {  // nothing at the top level: a global `ace` binding would hide Ace's own window.ace
"use strict";

const ACE = 'define("ace/ace"';  // Ace's own module: the one that defines ace/ace
const URLS = "ace.config.setModuleUrl(";  // the table of the build's theme, mode and key-binding files
const DEBOUNCE_MS = 200;  // as streamlit-ace sends a typed text with autoUpdate

function post(type, extra) {
  window.parent.postMessage(Object.assign({ isStreamlitMessage: true, type }, extra), "*");
}

// webpack 4's require, the part these modules use: module objects and the public path of file URLs
function loadAce() {
  const chunks = window.webpackJsonpstreamlit_ace || [];
  const modules = [];
  for (const [, mods] of chunks) for (const id in mods) modules[id] = mods[id];
  const cache = {};
  const req = (id) => {
    if (cache[id]) return cache[id].exports;
    const m = (cache[id] = { i: id, l: false, exports: {} });
    modules[id].call(m.exports, m, m.exports, req);
    m.l = true;
    return m.exports;
  };
  req.p = "./";
  const find = (test) => modules.findIndex((f) => typeof f === "function" && test(Function.prototype.toString.call(f)));
  const ace = find((s) => s.includes(ACE));
  const urls = find((s) => s.startsWith(`function(e,t,n){${URLS}`) || s.includes(`{${URLS}`));
  if (ace < 0 || urls < 0) throw new Error("streamlit-ace's build has no Ace or no module-URL table");
  req(ace);
  req(urls);
  return window.ace;
}

const host = document.getElementById("editor");
let editor = null, args = null, timer = null, annotations = "[]";

function send() {
  clearTimeout(timer);
  timer = null;
  post("streamlit:setComponentValue", { value: editor.getValue(), dataType: "json" });
}

function create(ace) {
  editor = ace.edit(host);
  const session = editor.getSession();
  session.setMode(`ace/mode/${args.mode}`);
  editor.setTheme(`ace/theme/${args.theme}`);
  editor.setFontSize(`${args.fontSize}px`);
  session.setValue(args.defaultValue || "");
  editor.navigateFileEnd();
  editor.renderer.setShowGutter(args.showGutter);
  session.setUseWrapMode(args.wrapEnabled);
  editor.setShowPrintMargin(args.showPrintMargin);
  // no height: the box grows with the text (minLines up), and the frame with the box, as streamlit-ace does
  editor.setOptions({ minLines: args.minLines, maxLines: args.height ? args.maxLines : Infinity,
                      readOnly: args.readOnly, tabSize: args.tabSize, highlightActiveLine: true });
  if (args.keyboardHandler) editor.setKeyboardHandler(`ace/keyboard/${args.keyboardHandler}`);
  // Ctrl/Cmd+Enter adds a line (streamlit-ace's "apply" key, which autoUpdate makes a plain new line)
  editor.commands.removeCommand("addLineAfter");
  editor.commands.addCommand({ name: "updateStreamlit", bindKey: { mac: "cmd-return", win: "ctrl-return" },
    exec: (e) => { e.selection.clearSelection(); e.navigateLineEnd(); e.insert("\n"); } });
  editor.on("change", () => {
    // Ace moves the gutter's marks with the text, and drops the mark of a line a line break is typed in: the
    // next render's marks (the checker's for the new text, often the same as before) are set again, always
    annotations = null;
    clearTimeout(timer);
    timer = setTimeout(send, args.autoUpdate ? DEBOUNCE_MS : 0);
  });
  new ResizeObserver((entries) => post("streamlit:setFrameHeight",
    { height: entries[0].contentRect.height + 15 })).observe(host);
}

function update() {
  const marks = JSON.stringify(args.annotations || []);
  if (marks !== annotations) {  // the checker's marks in the gutter (the text itself is the user's)
    annotations = marks;
    editor.getSession().setAnnotations(args.annotations || []);
  }
  editor.setFontSize(`${args.fontSize}px`);
  editor.setReadOnly(!!args.readOnly);
}

// Ace is read before any message can arrive (this whole file runs as one task): componentReady goes first so
// that the render's round trip through the app's busy page overlaps reading Ace
post("streamlit:componentReady", { apiVersion: 1 });
const ace = loadAce();
ace.config.loadModule("ace/theme/chrome");  // what pages/ace.py asks for, fetched while the render is on its way
ace.config.loadModule("ace/keyboard/vscode");
window.addEventListener("message", (event) => {
  const msg = event.data;
  if (event.source !== window.parent || !msg || msg.type !== "streamlit:render") return;  // the app's only
  args = msg.args;
  if (!editor) create(ace);
  update();
});
})();
