// The canvas's palette: an operator dragged from this strip onto the drawing becomes a node. A plain script
// beside streamlit-flow's React build (which has no palette): it reads the palette and the graph from the
// component's arguments and answers with the component's own value (the nodes it was given plus the new one),
// so the page adds the node to the text as it adds one drawn any other way.
"use strict";
(function () {
  const bar = document.getElementById("mf-palette");
  let args = null, shown = "";

  function draw(items) {
    const sig = JSON.stringify(items);
    if (sig === shown) return;
    shown = sig;
    bar.replaceChildren();
    bar.hidden = !items.length;
    const title = document.createElement("span");
    title.className = "mf-palette-title";
    title.textContent = "Drag onto the canvas:";
    bar.append(title);
    for (const it of items) {
      const chip = document.createElement("span");
      chip.className = "mf-chip";
      chip.draggable = true;
      chip.textContent = it.label;  // text, never markup
      chip.title = it.help || "";
      chip.dataset.item = it.item;
      chip.style.background = it.color || "#ffffff";
      chip.addEventListener("dragstart", (e) => {
        e.dataTransfer.setData("application/x-mermaidflow-item", it.item);
        e.dataTransfer.setData("text/plain", it.item);
        e.dataTransfer.effectAllowed = "copy";
      });
      bar.append(chip);
    }
  }

  window.addEventListener("message", (event) => {
    const msg = event.data;
    if (!msg || msg.type !== "streamlit:render") return;
    args = msg.args || {};
    draw(Array.isArray(args.palette) ? args.palette : []);
  });

  function onCanvas(e) {
    return args && e.target && e.target.closest && e.target.closest(".react-flow");
  }

  function flowPoint(e) {  // the drop point in the drawing's own coordinates (pan and zoom undone)
    const pane = document.querySelector(".react-flow"), vp = document.querySelector(".react-flow__viewport");
    const r = pane.getBoundingClientRect();
    const m = vp ? new DOMMatrixReadOnly(getComputedStyle(vp).transform) : new DOMMatrixReadOnly();
    return { x: (e.clientX - r.left - m.e) / (m.a || 1), y: (e.clientY - r.top - m.f) / (m.d || 1) };
  }

  document.addEventListener("dragover", (e) => {
    if (!onCanvas(e)) return;
    e.preventDefault();
    e.dataTransfer.dropEffect = "copy";
  });
  document.addEventListener("drop", (e) => {
    if (!onCanvas(e)) return;
    const item = e.dataTransfer.getData("application/x-mermaidflow-item") || e.dataTransfer.getData("text/plain");
    const spec = (args.palette || []).find((p) => p.item === item);
    if (!spec) return;
    e.preventDefault();
    const at = flowPoint(e);
    const node = {
      id: spec.id || "new-drop-" + Date.now(), type: spec.kind || "default", position: { x: at.x - 80, y: at.y - 20 },
      data: { content: spec.label, op: spec.op, mlabel: null }, sourcePosition: "bottom", targetPosition: "top",
      draggable: true, connectable: true, deletable: true,
    };
    const value = { nodes: [...(args.nodes || []), node], edges: args.edges || [], selectedId: null,
                    timestamp: Date.now() };
    window.parent.postMessage({ isStreamlitMessage: true, type: "streamlit:setComponentValue", value,
                                dataType: "json" }, "*");
    document.body.dataset.dropped = item;
  });
})();
