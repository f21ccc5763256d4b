#!/usr/bin/env python3
"""Measures a running region bed (scripts/regions.sh up): in-region GET
latency, put -> visible in another region, and the write gap (RTO) when a
region is cut under writes from every region. Stdlib only; prints JSON.

    bench/regions/measure.py BED_DIR [--gets N] [--visibility N] [--cut REGION]
"""
import http.client, json, subprocess, sys, threading, time, urllib.parse

def conn(url):
    u = urllib.parse.urlparse(url)
    return http.client.HTTPConnection(u.hostname, u.port, timeout=15)

def request(c, method, path, body=None):
    c.request(method, path, body=body)
    r = c.getresponse()
    return r.status, r.read()

def pct(xs, p):
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(len(xs) * p))] * 1000, 3)

def main():
    bed_dir = sys.argv[1]
    args = dict(zip(sys.argv[2::2], sys.argv[3::2]))
    bed = json.load(open(f"{bed_dir}/bed.json"))
    nodes = bed["nodes"]
    by_region = {}
    for n in nodes:
        by_region.setdefault(n["region"], n["url"])
    regions = bed["regions"]
    a, b = by_region[regions[0]], by_region[regions[1]]
    out = {"regions": regions}
    # In-region GET on one keep-alive connection.
    c = conn(a)
    request(c, "PUT", "/v1/ns/bench/kv/k/v", b'"x"')
    time.sleep(1)
    samples = []
    for _ in range(int(args.get("--gets", 2000))):
        t = time.perf_counter(); s, _ = request(c, "GET", "/v1/ns/bench/kv/k/v"); samples.append(time.perf_counter() - t)
        assert s == 200
    out["get_in_region_ms"] = {"p50": pct(samples, 0.5), "p99": pct(samples, 0.99), "n": len(samples)}
    # Put in region 0, visible in region 1 (polled on a keep-alive connection, local reads).
    pc, rc = conn(a), conn(b)
    vis, acks = [], []
    for i in range(int(args.get("--visibility", 100))):
        body = str(i).encode()
        t = time.perf_counter()
        s, _ = request(pc, "PUT", f"/v1/ns/bench/kv/vis/{i}", body); acks.append(time.perf_counter() - t)
        assert s == 200
        while True:
            s, _ = request(rc, "GET", f"/v1/ns/bench/kv/vis/{i}")
            if s == 200: break
        vis.append(time.perf_counter() - t)
    out["put_ack_ms"] = {"p50": pct(acks, 0.5), "p99": pct(acks, 0.99)}
    out["put_to_visible_other_region_ms"] = {"p50": pct(vis, 0.5), "p99": pct(vis, 0.99), "n": len(vis)}
    # RTO: writes from every region, cut one, the longest gap between acknowledged writes.
    cut = args.get("--cut")
    if cut:
        stop = time.time() + 35
        log = []
        def writer(url, region):
            c, i = conn(url), 0
            while time.time() < stop:
                i += 1
                try: s, _ = request(c, "PUT", f"/v1/ns/bench/kv/rto-{region}-{i % 16}/{i}", b"1")
                except Exception: s = 0; c = conn(url)
                log.append((region, time.time(), s))
        ts = [threading.Thread(target=writer, args=(n["url"], n["region"])) for n in nodes]
        [t.start() for t in ts]
        time.sleep(8); cut_at = time.time()
        subprocess.run(["scripts/regions.sh", "cut", cut, "--dir", bed_dir], check=True)
        time.sleep(15)
        subprocess.run(["scripts/regions.sh", "heal", cut, "--dir", bed_dir], check=True)
        [t.join() for t in ts]
        rto = {}
        for region in regions:
            ok = sorted(t for r, t, s in log if r == region and s == 200)
            # The longest time without an acknowledged write around the cut.
            window = [t for t in ok if cut_at - 1 <= t <= cut_at + 15]
            gaps = [b - a for a, b in zip(window, window[1:])]
            rto[region] = round(max(gaps), 2) if gaps else None
        out["write_gap_at_cut_s"] = rto
        out["writes_acknowledged"] = sum(1 for _, _, s in log if s == 200)
        out["writes_refused"] = sum(1 for _, _, s in log if s != 200)
        out["acknowledged_writes_per_s"] = round(out["writes_acknowledged"] / 35, 1)
    print(json.dumps(out, indent=1))

main()
