/** `TernClient`: Tern's HTTP API as typed calls (Node 20+ and browsers: only `fetch`). */

import { errorFrom, TernError } from "./errors.js";
import type { BatchOp, Json, ListOptions, ListPage, ReadOptions, ReadRecord, WriteOptions, WriteResult } from "./types.js";
import { Watch, type WatchOptions } from "./watch.js";

export interface ClientOptions {
  /** A node's address, e.g. `http://127.0.0.1:7070` (default), or `""` for the page's own origin. */
  url?: string;
  /** Namespace of calls that do not name one (default `default`). */
  namespace?: string;
  /** A `fetch` to use instead of the global one. */
  fetch?: typeof fetch;
  /** A bearer token, for a node that requires authentication (`tern dev --auth`,
   * `tern token create`): sent as `Authorization: Bearer <token>` on every call and watch. */
  token?: string;
}

export class TernClient {
  readonly url: string;
  readonly namespace: string;
  private readonly fetchImpl: typeof fetch;

  constructor(options: ClientOptions = {}) {
    this.url = (options.url ?? "http://127.0.0.1:7070").replace(/\/+$/, "");
    this.namespace = options.namespace ?? "default";
    const base = options.fetch ?? globalThis.fetch.bind(globalThis);
    this.fetchImpl = options.token === undefined ? base : withToken(base, options.token);
  }

  /** One record, or `undefined` if it does not exist. */
  async get(pk: string, sk = "", options: ReadOptions & { ns?: string } = {}): Promise<ReadRecord | undefined> {
    if (unaddressable(pk, sk)) {
      // "." and ".." cannot travel in a URL path (fetch drops them): the key goes in a body.
      const response = await this.request("POST", `${this.nsPath(options.ns)}/get${query(readParams(options))}`, { keys: [{ pk, sk }] });
      const answer = await this.json<{ items: (ReadRecord | null)[]; position: string }>(response);
      const record = answer.items[0];
      return record === null || record === undefined ? undefined : { ...record, position: answer.position };
    }
    const response = await this.request("GET", this.recordPath(options.ns, pk, sk, readParams(options)));
    if (response.status === 404) {
      const error = await errorFrom(response);
      if (error.code === "not_found") return undefined;
      throw error;
    }
    return this.json<ReadRecord>(response);
  }

  async put(pk: string, sk: string, value: Json, options: WriteOptions & { ns?: string } = {}): Promise<WriteResult> {
    if (unaddressable(pk, sk)) return this.asBatch({ op: "put", pk, sk, value }, options);
    const response = await this.request("PUT", this.recordPath(options.ns, pk, sk, writeParams(options)), value, options.idempotencyKey);
    return this.json<WriteResult>(response);
  }

  async delete(pk: string, sk = "", options: WriteOptions & { ns?: string } = {}): Promise<WriteResult> {
    if (unaddressable(pk, sk)) return this.asBatch({ op: "delete", pk, sk }, options);
    const response = await this.request("DELETE", this.recordPath(options.ns, pk, sk, writeParams(options)), undefined, options.idempotencyKey);
    return this.json<WriteResult>(response);
  }

  /** One page of a pk's records in sk order; pass `next_cursor` back as `cursor` for the next. */
  async list(pk: string, options: ListOptions & { ns?: string } = {}): Promise<ListPage> {
    const params = readParams(options);
    for (const key of ["prefix", "start", "end", "cursor"] as const) {
      const value = options[key];
      if (value !== undefined) params.set(key, value);
    }
    if (options.limit !== undefined) params.set("limit", String(options.limit));
    if (options.reverse) params.set("reverse", "true");
    const response = await this.request("GET", `${this.nsPath(options.ns)}/kv/${encodeURIComponent(pk)}${query(params)}`);
    return this.json<ListPage>(response);
  }

  /** Several records at once, in request order (`null` where absent). */
  async getMany(keys: { pk: string; sk?: string }[], options: { ns?: string } = {}): Promise<(ReadRecord | null)[]> {
    const body = { keys: keys.map((k) => ({ pk: k.pk, sk: k.sk ?? "" })) };
    const response = await this.request("POST", `${this.nsPath(options.ns)}/get`, body);
    return (await this.json<{ items: (ReadRecord | null)[] }>(response)).items;
  }

  /** An atomic batch: all ops on one partition (one pk, typically); all conditions hold or nothing applies. */
  async batch(ops: BatchOp[], options: { ns?: string; idempotencyKey?: string } = {}): Promise<WriteResult> {
    const response = await this.request("POST", `${this.nsPath(options.ns)}/batch`, { ops }, options.idempotencyKey);
    return this.json<WriteResult>(response);
  }

  /** A one-op batch for a key a URL path cannot carry, with the write's options. */
  private async asBatch(op: BatchOp, options: WriteOptions & { ns?: string }): Promise<WriteResult> {
    const conditioned = { ...op, if_version: options.ifVersion, if_absent: options.ifAbsent || undefined } as BatchOp;
    const params = new URLSearchParams();
    if (options.waitApplied) params.set("wait", "applied");
    const response = await this.request("POST", `${this.nsPath(options.ns)}/batch${query(params)}`, { ops: [conditioned] }, options.idempotencyKey);
    return this.json<WriteResult>(response);
  }

  /** Subscribes; see `Watch`. Close it with `close()`. */
  watch(options: WatchOptions = {}): Watch {
    return new Watch(this.url, { ...options, ns: options.ns ?? this.namespace }, this.fetchImpl);
  }

  private nsPath(ns: string | undefined): string {
    return `/v1/ns/${encodeURIComponent(ns ?? this.namespace)}`;
  }

  private recordPath(ns: string | undefined, pk: string, sk: string, params: URLSearchParams): string {
    return `${this.nsPath(ns)}/kv/${encodeURIComponent(pk)}/${encodeURIComponent(sk)}${query(params)}`;
  }

  private async request(method: string, path: string, body?: unknown, idempotencyKey?: string): Promise<Response> {
    const headers: { [name: string]: string } = {};
    if (body !== undefined) headers["content-type"] = "application/json";
    if (idempotencyKey !== undefined) headers["idempotency-key"] = idempotencyKey;
    try {
      return await this.fetchImpl(this.url + path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
    } catch (e) {
      throw new TernError(0, "unreachable", `cannot reach ${this.url}: ${e instanceof Error ? e.message : String(e)}`);
    }
  }

  private async json<T>(response: Response): Promise<T> {
    if (!response.ok) throw await errorFrom(response);
    return (await response.json()) as T;
  }
}

/** Whether a key is `.` or `..`: a URL path segment fetch would resolve away (WHATWG URL), so another record would be addressed. */
function unaddressable(pk: string, sk: string): boolean {
  return [pk, sk].some((key) => key === "." || key === "..");
}

function query(params: URLSearchParams): string {
  const text = params.toString();
  return text ? `?${text}` : "";
}

function readParams(options: ReadOptions): URLSearchParams {
  const params = new URLSearchParams();
  if (options.after) params.set("after", options.after);
  if (options.strong) params.set("consistency", "strong");
  return params;
}

function writeParams(options: WriteOptions): URLSearchParams {
  const params = new URLSearchParams();
  if (options.ifVersion !== undefined) params.set("if_version", String(options.ifVersion));
  if (options.ifAbsent) params.set("if_absent", "true");
  if (options.waitApplied) params.set("wait", "applied");
  return params;
}

/** `fetchImpl`, sending `Authorization: Bearer <token>` on every request. */
function withToken(fetchImpl: typeof fetch, token: string): typeof fetch {
  const authorization = `Bearer ${token}`;
  return (input, init = {}) => {
    const headers = new Headers(init.headers);
    headers.set("authorization", authorization);
    return fetchImpl(input, { ...init, headers });
  };
}
