#!/usr/bin/env python3
"""Print N distinct free loopback ports, one per line, for services that must
be told their port before they start (Kafka listeners, proxies, gossip).

Why not bind to port 0: the kernel hands out port-0 binds *and the local ports
of outgoing connections* from the ephemeral range
(/proc/sys/net/ipv4/ip_local_port_range). A port picked there and released
before the service binds it can be taken in between by any client connecting
anywhere (with a test suite running beside us, that is hundreds of
connections), and the service then fails to start with "address in use".
Below the ephemeral range only someone naming the port explicitly can take
it, so these ports are chosen there, at random, and each checked free for
TCP and UDP (gossip is UDP on the same number).

Bounds: N <= 1000; at most 100 tries per port.
"""
import random
import socket
import sys

PORT_MIN = 10000
COUNT_MAX = 1000
TRIES_PER_PORT_MAX = 100


def ephemeral_low():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def is_free(port):
    for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
        s = socket.socket(socket.AF_INET, kind)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        finally:
            s.close()
    return True


def main():
    if len(sys.argv) != 2 or not sys.argv[1].isdigit() or not 0 < int(sys.argv[1]) <= COUNT_MAX:
        sys.exit(f"usage: free_ports.py N (1..{COUNT_MAX} ports), got {sys.argv[1:]}")
    count = int(sys.argv[1])
    high = ephemeral_low()
    if high - PORT_MIN < 4 * count:
        # An unusual port range: fall back to the whole non-privileged range.
        high = 65536
    chosen = set()
    for _ in range(count):
        for _ in range(TRIES_PER_PORT_MAX):
            port = random.randrange(PORT_MIN, high)
            if port not in chosen and is_free(port):
                chosen.add(port)
                print(port)
                break
        else:
            sys.exit(f"free_ports: no free port in {PORT_MIN}..{high} after {TRIES_PER_PORT_MAX} tries")


if __name__ == "__main__":
    main()
