// A Firebase database (the namespace's JSON tree) as a collapsible tree
// with live updates, as the Firebase console shows it: the streaming REST
// API (`GET /.json?ns=NS`, `Accept: text/event-stream`) sends the whole
// tree first (`put` at `/`), then every `put` and `patch` as they apply.

import { el, readEvents } from "./api.js";

/** Children shown per node; the rest are counted ("… N more"). */
const CHILDREN_SHOWN_MAX = 200;
/** Characters of one event the view takes at most (the first holds the
 * whole database): a larger one is not held in the browser (browse it
 * with the REST API, `?shallow=true`). */
const EVENT_CHARS_MAX = 32 * 1024 * 1024;

export function firebaseView(ns, root, onError) {
  let data = null;
  const expanded = new Set(["/"]);
  const status = el("span", { class: "pill", id: "fb-live", dataset: { state: "connecting" } }, "connecting");
  const body = el("div", { class: "fbtree", id: "fb-tree" });
  root.replaceChildren(
    el("div", { class: "toolbar" }, el("span", {}, "Firebase database "), el("code", {}, ns), status),
    el("p", { class: "muted" }, "Tern's Firebase REST, streaming and realtime APIs serve this tree (docs/firebase.md); changes show as they apply."),
    body,
  );
  const controller = new AbortController();

  // Every object of the tree has no prototype, so a key named `__proto__`
  // (a valid Firebase key any allowed writer can make) is just a key.
  function setAt(path, value, merge) {
    value = detach(value);
    const parts = path.split("/").filter(Boolean);
    if (parts.length === 0) {
      data = merge && isObject(data) && isObject(value) ? Object.assign(data, value) : value;
      prune();
      return;
    }
    if (!isObject(data)) data = Object.create(null);
    let node = data;
    for (const part of parts.slice(0, -1)) {
      if (!isObject(node[part])) node[part] = Object.create(null);
      node = node[part];
    }
    const last = parts.at(-1);
    if (merge && isObject(node[last]) && isObject(value)) Object.assign(node[last], value);
    else node[last] = value;
    prune();
  }

  /** Firebase has no empty objects and no nulls: they are absences. */
  function prune() {
    const clean = (v) => {
      if (!isObject(v)) return v;
      for (const [k, child] of Object.entries(v)) {
        const c = clean(child);
        if (c === null || c === undefined || (isObject(c) && Object.keys(c).length === 0)) delete v[k];
        else v[k] = c;
      }
      return v;
    };
    data = clean(data);
    if (isObject(data) && Object.keys(data).length === 0) data = null;
  }

  let frame = 0;
  function scheduleRender() {
    if (!frame) frame = requestAnimationFrame(() => { frame = 0; render(); });
  }

  function render() {
    body.replaceChildren(data === null ? el("p", { class: "muted", id: "fb-empty" }, "null (the database is empty)") : renderNode("/", "(root)", data));
  }

  function renderNode(path, name, value) {
    if (!isObject(value)) {
      return el("div", { class: "leaf", dataset: { path } }, el("span", { class: "key" }, name), ": ", el("span", { class: `value ${typeof value}` }, JSON.stringify(value)));
    }
    const keys = Object.keys(value).sort();
    const details = el("details", { dataset: { path }, open: expanded.has(path) },
      el("summary", {}, el("span", { class: "key" }, name), el("span", { class: "muted" }, ` {${keys.length}}`)));
    details.addEventListener("toggle", () => {
      if (details.open) {
        expanded.add(path);
        if (details.children.length === 1) fill();
      } else expanded.delete(path);
    });
    const fill = () => {
      for (const key of keys.slice(0, CHILDREN_SHOWN_MAX)) details.append(el("div", { class: "child" }, renderNode(`${path === "/" ? "" : path}/${key}`, key, value[key])));
      if (keys.length > CHILDREN_SHOWN_MAX) details.append(el("div", { class: "muted child" }, `… ${keys.length - CHILDREN_SHOWN_MAX} more`));
    };
    if (details.open) fill();
    return details;
  }

  (async () => {
    try {
      await readEvents(`/.json?ns=${encodeURIComponent(ns)}`, (name, text) => {
        // Events already buffered when the view stopped (too large, closed) are not shown.
        if (controller.signal.aborted) return;
        if (name !== "put" && name !== "patch") {
          if (name === "cancel" || name === "auth_revoked") { status.dataset.state = "failed"; status.textContent = name; }
          return;
        }
        if (text.length > EVENT_CHARS_MAX) {
          controller.abort();
          data = null;
          status.dataset.state = "failed";
          status.textContent = "too large";
          body.replaceChildren(el("p", { class: "message error", id: "fb-too-large" }, `This database sent an event of over ${EVENT_CHARS_MAX / 1024 / 1024} Mi characters: too large to hold here. Browse it with the REST API (?shallow=true).`));
          return;
        }
        const event = JSON.parse(text);
        setAt(event.path, event.data, name === "patch");
        status.dataset.state = "live";
        status.textContent = "live";
        scheduleRender();
      }, controller.signal);
      // The server ended the stream: what is shown is no longer live.
      if (!controller.signal.aborted) { status.dataset.state = "failed"; status.textContent = "ended: reopen the tab"; }
    } catch (e) {
      if (e.name === "AbortError") return;
      status.dataset.state = "failed";
      status.textContent = "not live";
      onError(e);
    }
  })();

  return { close: () => { controller.abort(); cancelAnimationFrame(frame); } };
}

function isObject(v) {
  return v !== null && typeof v === "object" && !Array.isArray(v);
}

/** `v` with every object made prototype-less (JSON.parse's own `__proto__`
 * keys stay plain keys: Object.assign onto a prototype-less object defines them). */
function detach(v) {
  if (Array.isArray(v)) return v.map(detach);
  if (!isObject(v)) return v;
  const out = Object.create(null);
  for (const key of Object.keys(v)) out[key] = detach(v[key]);
  return out;
}
