// A client process for ondisconnect.test.mjs: registers onDisconnect
// writes, says "ready", and waits to be killed.
import { onDisconnect, ref, set, increment, serverTimestamp } from "firebase/database";

import { client } from "./helpers.mjs";

const [port, ns, who] = process.argv.slice(2);
const { db } = client({ port: Number(port) }, ns);
await set(ref(db, `presence/${who}`), "online");
await onDisconnect(ref(db, `presence/${who}`)).set({ state: "offline", at: serverTimestamp() });
await onDisconnect(ref(db, `fired/${who}`)).set(increment(1));
console.log("ready");
setInterval(() => {}, 1_000);
