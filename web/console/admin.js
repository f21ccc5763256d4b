// The namespace's overview (per-partition state with holders, settings),
// its procedures, the cluster, and API keys.

import { api, el, formatTime } from "./api.js";

const cell = (v) => el("td", { class: typeof v === "number" ? "num" : "" }, v === null || v === undefined ? "—" : String(v));
const table = (id, headers, rows) =>
  el("table", { class: "grid", id }, el("thead", {}, el("tr", {}, headers.map((h) => el("th", {}, h)))), el("tbody", {}, rows));

export async function overviewView(ns, root, onError, refreshNamespaces) {
  let described, cluster;
  try {
    [described, cluster] = await Promise.all([api("GET", `/v1/ns/${encodeURIComponent(ns)}`), api("GET", "/v1/cluster").catch(() => null)]);
  } catch (e) {
    return onError(e);
  }
  const holders = new Map();
  for (const route of cluster?.routes ?? []) if (route.ns === ns) holders.set(route.partition, route.holder);
  const writeMode = el("select", { name: "write_mode", id: "write-mode" }, ["sequenced", "journaled"].map((m) => el("option", { value: m, selected: described.write_mode === m }, m)));
  const historyMax = el("input", { type: "number", min: 0, max: 64, step: 1, required: true, name: "history_max", id: "history-max", value: described.history_max ?? 0 });
  const message = el("p", { class: "message" });
  const settings = el("form", { class: "row", id: "settings", onsubmit: async (e) => {
    e.preventDefault();
    try {
      // Only what changed: the rest stays as the node has it.
      const changed = {};
      if (writeMode.value !== described.write_mode) changed.write_mode = writeMode.value;
      if (Number(historyMax.value) !== described.history_max) changed.history_max = Number(historyMax.value);
      await api("PUT", `/v1/ns/${encodeURIComponent(ns)}`, changed);
      Object.assign(described, changed);
      message.textContent = "Saved.";
      message.className = "message ok";
      refreshNamespaces();
    } catch (err) {
      message.textContent = err.message;
      message.className = "message error";
    }
  } }, el("label", {}, "write mode ", writeMode), el("label", {}, "history kept per record ", historyMax), el("button", { type: "submit" }, "Save settings"));
  const rows = described.state.map((p) => el("tr", { dataset: { partition: p.partition } },
    cell(p.partition), cell(p.status), cell(p.applied_offset), cell(p.lag), cell(p.records),
    cell(p.staleness_ms === null || p.staleness_ms === undefined ? null : `${p.staleness_ms} ms`),
    cell(holders.get(p.partition) ?? (p.held ? cluster?.self : null)),
    el("td", { class: "hash", title: p.state_hash ?? "" }, (p.state_hash ?? "—").slice(0, 16))));
  root.replaceChildren(
    el("h2", {}, `${ns} · ${described.partitions} partitions`, described.source_topic ? ` · on topic ${described.source_topic}` : ""),
    settings, message,
    table("partitions", ["partition", "status", "applied", "lag", "records", "staleness", "held by", "state hash"], rows),
  );
}

export async function proceduresView(ns, root, onError) {
  let list, described;
  try {
    [list, described] = await Promise.all([api("GET", `/v1/ns/${encodeURIComponent(ns)}/procedures`), api("GET", `/v1/ns/${encodeURIComponent(ns)}`)]);
  } catch (e) {
    return onError(e);
  }
  const backlog = described.state.reduce((sum, p) => sum + (p.procedures?.outbox_messages ?? 0), 0);
  const rows = list.procedures.map((p) => el("tr", { dataset: { name: p.name } },
    cell(p.name), cell(p.version), cell(p.runtime), cell(p.counters?.records ?? 0), cell(p.counters?.outputs ?? 0),
    cell(p.counters?.dead_letters ?? 0), cell(p.counters?.call_us_mean === undefined ? null : `${p.counters.call_us_mean} µs`),
    // `outputs` maps an output's name to its topic (the unmapped go to `<ns>.<output>`).
    cell(Object.entries(p.outputs ?? {}).map(([name, topic]) => `${name} → ${topic}`).join(", ") || null), cell(p.dead_letter_topic ?? null)));
  root.replaceChildren(
    el("h2", {}, `Procedures of ${ns}`),
    el("p", { class: "muted" }, `Outbox backlog (messages not yet published, all partitions): `, el("b", { id: "outbox-backlog" }, String(backlog)),
      ". Deploy with ", el("code", {}, "tern procedure deploy"), "; counters are this node's since it started."),
    list.procedures.length ? table("procedures", ["name", "version", "runtime", "records", "outputs", "dead letters", "mean call", "outputs mapped", "dead letter topic"], rows)
      : el("p", { class: "muted" }, "No procedures run in this namespace."),
  );
}

export async function clusterView(root, onError) {
  let c;
  try {
    c = await api("GET", "/v1/cluster");
  } catch (e) {
    return onError(e);
  }
  const nodes = c.nodes.map((n) => el("tr", { dataset: { node: n.id } },
    cell(n.id + (n.self ? " (this node)" : "")), cell(n.region), cell(n.group), cell(n.address), cell(n.state),
    cell(n.rtt_ms === null || n.rtt_ms === undefined ? null : formatMs(n.rtt_ms)), cell(n.reachable === false ? "no" : "yes"), cell(n.partitions.length)));
  const byHolder = new Map();
  for (const r of c.routes) {
    const key = `${r.ns} → ${r.holder ?? "nobody"}`;
    byHolder.set(key, [...(byHolder.get(key) ?? []), r.partition]);
  }
  root.replaceChildren(
    el("h2", {}, "Cluster"),
    el("p", { class: "muted" }, `This node: ${c.self} in region ${c.region ?? "—"}.`),
    table("nodes", ["node", "region", "group", "address", "state", "round trip", "reachable", "partitions served"], nodes),
    el("h3", {}, "Who serves which partitions (from this node)"),
    table("routes", ["namespace → holder", "partitions"], [...byHolder].map(([k, parts]) => el("tr", {}, cell(k), cell(compactRanges(parts))))),
  );
}

export async function tokensView(root, onError, namespaces) {
  let listed;
  try {
    listed = await api("GET", "/v1/tokens");
  } catch (e) {
    if (e.code === "authentication_off") {
      root.replaceChildren(el("h2", {}, "API keys"), el("p", { class: "muted", id: "tokens-off" }, "Authentication is off on this node: it takes no tokens (start it with --auth)."));
      return;
    }
    return onError(e);
  }
  const ns = el("select", { name: "ns" }, [...namespaces, "*"].map((n) => el("option", { value: n }, n)));
  const prefix = el("input", { name: "prefix", placeholder: "pk prefix (empty: all)" });
  const verbs = ["read", "write", "watch", "admin"].map((v) => el("label", {}, el("input", { type: "checkbox", name: "verb", value: v, checked: v === "read" }), ` ${v}`));
  const description = el("input", { name: "description", placeholder: "what it is for" });
  const made = el("div", { id: "token-made" });
  const form = el("form", { class: "row", id: "token-form", onsubmit: async (e) => {
    e.preventDefault();
    const chosen = [...form.querySelectorAll("input[name=verb]:checked")].map((i) => i.value);
    try {
      const t = await api("POST", "/v1/tokens", { ns: ns.value, prefix: prefix.value, verbs: chosen, description: description.value });
      made.replaceChildren(el("p", { class: "message ok" }, "Made key ", el("code", {}, t.id), ". Copy its token now: it is never shown again."), el("pre", { class: "token", id: "new-token" }, t.token));
      await tokensView(root, onError, namespaces).then(() => root.prepend(made));
    } catch (err) {
      made.replaceChildren(el("p", { class: "message error" }, err.message));
    }
  } }, ns, prefix, ...verbs, description, el("button", { type: "submit" }, "Make key"));
  const rows = listed.tokens.map((t) => el("tr", { dataset: { id: t.id } },
    cell(t.id), cell(t.grants.map((g) => `${g.ns}:${g.prefix || "*"} ${g.verbs.join ? g.verbs.join(",") : g.verbs}`).join("; ")),
    cell(t.description || null), cell(t.created_by ?? null), cell(formatTime(t.created_ms)),
    el("td", {}, el("button", { type: "button", class: "danger small", onclick: async () => {
      if (!confirm(`Revoke key ${t.id}? Calls with it are refused at once here, within seconds elsewhere.`)) return;
      try { await api("DELETE", `/v1/tokens/${encodeURIComponent(t.id)}`); await tokensView(root, onError, namespaces); } catch (err) { onError(err); }
    } }, "revoke"))));
  root.replaceChildren(el("h2", {}, "API keys"), form, made,
    listed.tokens.length ? table("tokens", ["id", "grants", "description", "made by", "made", ""], rows) : el("p", { class: "muted" }, "No API keys you administer."));
}

/** A round trip as people read it: 0.72 ms, 12.3 ms, 140 ms (not 0.7197250000000001 ms). */
function formatMs(ms) {
  const digits = ms < 10 ? 2 : ms < 100 ? 1 : 0;
  return `${ms.toFixed(digits)} ms`;
}

/** [0,1,2,5,7,8] → "0–2, 5, 7–8". */
function compactRanges(numbers) {
  const sorted = [...numbers].sort((a, b) => a - b);
  const out = [];
  for (let i = 0; i < sorted.length; ) {
    let j = i;
    while (j + 1 < sorted.length && sorted[j + 1] === sorted[j] + 1) j++;
    out.push(i === j ? `${sorted[i]}` : `${sorted[i]}–${sorted[j]}`);
    i = j + 1;
  }
  return out.join(", ");
}
