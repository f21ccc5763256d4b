/**
 * Tern's TypeScript client. Node 20+ and browsers (it needs only `fetch`).
 *
 * ```ts
 * const tern = new TernClient({ url: "http://127.0.0.1:7070" });
 * await tern.put("flags", "checkout", { enabled: true });
 * const watch = tern.watch({ pk: "flags" });
 * for await (const event of watch) console.log(event, watch.records());
 * ```
 */
export { TernClient } from "./client.js";
export { TernError } from "./errors.js";
export { Watch } from "./watch.js";
