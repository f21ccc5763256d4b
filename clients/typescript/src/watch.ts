/**
 * `Watch`: one subscription over SSE that never gives up. It reconnects with
 * jittered exponential backoff (1 s, doubling, 30 s cap), resumes from the
 * last position it received (`Last-Event-ID`), so it misses and repeats
 * nothing, and keeps a materialized view of what it watches: the records as
 * of its position, rebuilt whenever the server sends a snapshot or a reset.
 */

import { errorFrom, TernError } from "./errors.js";
import { sseMessages, type SseMessage } from "./sse.js";
import type { Json, Record } from "./types.js";

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
  backoff?: { initialMs?: number; maxMs?: number };
  /** Events buffered for an async iterator that falls behind; the stream pauses beyond it (default 10000). */
  bufferMax?: number;
}

export type WatchEvent =
  | { type: "put"; record: Record; position?: string }
  | { type: "delete"; pk: string; sk: string; version: number; position?: string }
  /** The full state follows (as puts), then `synced`: `snapshot` when asked for, `reset` otherwise. */
  | { type: "snapshot" | "reset"; position: string; reason: string }
  | { type: "synced"; position: string }
  | { type: "progress"; position: string }
  | { type: "cancel"; reason: string; position: string; message: string }
  | { type: "connected" }
  | { type: "disconnected"; error: Error; retryInMs: number }
  /** The watch stopped for good (a request the server rejects, e.g. an unknown namespace). */
  | { type: "failed"; error: TernError };

type Listener = (event: WatchEvent) => void;

const KEY_SEPARATOR = "\u0000";

export class Watch implements AsyncIterable<WatchEvent> {
  /** The watched records as of `position`, by `pk\u0000sk`. */
  readonly view = new Map<string, Record>();
  /** The last position received: the watch resumes from here. */
  position: string | undefined;
  /** True once the view is complete (after the first snapshot, or at once for `from` not `snapshot`). */
  synced = false;

  private readonly listeners = new Set<Listener>();
  private readonly abort = new AbortController();
  private pending: Map<string, Record> | undefined;
  private readonly buffer: WatchEvent[] = [];
  private wakeReader: (() => void) | undefined;
  private wakeWriter: (() => void) | undefined;
  private iterating = false;
  private closed = false;
  private readonly done: Promise<void>;

  constructor(
    private readonly baseUrl: string,
    private readonly options: WatchOptions & { ns: string },
    private readonly fetchImpl: typeof fetch,
  ) {
    if (options.from && options.from !== "snapshot" && options.from !== "now") this.position = options.from;
    this.synced = (options.from ?? "snapshot") !== "snapshot";
    this.done = this.run();
  }

  /** Calls `listener` for every event; returns the function that removes it. */
  on(listener: Listener): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** One record of the view. */
  get(pk: string, sk = ""): Record | undefined {
    return this.view.get(pk + KEY_SEPARATOR + sk);
  }

  /** The view's records, in key order. */
  records(): Record[] {
    return [...this.view.values()].sort((a, b) => (a.pk === b.pk ? cmp(a.sk, b.sk) : cmp(a.pk, b.pk)));
  }

  /** Stops the watch; resolves once its connection is closed. */
  async close(): Promise<void> {
    this.closed = true;
    this.abort.abort();
    this.wakeReader?.();
    this.wakeWriter?.();
    await this.done;
  }

  async *[Symbol.asyncIterator](): AsyncIterator<WatchEvent> {
    this.iterating = true;
    try {
      for (;;) {
        const next = this.buffer.shift();
        if (next) {
          this.wakeWriter?.();
          yield next;
          continue;
        }
        if (this.closed) return;
        await new Promise<void>((resolve) => (this.wakeReader = resolve));
      }
    } finally {
      this.iterating = false;
    }
  }

  private async emit(event: WatchEvent): Promise<void> {
    for (const listener of this.listeners) listener(event);
    if (!this.iterating) return;
    this.buffer.push(event);
    this.wakeReader?.();
    // Backpressure: a slow iterator pauses the stream (the server's queue conflates or cancels).
    while (this.buffer.length >= (this.options.bufferMax ?? 10_000) && !this.closed) {
      await new Promise<void>((resolve) => (this.wakeWriter = resolve));
    }
  }

  private url(): string {
    const params = new URLSearchParams();
    for (const key of ["pk", "prefix", "sk", "mode"] as const) {
      const value = this.options[key];
      if (value !== undefined) params.set(key, value);
    }
    if (!this.position) params.set("from", this.options.from ?? "snapshot");
    return `${this.baseUrl}/v1/ns/${encodeURIComponent(this.options.ns)}/watch?${params}`;
  }

  private async run(): Promise<void> {
    let attempt = 0;
    while (!this.closed) {
      let error: Error | undefined;
      let retryAtOnce = false;
      try {
        const headers: { [name: string]: string } = { accept: "text/event-stream" };
        if (this.position) headers["last-event-id"] = this.position;
        const response = await this.fetchImpl(this.url(), { headers, signal: this.abort.signal });
        if (!response.ok || !response.body) {
          const rejected = await errorFrom(response);
          if (response.status >= 400 && response.status < 500) {
            await this.emit({ type: "failed", error: rejected });
            this.closed = true;
            break;
          }
          throw rejected;
        }
        await this.emit({ type: "connected" });
        for await (const message of sseMessages(response.body)) {
          attempt = 0;
          const cancel = await this.handle(message);
          if (cancel) {
            // A slow watcher resumes at once from where it was cut; anything else backs off.
            retryAtOnce = cancel === "slow_consumer";
            error = new TernError(0, cancel, `the server ended the subscription: ${cancel}`);
            break;
          }
        }
        error ??= new TernError(0, "stream_ended", "the subscription stream ended");
      } catch (e) {
        if (this.closed) break;
        error = e instanceof Error ? e : new Error(String(e));
      }
      if (this.closed) break;
      const retryInMs = retryAtOnce ? 0 : this.delay(attempt++);
      await this.emit({ type: "disconnected", error: error ?? new Error("disconnected"), retryInMs });
      await sleep(retryInMs, this.abort.signal);
    }
    this.closed = true;
    this.wakeReader?.();
  }

  /** Jittered exponential backoff: half to all of min(cap, initial * 2^attempt). */
  private delay(attempt: number): number {
    const initial = this.options.backoff?.initialMs ?? 1000;
    const cap = this.options.backoff?.maxMs ?? 30_000;
    const ceiling = Math.min(cap, initial * 2 ** Math.min(attempt, 30));
    return Math.round(ceiling / 2 + (Math.random() * ceiling) / 2);
  }

  /** Applies one message to the view and tells listeners; returns a cancel reason if it ends the stream. */
  private async handle(message: SseMessage): Promise<string | undefined> {
    const data = JSON.parse(message.data) as { [key: string]: Json };
    switch (message.event) {
      case "put":
      case "delete": {
        const record: Record = { pk: String(data.pk), sk: String(data.sk), value: data.value ?? null, version: Number(data.version) };
        const key = record.pk + KEY_SEPARATOR + record.sk;
        // While a snapshot or reset is being received, everything goes into
        // the view that replaces the current one at `synced`.
        const target = this.pending ?? this.view;
        if (message.event === "put") target.set(key, record);
        else target.delete(key);
        if (message.id !== undefined) this.position = message.id;
        if (message.event === "put") await this.emit({ type: "put", record, position: message.id });
        else await this.emit({ type: "delete", pk: record.pk, sk: record.sk, version: record.version, position: message.id });
        return undefined;
      }
      case "snapshot":
      case "reset":
        this.pending = new Map();
        await this.emit({ type: message.event, position: String(data.position), reason: String(data.reason) });
        return undefined;
      case "synced": {
        if (this.pending) {
          this.view.clear();
          for (const [key, record] of this.pending) this.view.set(key, record);
          this.pending = undefined;
        }
        this.position = String(data.position);
        this.synced = true;
        await this.emit({ type: "synced", position: this.position });
        return undefined;
      }
      case "progress":
        this.position = String(data.position);
        await this.emit({ type: "progress", position: this.position });
        return undefined;
      case "cancel": {
        this.position = String(data.position);
        const reason = String(data.reason);
        await this.emit({ type: "cancel", reason, position: this.position, message: String(data.message) });
        return reason;
      }
      default:
        return undefined; // keep-alive, and events of newer servers
    }
  }
}

function cmp(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted || ms <= 0) return resolve();
    const timer = setTimeout(resolve, ms);
    signal.addEventListener("abort", () => {
      clearTimeout(timer);
      resolve();
    }, { once: true });
  });
}
