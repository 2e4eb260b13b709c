#!/usr/bin/python3
"""The status page in a real browser: headless Chromium (Debian's
chromium) loads http://127.0.0.1:PORT/ from a real shardd after two plans,
runs the page's script against the live JSON, and the DOM it leaves is
checked against what the daemon said over gRPC: the serving model, the
plans listed, and the newest plan's picture (one row of bars per device,
compute widths in the plan's proportions, the critical device outlined).
A screenshot is kept (second argument; ctest: build/test-artifacts/
status-page.png).

usage: /usr/bin/python3 tests/integration/test_page.py PATH/TO/shardd PNG
Exits 77 (ctest: skipped) when python3 lacks grpc or chromium is not
installed (scripts/install-deps.sh installs it).
"""
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
from html.parser import HTMLParser

try:
    import grpc  # noqa: F401
    import grpc_tools  # noqa: F401
except ImportError as e:  # pragma: no cover
    print("SKIP: python3 lacks %s (install python3-grpcio python3-grpc-tools)"
          % e.name, file=sys.stderr)
    sys.exit(77)

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shardd_harness as H  # noqa: E402

SHARDD = PNG = None
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# What works on these machines (no network, root, no GPU).
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
         "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync",
         "--window-size=1200,1500", "--virtual-time-budget=8000"]


class Dom(HTMLParser):
    """Elements with an id or data-* attribute, their attributes and text."""

    def __init__(self):
        super().__init__()
        self.stack, self.elems = [], []

    def handle_starttag(self, tag, attrs):
        e = {"tag": tag, "attrs": dict(attrs), "text": "", "parent": None}
        if self.stack:
            e["parent"] = self.stack[-1]
        self.elems.append(e)
        if tag not in ("meta", "link", "br", "img", "input", "hr"):
            self.stack.append(e)  # the DOM dump closes SVG elements

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)
        if self.stack and self.stack[-1]["tag"] == tag:
            self.stack.pop()

    def handle_endtag(self, tag):
        if any(e["tag"] == tag for e in self.stack):
            while self.stack.pop()["tag"] != tag:
                pass

    def handle_data(self, data):
        for e in self.stack:
            e["text"] += data

    def by_id(self, i):
        return next(e for e in self.elems if e["attrs"].get("id") == i)

    def within(self, root, **attrs):
        out = []
        for e in self.elems:
            p = e
            while p is not None and p is not root:
                p = p["parent"]
            if p is root and e is not root and all(
                    e["attrs"].get(k.replace("_", "-")) == v
                    for k, v in attrs.items()):
                out.append(e)
        return out


def chromium(url, *extra):
    prof = tempfile.mkdtemp(prefix="sdi-chromium-")
    try:
        r = subprocess.run([CHROMIUM] + FLAGS + ["--user-data-dir=" + prof]
                           + list(extra) + [url],
                           capture_output=True, text=True, timeout=120)
    finally:
        shutil.rmtree(prof, ignore_errors=True)
    return r


class Page(unittest.TestCase):
    def test_page_shows_the_daemon(self):
        port = H.free_port()
        d = H.Daemon(SHARDD, args=["--http-listen", "127.0.0.1:%d" % port,
                                   "--profiler", "off"]).start()
        try:
            ch = d.channel()
            H.call(ch, H.PLAN, H.plan_request(H.make_tables(10, seed=1),
                                              num_devices=2, budget_ms=300))
            resp = H.call(ch, H.PLAN, H.plan_request(
                H.make_tables(24, seed=2), num_devices=5, budget_ms=300))
            st = H.call(ch, H.STATUS, H.admin_pb2.GetStatusRequest())
            url = "http://127.0.0.1:%d/" % port

            r = chromium(url, "--dump-dom")
            self.assertEqual(r.returncode, 0, r.stderr[-2000:])
            dom = Dom()
            dom.feed(r.stdout)
            body = next(e for e in dom.elems if e["tag"] == "body")
            self.assertEqual(body["attrs"].get("data-loaded"), "1",
                             "the page's script ran against the API")
            self.assertEqual(dom.by_id("error")["attrs"].get("hidden"), "")
            self.assertEqual(dom.by_id("health")["text"], "SERVING")
            self.assertEqual(dom.by_id("model-version")["text"],
                             st.serving_model_version)
            rows = [e for e in dom.within(dom.by_id("plans"))
                    if e["tag"] == "tr" and "data-plan" in e["attrs"]]
            self.assertEqual(len(rows), 2, "two plans listed")
            self.assertIn("5", [c["text"] for c in dom.elems
                                if c["parent"] is rows[0] and c["tag"] == "td"])

            svg = dom.by_id("plan-svg")
            devs = [e for e in dom.within(svg) if "data-device" in e["attrs"]]
            self.assertEqual(len(devs), 5, "one row of bars per device")
            widths = []
            for g in devs:
                parts = {e["attrs"]["data-part"]: float(e["attrs"]["width"])
                         for e in dom.within(g) if "data-part" in e["attrs"]}
                self.assertEqual(set(parts), {"compute", "bwd", "wait", "fwd",
                                              "mem"})
                widths.append(parts["compute"])
            for i, dc in enumerate(resp.devices):
                self.assertAlmostEqual(widths[i] / widths[0],
                                       dc.compute_ms / resp.devices[0].compute_ms,
                                       places=3)
            crit = resp.explanation.bottleneck_device
            self.assertEqual(dom.by_id("plan-critical")["text"], str(crit))
            outlined = [int(g["attrs"]["data-device"]) for g in devs
                        if any("data-critical" in e["attrs"]
                               for e in dom.within(g))]
            self.assertEqual(outlined, [crit], "the critical device outlined")

            os.makedirs(os.path.dirname(PNG), exist_ok=True)
            r = chromium(url, "--screenshot=" + PNG, "--hide-scrollbars")
            self.assertEqual(r.returncode, 0, r.stderr[-2000:])
            with open(PNG, "rb") as f:
                head = f.read(8)
            self.assertEqual(head, b"\x89PNG\r\n\x1a\n")
            self.assertGreater(os.path.getsize(PNG), 20000)
            print("    screenshot: " + PNG, file=sys.stderr)
        finally:
            d.cleanup()


if __name__ == "__main__":
    if len(sys.argv) < 3:
        print("usage: test_page.py PATH/TO/shardd PNG", file=sys.stderr)
        sys.exit(2)
    SHARDD = os.path.abspath(sys.argv[1])
    PNG = os.path.abspath(sys.argv[2])
    del sys.argv[1:3]
    if CHROMIUM is None:
        print("SKIP: chromium is not installed (scripts/install-deps.sh)",
              file=sys.stderr)
        sys.exit(77)
    H.load_protos()
    try:
        r = unittest.main(exit=False, verbosity=2).result
    finally:
        H.cleanup_protos()
    sys.exit(0 if r.wasSuccessful() else 1)
