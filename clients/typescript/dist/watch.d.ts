/**
 * `Watch`: one subscription over SSE that never gives up. It reconnects with
 * jittered exponential backoff (1 s, doubling, 30 s cap), resumes from the
 * last position it received (`Last-Event-ID`), so it misses and repeats
 * nothing, and keeps a materialized view of what it watches: the records as
 * of its position, rebuilt whenever the server sends a snapshot or a reset.
 */
import { TernError } from "./errors.js";
import type { Record } from "./types.js";
export interface WatchOptions {
    /** Namespace (default: the client's). */
    ns?: string;
    /** Watch one pk; omit for the whole namespace. */
    pk?: string;
    /** With `pk`: only sort keys starting with this. */
    prefix?: string;
    /** With `pk`: one record. */
    sk?: string;
    /**
     * Where to start: `snapshot` (default: the current state, then changes),
     * `now`, or a position (changes strictly after it).
     */
    from?: string;
    /** `state` (default): a slow watcher gets changes conflated. `log`: every change, or a cancel. */
    mode?: "state" | "log";
    /** Reconnect delays: first `initialMs` (default 1000), doubling to `maxMs` (default 30000), jittered. */
    backoff?: {
        initialMs?: number;
        maxMs?: number;
    };
    /** Events buffered for an async iterator that falls behind; the stream pauses beyond it (default 10000). */
    bufferMax?: number;
}
export type WatchEvent = {
    type: "put";
    record: Record;
    position?: string;
} | {
    type: "delete";
    pk: string;
    sk: string;
    version: number;
    position?: string;
}
/** The full state follows (as puts), then `synced`: `snapshot` when asked for, `reset` otherwise. */
 | {
    type: "snapshot" | "reset";
    position: string;
    reason: string;
} | {
    type: "synced";
    position: string;
} | {
    type: "progress";
    position: string;
} | {
    type: "cancel";
    reason: string;
    position: string;
    message: string;
} | {
    type: "connected";
} | {
    type: "disconnected";
    error: Error;
    retryInMs: number;
}
/** The watch stopped for good (a request the server rejects, e.g. an unknown namespace). */
 | {
    type: "failed";
    error: TernError;
};
type Listener = (event: WatchEvent) => void;
export declare class Watch implements AsyncIterable<WatchEvent> {
    private readonly baseUrl;
    private readonly options;
    private readonly fetchImpl;
    /** The watched records as of `position`, by `pk\u0000sk`. */
    readonly view: Map<string, Record>;
    /** The last position received: the watch resumes from here. */
    position: string | undefined;
    /** True once the view is complete (after the first snapshot, or at once for `from` not `snapshot`). */
    synced: boolean;
    private readonly listeners;
    private readonly abort;
    private pending;
    private readonly buffer;
    private wakeReader;
    private wakeWriter;
    private iterating;
    private closed;
    private readonly done;
    constructor(baseUrl: string, options: WatchOptions & {
        ns: string;
    }, fetchImpl: typeof fetch);
    /** Calls `listener` for every event; returns the function that removes it. */
    on(listener: Listener): () => void;
    /** One record of the view. */
    get(pk: string, sk?: string): Record | undefined;
    /** The view's records, in key order. */
    records(): Record[];
    /** Stops the watch; resolves once its connection is closed. */
    close(): Promise<void>;
    [Symbol.asyncIterator](): AsyncIterator<WatchEvent>;
    private emit;
    private url;
    private run;
    /** Jittered exponential backoff: half to all of min(cap, initial * 2^attempt). */
    private delay;
    /** Applies one message to the view and tells listeners; returns a cancel reason if it ends the stream. */
    private handle;
}
export {};
