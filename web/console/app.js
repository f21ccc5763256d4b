// The console's shell: login (a token kept in this tab's session only),
// the namespaces (listed, created), and the page the URL's hash names:
// #/ns/NAME/records | firebase | overview | procedures, #/cluster, #/tokens.

import { api, el, setToken, token } from "./api.js";
import { recordsView } from "./records.js";
import { firebaseView } from "./firebase.js";
import { clusterView, overviewView, proceduresView, tokensView } from "./admin.js";

const $ = (id) => document.getElementById(id);
let current = null; // the open view's { close } (watches, streams)
let namespaces = [];

function showError(e) {
  if (e?.status === 401) return showLogin(e.message);
  const box = $("error");
  box.textContent = e?.message ?? String(e);
  box.hidden = false;
}

function clearError() {
  $("error").hidden = true;
}

function showLogin(why) {
  current?.close?.();
  current = null;
  $("login").hidden = false;
  $("app").hidden = true;
  $("login-why").textContent = why ?? "";
  $("login-token").focus();
}

async function refreshNamespaces() {
  const listed = await api("GET", "/v1/ns");
  namespaces = listed.namespaces.map((n) => n.name).sort();
  const route = parseRoute();
  $("namespaces").replaceChildren(...namespaces.map((name) =>
    el("li", {}, el("a", { href: `#/ns/${encodeURIComponent(name)}/records`, class: route.ns === name ? "selected" : "", dataset: { ns: name } }, name))));
  $("no-namespaces").hidden = namespaces.length > 0;
}

function parseRoute() {
  let parts;
  try {
    parts = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
  } catch {
    return {}; // a hash that is not percent-encoding: the start page
  }
  if (parts[0] === "ns" && parts[1]) return { ns: parts[1], tab: parts[2] || "records" };
  if (parts[0] === "cluster" || parts[0] === "tokens") return { page: parts[0] };
  return {};
}

async function route() {
  current?.close?.();
  current = null;
  clearError();
  const r = parseRoute();
  const main = $("main");
  for (const a of document.querySelectorAll("#namespaces a")) a.classList.toggle("selected", a.dataset.ns === r.ns);
  for (const a of document.querySelectorAll("nav.pages a")) a.classList.toggle("selected", a.dataset.page === r.page);
  if (r.ns) {
    if (!namespaces.includes(r.ns)) {
      main.replaceChildren(el("p", { class: "message error", id: "unknown-ns" }, `No namespace ${r.ns} (or none you may see).`));
      return;
    }
    const tabs = ["records", "firebase", "overview", "procedures"];
    const body = el("div", { id: "tab-body" });
    main.replaceChildren(
      el("nav", { class: "tabs" }, tabs.map((t) => el("a", { href: `#/ns/${encodeURIComponent(r.ns)}/${t}`, class: t === r.tab ? "selected" : "", dataset: { tab: t } }, t))),
      body,
    );
    if (r.tab === "records") current = recordsView(r.ns, body, showError);
    else if (r.tab === "firebase") current = firebaseView(r.ns, body, showError);
    else if (r.tab === "overview") await overviewView(r.ns, body, showError, () => refreshNamespaces().catch(showError));
    else if (r.tab === "procedures") await proceduresView(r.ns, body, showError);
    return;
  }
  if (r.page === "cluster") return clusterView(main, showError);
  if (r.page === "tokens") return tokensView(main, showError, namespaces);
  main.replaceChildren(el("div", { class: "hint" }, el("h2", {}, "Tern console"),
    el("p", {}, "Pick a namespace to browse, edit and watch its records, or make one."),
    el("p", { class: "muted" }, "Everything here goes through Tern's HTTP API (docs/api.md), with the token you signed in with.")));
}

async function start() {
  $("login").hidden = true;
  $("app").hidden = false;
  $("who").textContent = token() ? "signed in with a token" : "no token";
  $("sign-out").hidden = !token();
  try {
    await refreshNamespaces();
  } catch (e) {
    return showError(e);
  }
  await route();
}

$("login-form").addEventListener("submit", (e) => {
  e.preventDefault();
  setToken($("login-token").value.trim());
  $("login-token").value = "";
  start();
});
$("sign-out").addEventListener("click", () => {
  setToken("");
  showLogin("Signed out.");
});
$("create-ns").addEventListener("submit", async (e) => {
  e.preventDefault();
  const form = new FormData(e.target);
  const name = String(form.get("name"));
  if (namespaces.includes(name)) {
    // PUT would change its settings: that is the overview's job.
    return showError(new Error(`Namespace ${name} exists: change its settings in its Overview.`));
  }
  try {
    await api("PUT", `/v1/ns/${encodeURIComponent(name)}`, {
      partitions: Number(form.get("partitions")),
      write_mode: String(form.get("write_mode")),
      history_max: Number(form.get("history_max")),
    });
    e.target.reset();
    await refreshNamespaces();
    location.hash = `#/ns/${encodeURIComponent(name)}/records`;
  } catch (err) {
    showError(err);
  }
});
window.addEventListener("hashchange", () => route().catch(showError));
start();
