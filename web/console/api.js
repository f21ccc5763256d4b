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

/**
 * Calls `method path` with an optional body (an object, sent as JSON; or a
 * `RawJson`, sent as its text); resolves to the JSON answer. `lossless`:
 * parsed keeping the text of numbers JavaScript would change (`parseJson`;
 * for records' values, which the console shows and saves).
 */
export async function api(method, path, body, { lossless = false } = {}) {
  const headers = { ...authHeaders() };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  let response;
  try {
    const text = body === undefined ? undefined : body instanceof RawJson ? body.text : JSON.stringify(body);
    response = await fetch(path, { method, headers, body: text });
  } catch (e) {
    throw new ApiError(0, "unreachable", `Tern did not answer: ${e.message}`);
  }
  const text = await response.text();
  let json = null;
  try { json = text ? (lossless ? parseJson(text) : JSON.parse(text)) : null; } catch { json = null; }
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

/** JSON text sent as it is (a value the user typed: re-serializing it could change it). */
export class RawJson {
  constructor(text) {
    JSON.parse(text); // throws on text that is not JSON
    this.text = text;
  }
}

/** A number whose text JavaScript cannot hold exactly (an integer past 2^53, too many digits). */
export class RawNumber {
  constructor(text) { this.text = text; }
  toString() { return this.text; }
}

/** Whether this browser tells a reviver a number's source text (else `parseJson` is lossy). */
export const LOSSLESS = (() => {
  let seen = false;
  JSON.parse("1", (key, value, context) => { seen = typeof context?.source === "string"; return value; });
  return seen;
})();

/** JSON.parse that keeps the text of every number JavaScript would write
 * differently (past 2^53, 1e400, -0, 1.0): saved back, it is unchanged. */
export function parseJson(text) {
  return JSON.parse(text, (key, value, context) => {
    if (typeof value !== "number" || typeof context?.source !== "string") return value;
    return JSON.stringify(value) === context.source ? value : new RawNumber(context.source);
  });
}

/** JSON text of a value from `parseJson`: indented by `indent` spaces (0: compact), raw numbers as they came. */
export function printJson(value, indent = 2, depth = 0) {
  if (value instanceof RawNumber) return value.text;
  if (value === null || typeof value !== "object") return JSON.stringify(value);
  const pad = indent ? `\n${" ".repeat(indent * (depth + 1))}` : "";
  const end = indent ? `\n${" ".repeat(indent * depth)}` : "";
  const sep = indent ? ": " : ":";
  const items = Array.isArray(value)
    ? value.map((v) => printJson(v, indent, depth + 1))
    : Object.keys(value).map((k) => `${JSON.stringify(k)}${sep}${printJson(value[k], indent, depth + 1)}`);
  if (items.length === 0) return Array.isArray(value) ? "[]" : "{}";
  const [open, close] = Array.isArray(value) ? ["[", "]"] : ["{", "}"];
  return `${open}${pad}${items.join(`,${pad}`)}${end}${close}`;
}

/** Keys a URL path cannot carry: fetch resolves a `.` or `..` segment away. */
function unaddressable(pk, sk) {
  return [pk, sk].some((k) => k === "." || k === "..");
}

/** One record (`{pk, sk, value, version, position}`), any key; 404 as an ApiError. */
export async function getRecord(ns, pk, sk) {
  if (!unaddressable(pk, sk)) return api("GET", recordPath(ns, pk, sk), undefined, { lossless: true });
  const answer = await api("POST", `/v1/ns/${encodeURIComponent(ns)}/get`, { keys: [{ pk, sk }] }, { lossless: true });
  const item = answer.items[0];
  if (!item) throw new ApiError(404, "not_found", `no record at pk ${JSON.stringify(pk)} sk ${JSON.stringify(sk)}`);
  return { ...item, position: answer.position };
}

/**
 * Puts `valueText` (JSON text, sent as typed) at any key, or deletes it
 * (`valueText` null), on a condition (`ifVersion`, `ifAbsent`), waiting
 * until applied: `{version, position}`; 409 `condition_failed` as an ApiError.
 */
export async function writeRecord(ns, pk, sk, valueText, { ifVersion, ifAbsent } = {}) {
  // One JSON value, checked here: it is pasted into a batch's text below.
  if (valueText !== null) JSON.parse(valueText);
  const condition = query({ if_version: ifVersion, if_absent: ifAbsent ? "true" : undefined });
  if (!unaddressable(pk, sk)) {
    const path = `${recordPath(ns, pk, sk)}${condition}${condition ? "&" : "?"}wait=applied`;
    return valueText === null ? api("DELETE", path) : api("PUT", path, new RawJson(valueText));
  }
  const op = { op: valueText === null ? "delete" : "put", pk, sk, if_version: ifVersion, if_absent: ifAbsent || undefined };
  const opText = JSON.stringify(op);
  const withValue = valueText === null ? opText : `${opText.slice(0, -1)},"value":${valueText}}`;
  return api("POST", `/v1/ns/${encodeURIComponent(ns)}/batch?wait=applied`, new RawJson(`{"ops":[${withValue}]}`));
}

/** A query string from an object, leaving out empty values. */
export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== "") q.set(k, String(v));
  const s = q.toString();
  return s ? `?${s}` : "";
}

/** The most characters of one Server-Sent Event held while it arrives. */
const EVENT_BUFFER_CHARS_MAX = 64 * 1024 * 1024;

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
    if (buffer.length > EVENT_BUFFER_CHARS_MAX) throw new ApiError(0, "event_too_large", `an event of over ${EVENT_BUFFER_CHARS_MAX} characters`);
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
