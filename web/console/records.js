// A namespace's records: a key tree (pks split on "/"), prefix search,
// paging through the whole namespace (`GET /v1/ns/{ns}/kv`), a record's
// JSON editor whose saves and deletes send `if_version` (two people
// editing never lose each other's change), its history, and live updates
// of what is on screen (a namespace-wide watch from now).

import { api, el, formatTime, getRecord, LOSSLESS, printJson, query, token, writeRecord } from "./api.js";
import { TernClient } from "/demo/client/index.js";

/** Records per listing page (the API allows 1 to 1000). */
const PAGE_LIMIT = 200;
/** Records the console holds in memory at most. Paging goes on past it
 * through the whole namespace: a page that would hold more starts a new
 * window (the records before it are let go; "Back to the start" reads
 * the first page again). */
const HELD_MAX = heldMax(new URLSearchParams(location.search).get("held_max"));

/** `?held_max=N` (a page, 200, to 20,000) holds fewer, for a small browser
 * (and for the console's own test, which pages past it with a few hundred
 * records). Never below a page: a window holds at least one. */
function heldMax(asked) {
  const n = Number(asked);
  return Number.isInteger(n) && n >= PAGE_LIMIT && n <= 20_000 ? n : 20_000;
}

const keyOf = (pk, sk) => `${pk}\u0000${sk}`;

export function recordsView(ns, root, onError) {
  // `generation` counts searches: a page read for an older one is dropped,
  // and the newest is read once the one in flight ends.
  const state = { prefix: "", records: new Map(), cursor: null, more: false, loading: false, generation: 0, pending: false, open: null, closed: false, watch: null };
  const search = el("input", { type: "search", placeholder: "pk prefix, e.g. svc/", class: "search", name: "prefix" });
  const tree = el("div", { class: "tree", id: "key-tree" });
  const count = el("span", { class: "muted", id: "record-count" });
  const more = el("button", { type: "button", class: "secondary", id: "load-more", hidden: true, onclick: () => loadPage() }, "Load more");
  const restart = el("button", { type: "button", class: "secondary", id: "back-to-start", hidden: true, onclick: () => reload(state.prefix) }, "Back to the start");
  const live = el("span", { class: "pill", id: "live", dataset: { state: "connecting" } }, "connecting");
  const panel = el("section", { class: "panel", id: "record-panel" });
  const newButton = el("button", { type: "button", id: "new-record", onclick: () => showNewForm() }, "New record");
  root.replaceChildren(
    el("div", { class: "split" },
      el("aside", { class: "keys" },
        el("div", { class: "toolbar" }, search, newButton),
        el("div", { class: "toolbar" }, count, live),
        tree, more, restart),
      panel),
  );
  showEmptyPanel();

  let searchTimer = 0;
  search.addEventListener("input", () => {
    clearTimeout(searchTimer);
    searchTimer = setTimeout(() => reload(search.value), 250);
  });

  async function reload(prefix) {
    state.prefix = prefix;
    state.generation += 1;
    state.records = new Map();
    state.cursor = null;
    state.more = false;
    state.dropped = 0;
    state.passed = 0;
    state.firstKey = undefined;
    renderTree();
    await loadPage();
  }

  async function loadPage() {
    if (state.closed) return;
    if (state.loading) {
      state.pending = true; // read once the page in flight is in
      return;
    }
    state.loading = true;
    const generation = state.generation;
    try {
      const page = await api("GET", `/v1/ns/${encodeURIComponent(ns)}/kv${query({ prefix: state.prefix, limit: PAGE_LIMIT, cursor: state.cursor })}`);
      if (generation !== state.generation || state.closed) return; // a newer search took over
      if (state.records.size + page.items.length > HELD_MAX && page.items.length > 0) {
        // A new window: what was held is let go, and changes to keys before
        // this page are no longer shown (they are before the window).
        state.passed += state.records.size;
        state.records = new Map();
        state.dropped = 0;
        state.firstKey = keyOf(page.items[0].pk, page.items[0].sk);
        tree.scrollTop = 0;
      }
      for (const r of page.items) state.records.set(keyOf(r.pk, r.sk), r);
      state.cursor = page.next_cursor;
      state.more = page.next_cursor !== null;
      renderTree();
    } catch (e) {
      onError(e);
    } finally {
      state.loading = false;
      if (state.pending) {
        state.pending = false;
        if (generation !== state.generation) loadPage();
      }
    }
  }

  /** Whether a key changed on the server belongs on screen: under the
   * prefix, within what is loaded (a later page shows it otherwise), and
   * within the window paged to, and within what the console holds
   * (`HELD_MAX`). */
  function onScreen(pk, sk) {
    if (!pk.startsWith(state.prefix)) return false;
    if (pk.startsWith(".") && !state.prefix.startsWith(".")) return false;
    if (state.records.has(keyOf(pk, sk))) return true;
    if (state.firstKey !== undefined && keyOf(pk, sk) < state.firstKey) return false;
    if (state.records.size >= HELD_MAX) {
      // Not held: said, and a narrower prefix shows it (paging cannot: it is past no cursor).
      state.dropped = (state.dropped ?? 0) + 1;
      return false;
    }
    if (!state.more) return true;
    return state.lastKey !== undefined && keyOf(pk, sk) <= state.lastKey;
  }

  /** Renders at most once a frame, however many changes arrive. */
  let frame = 0;
  let flash = null;
  function scheduleRender(flashKey) {
    flash = flashKey ?? flash;
    if (frame) return;
    frame = requestAnimationFrame(() => {
      frame = 0;
      if (state.sortNeeded) sortRecords();
      renderTree(flash);
      flash = null;
    });
  }

  function startWatch() {
    const client = new TernClient({ url: "", token: token() || undefined });
    const watch = client.watch({ ns, from: "now" });
    state.watch = watch;
    watch.on((event) => {
      if (state.closed) return;
      switch (event.type) {
        case "connected": case "progress": case "synced":
          live.dataset.state = "live"; live.textContent = "live"; break;
        case "disconnected":
          live.dataset.state = "reconnecting"; live.textContent = "reconnecting"; break;
        case "failed":
          live.dataset.state = "failed"; live.textContent = "not live"; onError(event.error); break;
        case "put": {
          const r = event.record;
          if (onScreen(r.pk, r.sk)) {
            const key = keyOf(r.pk, r.sk);
            state.sortNeeded ||= !state.records.has(key);
            state.records.set(key, r);
            scheduleRender(key);
          }
          if (state.open && state.open.pk === r.pk && state.open.sk === r.sk) state.open.changedOnServer(r.version);
          break;
        }
        case "delete": {
          if (state.records.delete(keyOf(event.pk, event.sk))) scheduleRender();
          if (state.open && state.open.pk === event.pk && state.open.sk === event.sk) state.open.changedOnServer(null, event.version);
          break;
        }
      }
    });
  }

  function sortRecords() {
    state.records = new Map([...state.records.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
    state.sortNeeded = false;
  }

  /** The loaded records as a tree: pks split on "/", each pk's records under it. */
  function renderTree(flashKey) {
    state.lastKey = state.records.size ? [...state.records.keys()].at(-1) : undefined;
    const rootNode = { folders: new Map(), pks: new Map() };
    for (const r of state.records.values()) {
      const parts = r.pk.split("/");
      let node = rootNode;
      for (const part of parts.slice(0, -1)) {
        if (!node.folders.has(part)) node.folders.set(part, { folders: new Map(), pks: new Map() });
        node = node.folders.get(part);
      }
      const leaf = parts.at(-1);
      if (!node.pks.has(leaf)) node.pks.set(leaf, []);
      node.pks.get(leaf).push(r);
    }
    const renderNode = (node, path, depth) => {
      const list = el("ul");
      for (const [name, folder] of node.folders) {
        const full = `${path}${name}/`;
        const summary = el("summary", {}, el("span", { class: "folder" }, `${name}/`),
          el("button", { type: "button", class: "link", title: `Search ${full}`, onclick: (e) => { e.preventDefault(); search.value = full; reload(full); } }, "⌕"));
        list.append(el("li", {}, el("details", { open: depth < 2 }, summary, renderNode(folder, full, depth + 1))));
      }
      for (const [name, records] of node.pks) {
        const link = (r, label) => el("a", {
          href: "#", class: `record${flashKey === keyOf(r.pk, r.sk) ? " changed" : ""}${state.open?.pk === r.pk && state.open?.sk === r.sk ? " selected" : ""}`,
          dataset: { pk: r.pk, sk: r.sk },
          onclick: (e) => { e.preventDefault(); openRecord(r.pk, r.sk); },
        }, label);
        if (records.length === 1 && records[0].sk === "") list.append(el("li", {}, link(records[0], name)));
        else list.append(el("li", {}, el("details", { open: true }, el("summary", {}, el("span", { class: "pk" }, name)),
          el("ul", {}, records.map((r) => el("li", {}, link(r, r.sk === "" ? "(empty sk)" : r.sk)))))));
      }
      return list;
    };
    tree.replaceChildren(state.records.size ? renderNode(rootNode, "", 0) : el("p", { class: "muted", id: "no-records" }, state.loading ? "Loading…" : "No records here."));
    const from = state.passed ? `records ${state.passed + 1} to ${state.passed + state.records.size}` : `${state.records.size} records`;
    count.textContent = `${from}${state.more ? " of more" : ""}${state.dropped ? ` (${state.dropped} changes past ${HELD_MAX} not shown: narrow the prefix)` : ""}`;
    more.hidden = !state.more;
    restart.hidden = !state.passed;
  }

  function showEmptyPanel() {
    state.open = null;
    panel.replaceChildren(el("div", { class: "muted hint" }, "Pick a record in the tree, or make a new one."));
  }

  function showNewForm() {
    state.open = null;
    const pk = el("input", { name: "pk", placeholder: "pk", required: true });
    const sk = el("input", { name: "sk", placeholder: "sk (may be empty)" });
    const editor = jsonEditor("{}");
    const message = el("p", { class: "message" });
    const form = el("form", { id: "new-form", onsubmit: async (e) => {
      e.preventDefault();
      if (!editor.valid()) return;
      try {
        await writeRecord(ns, pk.value, sk.value, editor.text(), { ifAbsent: true });
        openRecord(pk.value, sk.value);
      } catch (err) {
        message.textContent = err.code === "condition_failed" ? "A record with this key exists already: open it to edit it." : err.message;
        message.className = "message error";
      }
    } }, el("h2", {}, "New record"), el("div", { class: "row" }, pk, sk), editor.node, el("div", { class: "row" }, el("button", { type: "submit" }, "Create")), message);
    panel.replaceChildren(form);
    pk.focus();
  }

  async function openRecord(pk, sk) {
    let record;
    try {
      record = await getRecord(ns, pk, sk);
    } catch (e) {
      if (e.status === 404) { panel.replaceChildren(el("p", { class: "message error" }, `${pk} / ${sk}: no such record (deleted?)`)); return; }
      return onError(e);
    }
    showRecord(record);
    renderTree();
  }

  /** The editor of one record. */
  function showRecord(record) {
    let base = record; // the version the editor started from
    const editor = jsonEditor(printJson(record.value));
    const status = el("p", { class: "message", id: "record-message" });
    const meta = el("p", { class: "muted", id: "record-meta" });
    const historyBox = el("div", { id: "history" });
    const setMeta = () => { meta.textContent = `version ${base.version} · position ${base.position ?? "—"}`; };
    setMeta();
    const say = (text, kind = "") => { status.textContent = text; status.className = `message ${kind}`; };
    if (!LOSSLESS) say("This browser cannot read numbers exactly: a number past 2^53 in this value would be saved rounded.", "error");
    const save = el("button", { type: "button", id: "save", onclick: () => write(base.version) }, "Save");
    const del = el("button", { type: "button", class: "danger", id: "delete", onclick: () => remove() }, "Delete");
    const historyButton = el("button", { type: "button", class: "secondary", id: "show-history", onclick: () => showHistory() }, "History");
    const conflict = el("div", { class: "conflict", id: "conflict", hidden: true });

    async function write(ifVersion) {
      if (!editor.valid()) return;
      try {
        // The text as typed: re-serializing could change it (digits past 2^53).
        const answer = await writeRecord(ns, record.pk, record.sk, editor.text(), { ifVersion });
        base = { ...base, version: answer.version, position: answer.position };
        editor.markClean();
        conflict.hidden = true;
        setMeta();
        say(`Saved: version ${answer.version}.`, "ok");
      } catch (e) {
        if (e.code === "condition_failed") showConflict(e.body?.error?.current_version ?? e.body?.current_version);
        else say(e.message, "error");
      }
    }

    async function remove() {
      if (!confirm(`Delete ${record.pk} / ${record.sk === "" ? "(empty sk)" : record.sk} at version ${base.version}?`)) return;
      try {
        await writeRecord(ns, record.pk, record.sk, null, { ifVersion: base.version });
        state.records.delete(keyOf(record.pk, record.sk));
        renderTree();
        panel.replaceChildren(el("p", { class: "message ok", id: "record-message" }, `Deleted ${record.pk} / ${record.sk}.`));
        state.open = null;
      } catch (e) {
        if (e.code === "condition_failed") showConflict(e.body?.error?.current_version ?? e.body?.current_version);
        else say(e.message, "error");
      }
    }

    /** Someone else wrote (or deleted) the record since this editor loaded it. */
    async function showConflict(currentVersion) {
      let theirs = null;
      try { theirs = await getRecord(ns, record.pk, record.sk); } catch (e) { if (e.status !== 404) return say(e.message, "error"); }
      conflict.replaceChildren(
        el("strong", {}, theirs ? `Conflict: someone else changed this record (now version ${theirs.version}).` : "Conflict: someone else deleted this record."),
        el("p", {}, "Nothing was written. Your edit is still in the editor."),
        theirs ? el("pre", { class: "json" }, printJson(theirs.value)) : null,
        el("div", { class: "row" },
          theirs ? el("button", { type: "button", class: "secondary", id: "take-theirs", onclick: () => { base = theirs; editor.set(printJson(theirs.value)); conflict.hidden = true; setMeta(); say("Loaded their version."); } }, "Discard mine, load theirs") : null,
          theirs ? el("button", { type: "button", class: "danger", id: "overwrite", onclick: () => write(theirs.version) }, `Overwrite version ${theirs.version} with mine`) : null),
      );
      conflict.hidden = false;
      say(`Not saved: the record is at version ${currentVersion ?? theirs?.version ?? "(deleted)"}, not ${base.version}.`, "error");
    }

    async function showHistory() {
      try {
        const h = await api("GET", `/v1/ns/${encodeURIComponent(ns)}/history${query({ pk: record.pk, sk: record.sk })}`, undefined, { lossless: true });
        if (h.history_max === 0) {
          historyBox.replaceChildren(el("p", { class: "muted" }, "This namespace keeps no history (history_max is 0): set it in Overview."));
          return;
        }
        historyBox.replaceChildren(el("h3", {}, `History (up to ${h.history_max} versions)`), el("table", { class: "grid" },
          el("thead", {}, el("tr", {}, ["version", "op", "time", "writer", "value"].map((t) => el("th", {}, t)))),
          el("tbody", {}, h.versions.map((v) => el("tr", { dataset: { version: v.version } },
            el("td", { class: "num" }, v.version), el("td", {}, v.op), el("td", {}, formatTime(v.time_ms)),
            el("td", {}, v.writer || "—"), el("td", { class: "json" }, v.op === "delete" ? "(deleted)" : printJson(v.value, 0)))))));
      } catch (e) {
        onError(e);
      }
    }

    state.open = {
      pk: record.pk,
      sk: record.sk,
      /** A change on the server (its new version, or null: deleted):
       * shown at once if nothing is being edited (read again, as its text). */
      async changedOnServer(version, deletedAt) {
        if (version !== null && version === base.version) return;
        if (editor.dirty()) {
          say(version !== null ? `Changed on the server (version ${version}) while you edit: saving will show a conflict.` : "Deleted on the server while you edit.", "error");
          return;
        }
        if (version === null) return say(`Deleted on the server (at ${deletedAt}).`, "error");
        try {
          const newer = await getRecord(ns, record.pk, record.sk);
          if (editor.dirty() || newer.version <= base.version) return;
          base = newer;
          editor.set(printJson(newer.value));
          setMeta();
          say(`Updated live: version ${newer.version}.`);
        } catch (e) {
          if (e.status !== 404) onError(e);
        }
      },
    };
    panel.replaceChildren(
      el("h2", { id: "record-title" }, el("span", { class: "pk" }, record.pk), " / ", el("span", { class: "sk" }, record.sk === "" ? "(empty sk)" : record.sk)),
      meta, editor.node, el("div", { class: "row" }, save, del, historyButton), status, conflict, historyBox,
    );
  }

  startWatch();
  reload("");
  return {
    close() {
      state.closed = true;
      cancelAnimationFrame(frame);
      state.watch?.close();
    },
  };
}

/** A textarea that checks its JSON as you type. */
function jsonEditor(text) {
  const area = el("textarea", { class: "json-editor", id: "editor", spellcheck: "false", rows: 14 });
  area.value = text;
  let clean = text;
  const check = el("p", { class: "check", id: "json-check" });
  const validate = () => {
    try { JSON.parse(area.value); check.textContent = "valid JSON"; check.className = "check ok"; return true; } catch (e) { check.textContent = e.message; check.className = "check error"; return false; }
  };
  area.addEventListener("input", validate);
  validate();
  return {
    node: el("div", {}, area, check),
    valid: validate,
    text: () => area.value,
    dirty: () => area.value !== clean,
    markClean: () => { clean = area.value; },
    set: (t) => { area.value = t; clean = t; validate(); },
  };
}
