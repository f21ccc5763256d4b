/** `TernClient`: Tern's HTTP API as typed calls (Node 20+ and browsers: only `fetch`). */
import { errorFrom, TernError } from "./errors.js";
import { Watch } from "./watch.js";
export class TernClient {
    url;
    namespace;
    fetchImpl;
    constructor(options = {}) {
        this.url = (options.url ?? "http://127.0.0.1:7070").replace(/\/+$/, "");
        this.namespace = options.namespace ?? "default";
        const base = options.fetch ?? globalThis.fetch.bind(globalThis);
        this.fetchImpl = options.token === undefined ? base : withToken(base, options.token);
    }
    /** One record, or `undefined` if it does not exist. */
    async get(pk, sk = "", options = {}) {
        if (unaddressable(pk, sk)) {
            // "." and ".." cannot travel in a URL path (fetch drops them): the key goes in a body.
            const response = await this.request("POST", `${this.nsPath(options.ns)}/get${query(readParams(options))}`, { keys: [{ pk, sk }] });
            const answer = await this.json(response);
            const record = answer.items[0];
            return record === null || record === undefined ? undefined : { ...record, position: answer.position };
        }
        const response = await this.request("GET", this.recordPath(options.ns, pk, sk, readParams(options)));
        if (response.status === 404) {
            const error = await errorFrom(response);
            if (error.code === "not_found")
                return undefined;
            throw error;
        }
        return this.json(response);
    }
    async put(pk, sk, value, options = {}) {
        if (unaddressable(pk, sk))
            return this.asBatch({ op: "put", pk, sk, value }, options);
        const response = await this.request("PUT", this.recordPath(options.ns, pk, sk, writeParams(options)), value, options.idempotencyKey);
        return this.json(response);
    }
    async delete(pk, sk = "", options = {}) {
        if (unaddressable(pk, sk))
            return this.asBatch({ op: "delete", pk, sk }, options);
        const response = await this.request("DELETE", this.recordPath(options.ns, pk, sk, writeParams(options)), undefined, options.idempotencyKey);
        return this.json(response);
    }
    /** One page of a pk's records in sk order; pass `next_cursor` back as `cursor` for the next. */
    async list(pk, options = {}) {
        const params = readParams(options);
        for (const key of ["prefix", "start", "end", "cursor"]) {
            const value = options[key];
            if (value !== undefined)
                params.set(key, value);
        }
        if (options.limit !== undefined)
            params.set("limit", String(options.limit));
        if (options.reverse)
            params.set("reverse", "true");
        const response = await this.request("GET", `${this.nsPath(options.ns)}/kv/${encodeURIComponent(pk)}${query(params)}`);
        return this.json(response);
    }
    /** Several records at once, in request order (`null` where absent). */
    async getMany(keys, options = {}) {
        const body = { keys: keys.map((k) => ({ pk: k.pk, sk: k.sk ?? "" })) };
        const response = await this.request("POST", `${this.nsPath(options.ns)}/get`, body);
        return (await this.json(response)).items;
    }
    /** An atomic batch: all ops on one partition (one pk, typically); all conditions hold or nothing applies. */
    async batch(ops, options = {}) {
        const response = await this.request("POST", `${this.nsPath(options.ns)}/batch`, { ops }, options.idempotencyKey);
        return this.json(response);
    }
    /** A one-op batch for a key a URL path cannot carry, with the write's options. */
    async asBatch(op, options) {
        const conditioned = { ...op, if_version: options.ifVersion, if_absent: options.ifAbsent || undefined };
        const params = new URLSearchParams();
        if (options.waitApplied)
            params.set("wait", "applied");
        const response = await this.request("POST", `${this.nsPath(options.ns)}/batch${query(params)}`, { ops: [conditioned] }, options.idempotencyKey);
        return this.json(response);
    }
    /** Subscribes; see `Watch`. Close it with `close()`. */
    watch(options = {}) {
        return new Watch(this.url, { ...options, ns: options.ns ?? this.namespace }, this.fetchImpl);
    }
    nsPath(ns) {
        return `/v1/ns/${encodeURIComponent(ns ?? this.namespace)}`;
    }
    recordPath(ns, pk, sk, params) {
        return `${this.nsPath(ns)}/kv/${encodeURIComponent(pk)}/${encodeURIComponent(sk)}${query(params)}`;
    }
    async request(method, path, body, idempotencyKey) {
        const headers = {};
        if (body !== undefined)
            headers["content-type"] = "application/json";
        if (idempotencyKey !== undefined)
            headers["idempotency-key"] = idempotencyKey;
        try {
            return await this.fetchImpl(this.url + path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
        }
        catch (e) {
            throw new TernError(0, "unreachable", `cannot reach ${this.url}: ${e instanceof Error ? e.message : String(e)}`);
        }
    }
    async json(response) {
        if (!response.ok)
            throw await errorFrom(response);
        return (await response.json());
    }
}
/** Whether a key is `.` or `..`: a URL path segment fetch would resolve away (WHATWG URL), so another record would be addressed. */
function unaddressable(pk, sk) {
    return [pk, sk].some((key) => key === "." || key === "..");
}
function query(params) {
    const text = params.toString();
    return text ? `?${text}` : "";
}
function readParams(options) {
    const params = new URLSearchParams();
    if (options.after)
        params.set("after", options.after);
    if (options.strong)
        params.set("consistency", "strong");
    return params;
}
function writeParams(options) {
    const params = new URLSearchParams();
    if (options.ifVersion !== undefined)
        params.set("if_version", String(options.ifVersion));
    if (options.ifAbsent)
        params.set("if_absent", "true");
    if (options.waitApplied)
        params.set("wait", "applied");
    return params;
}
/** `fetchImpl`, sending `Authorization: Bearer <token>` on every request. */
function withToken(fetchImpl, token) {
    const authorization = `Bearer ${token}`;
    return (input, init = {}) => {
        const headers = new Headers(init.headers);
        headers.set("authorization", authorization);
        return fetchImpl(input, { ...init, headers });
    };
}
