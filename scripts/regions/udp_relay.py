#!/usr/bin/env python3
"""A UDP relay with per-link delay and cuts, for the gossip of the region test bed.

Toxiproxy relays TCP only; Tern's gossip (chitchat) is UDP. Each Tern node
advertises a relay port instead of its own gossip port; this relay forwards
what arrives there to the node, from one upstream socket per sender (so the
node's answers, which chitchat sends to the datagram's source, come back
here and go on to the sender). The sender's region is known from its source
port (its gossip port, in the config), so a datagram between two regions is
held `delay_ms` (the link's one-way delay) and one to or from a cut region is
dropped: the same links `scripts/regions.sh cut` cuts in Toxiproxy.

    udp_relay.py CONFIG.json

CONFIG: {"nodes": [{"region", "gossip": PORT, "relay": PORT}],
         "delay_ms": {"A|B": MS, ...}, "cut_file": PATH}
The cut file holds the cut regions, one per line; it is read every 100 ms.

Bounds: one upstream socket per (sender, node) pair of the config; at most
PENDING_MAX datagrams held for delay (more are dropped, as a congested link
would); datagrams of at most 65,535 bytes (UDP's own limit).
"""

import asyncio
import json
import os
import sys

PENDING_MAX = 10_000
CUT_POLL_S = 0.1


class Relay:
    def __init__(self, config, config_path):
        self.config_path = config_path
        self.nodes = config["nodes"]
        self.delay_ms = config["delay_ms"]
        self.cut_file = config["cut_file"]
        self.region_of_port = {n["gossip"]: n["region"] for n in self.nodes}
        self.cut = set()
        self.pending = 0
        self.loop = asyncio.get_running_loop()

    def delay_s(self, a, b):
        """The one-way delay between regions a and b, or None when cut."""
        if a == b:
            return 0.0
        if a in self.cut or b in self.cut:
            return None
        return self.delay_ms.get(f"{a}|{b}", self.delay_ms.get(f"{b}|{a}", 0)) / 1000.0

    def later(self, delay_s, send):
        if self.pending >= PENDING_MAX:
            return
        self.pending += 1

        def run():
            self.pending -= 1
            send()

        if delay_s == 0:
            run()
        else:
            self.loop.call_later(delay_s, run)

    async def poll_cuts(self):
        """Rereads the cut file, and the delays (`regions.sh delay` rewrites them)."""
        while True:
            try:
                with open(self.config_path) as f:
                    self.delay_ms = json.load(f)["delay_ms"]
            except (OSError, ValueError, KeyError):
                pass
            try:
                with open(self.cut_file) as f:
                    self.cut = {line.strip() for line in f if line.strip()}
            except FileNotFoundError:
                self.cut = set()
            await asyncio.sleep(CUT_POLL_S)


class Front(asyncio.DatagramProtocol):
    """The relay port a node advertises: datagrams from senders to the node."""

    def __init__(self, relay, node):
        self.relay, self.node, self.upstreams = relay, node, {}

    def connection_made(self, transport):
        self.transport = transport

    def datagram_received(self, data, sender):
        src = self.relay.region_of_port.get(sender[1])
        if src is None:
            return  # not a node of the bed
        delay = self.relay.delay_s(src, self.node["region"])
        if delay is None:
            return
        upstream = self.upstreams.get(sender)
        if upstream is None:
            upstream = Upstream(self, sender, src)
            self.upstreams[sender] = upstream
            self.relay.loop.create_task(upstream.open())
        self.relay.later(delay, lambda: upstream.send(data))


class Upstream(asyncio.DatagramProtocol):
    """One sender's socket towards a node: the node's answers come back here."""

    def __init__(self, front, sender, region):
        self.front, self.sender, self.region = front, sender, region
        self.transport, self.queued = None, []

    async def open(self):
        await self.front.relay.loop.create_datagram_endpoint(
            lambda: self, local_addr=("127.0.0.1", 0), remote_addr=("127.0.0.1", self.front.node["gossip"]))

    def connection_made(self, transport):
        self.transport = transport
        for data in self.queued:
            transport.sendto(data)
        self.queued = []

    def send(self, data):
        if self.transport is None:
            if len(self.queued) < 64:
                self.queued.append(data)
        else:
            self.transport.sendto(data)

    def datagram_received(self, data, _):
        relay = self.front.relay
        delay = relay.delay_s(self.front.node["region"], self.region)
        if delay is None:
            return
        relay.later(delay, lambda: self.front.transport.sendto(data, self.sender))


async def main(path):
    with open(path) as f:
        config = json.load(f)
    relay = Relay(config, path)
    for node in config["nodes"]:
        await relay.loop.create_datagram_endpoint(lambda node=node: Front(relay, node), local_addr=("127.0.0.1", node["relay"]))
    print(f"udp_relay: relaying {len(config['nodes'])} nodes (pid {os.getpid()})", flush=True)
    await relay.poll_cuts()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
