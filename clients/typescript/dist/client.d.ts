/** `TernClient`: Tern's HTTP API as typed calls (Node 20+ and browsers: only `fetch`). */
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
export declare class TernClient {
    readonly url: string;
    readonly namespace: string;
    private readonly fetchImpl;
    constructor(options?: ClientOptions);
    /** One record, or `undefined` if it does not exist. */
    get(pk: string, sk?: string, options?: ReadOptions & {
        ns?: string;
    }): Promise<ReadRecord | undefined>;
    put(pk: string, sk: string, value: Json, options?: WriteOptions & {
        ns?: string;
    }): Promise<WriteResult>;
    delete(pk: string, sk?: string, options?: WriteOptions & {
        ns?: string;
    }): Promise<WriteResult>;
    /** One page of a pk's records in sk order; pass `next_cursor` back as `cursor` for the next. */
    list(pk: string, options?: ListOptions & {
        ns?: string;
    }): Promise<ListPage>;
    /** Several records at once, in request order (`null` where absent). */
    getMany(keys: {
        pk: string;
        sk?: string;
    }[], options?: {
        ns?: string;
    }): Promise<(ReadRecord | null)[]>;
    /** An atomic batch: all ops on one partition (one pk, typically); all conditions hold or nothing applies. */
    batch(ops: BatchOp[], options?: {
        ns?: string;
        idempotencyKey?: string;
    }): Promise<WriteResult>;
    /** A one-op batch for a key a URL path cannot carry, with the write's options. */
    private asBatch;
    /** Subscribes; see `Watch`. Close it with `close()`. */
    watch(options?: WatchOptions): Watch;
    private nsPath;
    private recordPath;
    private request;
    private json;
}
