// The console's one way to call Tern's HTTP API: JSON in and out, the
// session's token as a bearer, errors as `ApiError` with the API's code.
// The token lives in sessionStorage only: gone when the tab closes,
// never in localStorage, a cookie or the URL.

const TOKEN_KEY = "tern.console.token";

export class ApiError extends Error {
  constructor(status, code, message, body) {
    super(message);
    this.status = status;
    this.code = code;
    this.body = body;
  }
}

export function token() {
  return sessionStorage.getItem(TOKEN_KEY) ?? "";
}

export function setToken(value) {
  if (value) sessionStorage.setItem(TOKEN_KEY, value);
  else sessionStorage.removeItem(TOKEN_KEY);
}

export function authHeaders() {
  const t = token();
  return t ? { Authorization: `Bearer ${t}` } : {};
}

/** Calls `method path` with an optional JSON body; resolves to the JSON answer. */
export async function api(method, path, body) {
  const headers = { ...authHeaders() };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  let response;
  try {
    response = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  } catch (e) {
    throw new ApiError(0, "unreachable", `Tern did not answer: ${e.message}`);
  }
  const text = await response.text();
  let json = null;
  try { json = text ? JSON.parse(text) : null; } catch { json = null; }
  if (!response.ok) {
    const error = json?.error ?? {};
    throw new ApiError(response.status, error.code ?? `http_${response.status}`, error.message ?? (text || response.statusText), json);
  }
  return json;
}

/** `/v1/ns/{ns}/…` with each key segment percent-encoded. */
export function recordPath(ns, pk, sk) {
  return `/v1/ns/${encodeURIComponent(ns)}/kv/${encodeURIComponent(pk)}/${encodeURIComponent(sk)}`;
}

/** A query string from an object, leaving out empty values. */
export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== "") q.set(k, String(v));
  const s = q.toString();
  return s ? `?${s}` : "";
}

/**
 * Reads a Server-Sent Events stream over fetch (EventSource cannot send
 * the token). Calls `onEvent(name, data)` per event until `signal` aborts
 * or the stream ends; rejects on an error answer.
 */
export async function readEvents(url, onEvent, signal) {
  const response = await fetch(url, { headers: { Accept: "text/event-stream", ...authHeaders() }, signal });
  if (!response.ok) {
    const text = await response.text();
    let message = text;
    try { const j = JSON.parse(text); message = j?.error?.message ?? j?.error ?? text; } catch { /* plain text */ }
    throw new ApiError(response.status, `http_${response.status}`, String(message));
  }
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, { stream: true });
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      let name = "message";
      const data = [];
      for (const line of block.split("\n")) {
        if (line.startsWith("event:")) name = line.slice(6).trim();
        else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
      }
      if (data.length) onEvent(name, data.join("\n"));
    }
  }
}

/** A small element builder: `el("td", {class: "v"}, "text", child)`; text is never parsed as HTML. */
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (k === "class") node.className = v;
    else if (k === "dataset") Object.assign(node.dataset, v);
    else node.setAttribute(k, v === true ? "" : String(v));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

export function formatTime(ms) {
  if (!ms) return "—";
  return new Date(ms).toISOString().replace("T", " ").replace("Z", " UTC");
}
