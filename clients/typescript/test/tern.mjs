// Starts a real `tern dev` for the client's tests: the binary from TERN_BIN
// (scripts/test.sh sets it) on a loopback port, with a fresh data directory.
import { spawn } from "node:child_process";
import { createSocket } from "node:dgram";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";

export const BIN = process.env.TERN_BIN ?? join(process.env.HOME, ".cache/tern-target/release/tern");

/** A free loopback UDP port (a node's gossip address). */
export function freeUdpPort() {
  return new Promise((resolve, reject) => {
    const socket = createSocket("udp4");
    socket.on("error", reject);
    socket.bind(0, "127.0.0.1", () => {
      const { port } = socket.address();
      socket.close(() => resolve(port));
    });
  });
}

/** A free loopback port (so a restarted node can keep its address). */
export function freePort() {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
    server.on("error", reject);
  });
}

export class Tern {
  /** `command` is `dev` (the default) or `serve` (then `args` give its log, node id...). */
  static async start({ port, dataDir, auth, args, command } = {}) {
    const tern = new Tern();
    tern.command = command ?? "dev";
    tern.auth = auth ?? false;
    tern.extraArgs = args ?? [];
    tern.port = port ?? (await freePort());
    tern.dataDir = dataDir ?? mkdtempSync(join(tmpdir(), "tern-ts-"));
    tern.ownsDir = !dataDir;
    tern.url = `http://127.0.0.1:${tern.port}`;
    await tern.spawn();
    return tern;
  }

  async spawn() {
    const args = [this.command, "--listen", `127.0.0.1:${this.port}`, "--data-dir", this.dataDir, ...(this.auth ? ["--auth"] : []), ...this.extraArgs];
    this.child = spawn(BIN, args, {
      stdio: ["ignore", "pipe", "inherit"],
      env: { ...process.env, TERN_LOG_LEVEL: process.env.TERN_TEST_LOG_LEVEL ?? "warn" },
    });
    await new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error("tern did not start within 60 s")), 60_000);
      let out = "";
      this.child.stdout.on("data", (chunk) => {
        out += chunk;
        if (out.includes("listening on")) {
          clearTimeout(timer);
          resolve();
        }
      });
      this.child.on("exit", (code) => reject(new Error(`tern exited with ${code}`)));
    });
    for (let i = 0; i < 600; i++) {
      try {
        if ((await fetch(`${this.url}/readyz`)).ok) return;
      } catch {
        // not yet
      }
      await new Promise((r) => setTimeout(r, 50));
    }
    throw new Error("tern did not become ready");
  }

  /** SIGKILL: no goodbye to its clients. */
  async kill() {
    const exited = new Promise((resolve) => this.child.once("exit", resolve));
    this.child.kill("SIGKILL");
    await exited;
  }

  async stop() {
    if (this.child.exitCode === null && this.child.signalCode === null) await this.kill();
    if (this.ownsDir) rmSync(this.dataDir, { recursive: true, force: true });
  }
}

export async function until(check, what, timeoutMs = 20_000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await check()) return;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}
