/**
 * A Server-Sent Events parser over a byte stream (what `fetch` gives in Node
 * 20+ and in browsers), so a watch can send `Last-Event-ID` itself and
 * choose its own reconnect policy, which `EventSource` cannot.
 */
export interface SseMessage {
    event: string;
    id?: string;
    data: string;
}
/** Yields each message of `body` until it ends. */
export declare function sseMessages(body: ReadableStream<Uint8Array>): AsyncGenerator<SseMessage>;
