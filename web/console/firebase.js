// A Firebase database (the namespace's JSON tree) as a collapsible tree
// with live updates, as the Firebase console shows it: the streaming REST
// API (`GET /.json?ns=NS`, `Accept: text/event-stream`) sends the whole
// tree first (`put` at `/`), then every `put` and `patch` as they apply.

import { el, readEvents } from "./api.js";

/** Children shown per node; the rest are counted ("… N more"). */
const CHILDREN_SHOWN_MAX = 200;

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

  function setAt(path, value, merge) {
    const parts = path.split("/").filter(Boolean);
    if (parts.length === 0) {
      data = merge && isObject(data) && isObject(value) ? { ...data, ...value } : value;
      prune();
      return;
    }
    if (!isObject(data)) data = {};
    let node = data;
    for (const part of parts.slice(0, -1)) {
      if (!isObject(node[part])) node[part] = {};
      node = node[part];
    }
    const last = parts.at(-1);
    if (merge && isObject(node[last]) && isObject(value)) node[last] = { ...node[last], ...value };
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
        if (name !== "put" && name !== "patch") {
          if (name === "cancel" || name === "auth_revoked") { status.dataset.state = "failed"; status.textContent = name; }
          return;
        }
        const event = JSON.parse(text);
        setAt(event.path, event.data, name === "patch");
        status.dataset.state = "live";
        status.textContent = "live";
        render();
      }, controller.signal);
    } catch (e) {
      if (e.name === "AbortError") return;
      status.dataset.state = "failed";
      status.textContent = "not live";
      onError(e);
    }
  })();

  return { close: () => controller.abort() };
}

function isObject(v) {
  return v !== null && typeof v === "object" && !Array.isArray(v);
}
