#!/usr/bin/python3
"""`shardctl plan --svg` and `estimate --svg`: the picture is well-formed
XML (python3's parser) and its bars are the plan's numbers: per device the
compute, backward comm, the wait for the slowest device and the rest of the
forward comm (wait + forward = the plan's fwd_comm), widths in proportion
to the times, memory against the capacity, the critical device the plan's.
Offline, then online (plan and estimate) against the built shardd.

usage: /usr/bin/python3 tests/cli/test_svg.py SHARDCTL SHARDD
The online part exits 77 (skipped) when python3 lacks grpc.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

NS = "{http://www.w3.org/2000/svg}"
GIB = 1 << 30
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL: " + what, file=sys.stderr)


def close(a, b, tol=1e-6):
    return abs(a - b) <= tol * max(1.0, abs(a), abs(b))


def run(*argv):
    r = subprocess.run(list(argv), capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise SystemExit("FAIL: %s: exit %d: %s" % (argv[1], r.returncode,
                                                     r.stderr))
    return r


def check_svg(path, devices, mem_gb, critical, label):
    """devices: [(compute, fwd, bwd, memory_bytes)] of the plan."""
    root = ET.parse(path).getroot()  # raises on malformed XML
    check(root.tag == NS + "svg", label + ": the root is <svg>")
    groups = [g for g in root.iter(NS + "g") if "data-device" in g.attrib]
    check(len(groups) == len(devices), label + ": one row per device")
    ready = [c + b for c, _, b, _ in devices]
    px_per_ms = None
    for g, (comp, fwd, bwd, mem) in zip(groups, devices):
        d = int(g.get("data-device"))
        parts = {r.get("data-part"): r for r in g.iter(NS + "rect")
                 if r.get("data-part")}
        ms = {k: float(v.get("data-ms", "nan")) for k, v in parts.items()}
        check(close(ms["compute"], comp), "%s dev %d compute" % (label, d))
        check(close(ms["bwd"], bwd), "%s dev %d backward comm" % (label, d))
        check(close(ms["wait"] + ms["fwd"], fwd, 1e-5),
              "%s dev %d wait + forward = fwd_comm" % (label, d))
        check(abs(ms["wait"] - (max(ready) - ready[d])) < 1e-6 * max(ready),
              "%s dev %d wait = slowest ready - own ready" % (label, d))
        for k in ("compute", "bwd", "wait", "fwd"):
            w = float(parts[k].get("width"))
            if px_per_ms is None and ms[k] > 0:
                px_per_ms = w / ms[k]
            check(abs(w - ms[k] * px_per_ms) < 0.01,
                  "%s dev %d %s width in proportion" % (label, d, k))
        m = parts["mem"]
        check(int(m.get("data-bytes")) == mem, "%s dev %d memory" % (label, d))
        check(int(m.get("data-capacity")) == int(mem_gb * GIB),
              "%s dev %d capacity" % (label, d))
        check(("data-critical" in g.attrib) == (d == critical),
              "%s dev %d critical mark" % (label, d))
    check(int(root.get("data-critical-device")) == critical,
          label + ": critical device")


def devices_of(plan_json):
    return [(d["cost_ms"]["compute"], d["cost_ms"]["fwd_comm"],
             d["cost_ms"]["bwd_comm"], d["memory_bytes"])
            for d in plan_json["devices"]]


def main():
    ctl, shardd = (os.path.abspath(a) for a in sys.argv[1:3])
    tmp = tempfile.mkdtemp(prefix="sdsvg-")
    try:
        t = os.path.join(tmp, "t.json")
        run(ctl, "gen-tables", "--count", "30", "--seed", "4", "--out", t)
        pj, svg = os.path.join(tmp, "p.json"), os.path.join(tmp, "p.svg")
        run(ctl, "plan", "--offline", "--tables", t, "--devices", "6",
            "--mem-gb", "12", "--json", "--out", pj, "--svg", svg)
        plan = json.load(open(pj))
        check_svg(svg, devices_of(plan), 12,
                  plan["explanation"]["critical_device"], "offline plan")

        sys.path.insert(0, os.path.join(os.path.dirname(
            os.path.dirname(os.path.abspath(__file__))), "integration"))
        try:
            import shardd_harness as H
        except ImportError as e:
            print("SKIP part: python3 lacks %s (online --svg)" % e.name,
                  file=sys.stderr)
            return 77 if not failures else 1
        d = H.Daemon(shardd, args=["--profiler", "off"])
        H.load_protos()
        try:
            d.start()
            addr = ["--addr", d.unix]
            pj2, svg2 = os.path.join(tmp, "on.json"), os.path.join(tmp, "on.svg")
            run(ctl, *addr, "plan", "--tables", t, "--devices", "6",
                "--mem-gb", "12", "--json", "--out", pj2, "--svg", svg2)
            on = json.load(open(pj2))
            check_svg(svg2, devices_of(on), 12,
                      on["explanation"]["critical_device"], "online plan")
            svg3 = os.path.join(tmp, "est.svg")
            r = run(ctl, *addr, "--json", "estimate", "--tables", t, "--plan",
                    pj, "--mem-gb", "12", "--svg", svg3)
            est = json.loads(r.stdout)
            devs = [(x.get("computeMs", x.get("compute_ms", 0)),
                     x.get("fwdCommMs", x.get("fwd_comm_ms", 0)),
                     x.get("bwdCommMs", x.get("bwd_comm_ms", 0)),
                     int(x.get("memoryBytes", x.get("memory_bytes", 0))))
                    for x in est["devices"]]
            ready = [c + b for c, _, b, _ in devs]
            check_svg(svg3, devs, 12, ready.index(max(ready)), "estimate")
        finally:
            d.cleanup()
            H.cleanup_protos()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        print("%d passed, %d failed" % (0, len(failures)))
        return 1
    print("svg: every bar matches its plan")
    return 0


if __name__ == "__main__":
    sys.exit(main())
