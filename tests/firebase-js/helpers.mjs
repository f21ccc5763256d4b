// Shared by the SDK tests: a real `tern dev` (the TypeScript client's
// helper), and apps of the official `firebase` SDK pointed at it the way an
// app points at the Firebase emulator (`connectDatabaseEmulator`).
import { initializeApp, deleteApp } from "firebase/app";
import { connectDatabaseEmulator, getDatabase } from "firebase/database";

export { Tern, until, freePort } from "../../clients/typescript/test/tern.mjs";

let apps = 0;
let databases = 0;

/** A database name no other test uses. */
export function freshNs(prefix = "db") {
  databases += 1;
  return `${prefix}${process.pid}x${databases}`;
}

/**
 * A client app of the `firebase` package on database `ns` of `tern`;
 * `token` is passed as the emulator's mock user token: an object (its
 * claims; the SDK makes an unsigned ID token) or a string (sent as is:
 * a Tern token with `tern dev --auth`).
 */
export function client(tern, ns, { token } = {}) {
  apps += 1;
  const app = initializeApp({ projectId: "demo-tern", databaseURL: `http://127.0.0.1:${tern.port}?ns=${ns}` }, `app${apps}`);
  const db = getDatabase(app);
  connectDatabaseEmulator(db, "127.0.0.1", tern.port, token === undefined ? {} : { mockUserToken: token });
  return { app, db, close: () => deleteApp(app) };
}

/** Sets a database's rules as its owner, over REST. */
export async function setRules(tern, ns, rules) {
  const response = await fetch(`${tern.url}/.settings/rules.json?ns=${ns}`, {
    method: "PUT",
    headers: { Authorization: "Bearer owner" },
    body: JSON.stringify({ rules }),
  });
  if (!response.ok) throw new Error(`rules refused: ${response.status} ${await response.text()}`);
}

/** Reads a location over REST (what the server has, not an SDK's cache). */
export async function restGet(tern, ns, path) {
  const response = await fetch(`${tern.url}/${path}.json?ns=${ns}`, { headers: { Authorization: "Bearer owner" } });
  return response.json();
}

/** Resolves with the next value `collect` saw that `pred` accepts. */
export function waitFor(events, pred, what, timeoutMs = 20_000) {
  return new Promise((resolve, reject) => {
    const started = Date.now();
    const timer = setInterval(() => {
      const found = events.find(pred);
      if (found !== undefined) {
        clearInterval(timer);
        resolve(found);
      } else if (Date.now() - started > timeoutMs) {
        clearInterval(timer);
        reject(new Error(`timed out waiting for ${what}; saw ${JSON.stringify(events).slice(0, 2000)}`));
      }
    }, 10);
  });
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
