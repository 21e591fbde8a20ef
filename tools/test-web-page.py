#!/usr/bin/env python3
"""The browser page (web/page/, built into build-web/dist by `make web`) in headless Chromium, against the CLI.

Usage: tools/test-web-page.py DIST_DIR NATIVE_CLI OUT_DIR
  DIST_DIR    the built page (build-web/dist)
  NATIVE_CLI  the native blocklab (build/blocklab), run with BLOCKLAB_ISA=generic and --threads 1
  OUT_DIR     where the screenshots (*.png) go

Serves DIST_DIR on 127.0.0.1 (a free port), drives Debian's chromium through chromedriver (selenium, e.g. in
build-web/venv: python3 -m venv build-web/venv && build-web/venv/bin/pip install selenium) and checks:
  (a) experiment A from the URL (24 x 128, post and pre): every gradient norm against `blocklab gradnorm`
  (b) experiment B from the URL (12 x 64, 40 steps, post and pre): loss and gradient norm of every step against
      `blocklab train`; ms/step of the page and of the CLI
  (c) the language toggle: Korean labels appear, and no string the page showed lacks a Korean wording
  (d) Stop in the middle of a long run: the step count stops growing, the page still answers, Continue goes on
  (e) problems 9 and 10 from the URL: the standardized table, a bad score's message, and the random walk and
      the stream norms at initialization against `blocklab residual`
Prints PASS or FAIL per check and exits 1 if any failed. Relative differences above 1e-5 fail.
"""
import csv
import functools
import html.parser
import http.server
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

TOLERANCE = 1e-5
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver")

failures = []


def report(name, ok, detail=""):
    print(f"{'PASS' if ok else 'FAIL'}: {name}" + (f": {detail}" if detail else ""), flush=True)
    if not ok:
        failures.append(name)


def rel_diff(a, b):
    if a is None or b is None:
        return 0.0 if a is None and b is None else float("inf")
    if a == b:
        return 0.0
    return abs(a - b) / max(abs(a), abs(b))


# ---- the server ------------------------------------------------------------------------------------------

class Handler(http.server.SimpleHTTPRequestHandler):
    extensions_map = {
        **http.server.SimpleHTTPRequestHandler.extensions_map,
        ".wasm": "application/wasm",
        ".js": "text/javascript",
        ".json": "application/json",
        ".css": "text/css",
        ".html": "text/html; charset=utf-8",
    }

    def log_message(self, *args):
        pass


def serve(directory):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=directory))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/"


# ---- the native CLI --------------------------------------------------------------------------------------

def native(cli, args):
    env = dict(os.environ, BLOCKLAB_ISA="generic")
    start = time.monotonic()
    subprocess.run([cli, *args, "--threads", "1"], env=env, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.PIPE)
    return time.monotonic() - start


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def number(text):
    return None if text == "" else float(text)


# ---- the browser -----------------------------------------------------------------------------------------

def browser():
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1400,2000", "--lang=en-US"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_script_timeout(30)
    return driver


def screenshot(driver, path):
    """The whole page, not only the window."""
    try:
        metrics = driver.execute_cdp_cmd("Page.getLayoutMetrics", {})
        size = metrics.get("cssContentSize") or metrics["contentSize"]
        shot = driver.execute_cdp_cmd("Page.captureScreenshot", {
            "format": "png", "captureBeyondViewport": True,
            "clip": {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}})
        import base64
        with open(path, "wb") as f:
            f.write(base64.b64decode(shot["data"]))
    except Exception:  # not Chromium's protocol: the window only
        driver.save_screenshot(path)
    print(f"  screenshot {path}")


def wait_for(what, fn, timeout, interval=0.2):
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


def results(driver, exp, stopped=None):
    """window.blocklabResults once it holds a result of exp (and, for training, the wanted stopped flag)."""
    text = driver.execute_script(
        "return window.blocklabResults ? JSON.stringify(window.blocklabResults) : null")
    if not text:
        return None
    r = json.loads(text)
    if r.get("exp") != exp:
        return None
    if r.get("error"):
        raise AssertionError(f"the page reported an error: {r['error']}")
    if stopped is not None and bool(r.get("stopped")) != stopped:
        return None
    pre = driver.find_element(By.ID, "results").get_attribute("textContent")
    if json.loads(pre) != r:
        raise AssertionError("<pre id=results> differs from window.blocklabResults")
    return r


def page_errors(driver):
    try:
        logs = driver.get_log("browser")
    except Exception:
        return []
    return [e["message"] for e in logs if e["level"] == "SEVERE"]


def steps_shown(driver):
    return driver.execute_script(
        "return [...document.querySelectorAll('#b-table tbody tr')].map(r => Number(r.dataset.steps));")


# ---- the page's wording ----------------------------------------------------------------------------------

class _Marked(html.parser.HTMLParser):
    """English texts of the elements marked data-t (their text) and data-t-aria (the attribute)."""

    def __init__(self):
        super().__init__()
        self.texts, self.open = set(), []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if "data-t-aria" in attrs:
            self.texts.add(attrs["data-t-aria"])
        if "data-t" in attrs:
            self.open.append([tag, ""])

    def handle_data(self, data):
        for entry in self.open:
            entry[1] += data

    def handle_endtag(self, tag):
        if self.open and self.open[-1][0] == tag:
            self.texts.add(" ".join(self.open.pop()[1].split()))


def page_strings(dist):
    """Every English string of index.html and of the tr / trc calls in app.js (literal arguments only)."""
    parser = _Marked()
    with open(os.path.join(dist, "index.html"), encoding="utf-8") as f:
        parser.feed(f.read())
    keys = {(None, t) for t in parser.texts}
    with open(os.path.join(dist, "app.js"), encoding="utf-8") as f:
        code = f.read()
    literal = r"'((?:[^'\\]|\\.)*)'"
    for m in re.finditer(r"\b(?:tr|N_)\(" + literal, code):
        keys.add((None, m.group(1).replace("\\'", "'")))
    for m in re.finditer(r"\btrc\(" + literal + r",\s*" + literal, code):
        keys.add((m.group(1), m.group(2).replace("\\'", "'")))
    for outcome in ("learned", "learning", "never-started", "collapsed", "blew-up", "diverged"):
        keys.add(("outcome", outcome))  # train_summary's labels (probe/outcome.h)
    return keys


def untranslated(dist):
    with open(os.path.join(dist, "ko.json"), encoding="utf-8") as f:
        catalog = json.load(f)
    missing = []
    for ctx, text in sorted(page_strings(dist), key=lambda k: (k[0] or "", k[1])):
        if not ((ctx and ctx + "\u0004" + text in catalog) or "web\u0004" + text in catalog or text in catalog):
            missing.append(text if ctx is None else f"{ctx}: {text}")
    return missing


# ---- the checks ------------------------------------------------------------------------------------------

def check_gradnorm(driver, base, cli, tmp, out):
    model = {"layers": 24, "width": 128, "heads": 4, "copy_len": 8, "batch": 8}
    query = "exp=gradnorm&placements=post,pre&seed=0&" + "&".join(f"{k}={v}" for k, v in model.items()) + "&run=1"
    driver.get(base + "?" + query)
    r = wait_for("experiment A's results", lambda: results(driver, "gradnorm"), 300)
    time.sleep(0.3)
    screenshot(driver, os.path.join(out, "a_gradnorm.png"))
    args = ["gradnorm", "--placements", "post,pre", "--seeds", "0", "--out", os.path.join(tmp, "gradnorm")]
    for k, v in model.items():
        args += [f"--{k.replace('_', '-')}", str(v)]
    native_seconds = native(cli, args)
    rows = read_csv(os.path.join(tmp, "gradnorm", "gradnorm.csv"))
    want = {(x["placement"], int(x["seed"]), x["parameter"]): (number(x["block"]), number(x["grad_norm"])) for x in rows}
    got = {(x["placement"], x["seed"], x["parameter"]): (x["block"], x["grad_norm"]) for x in r["gradnorm"]}
    worst, where = 0.0, ""
    for key, (block, g) in want.items():
        if key not in got:
            continue
        d = rel_diff(got[key][1], g)
        if d > worst:
            worst, where = d, f"{key[0]} {key[2]}: page {got[key][1]!r}, CLI {g!r}"
    same_rows = set(want) == set(got) and all(
        (got[k][0] is None and want[k][0] is None) or got[k][0] == want[k][0] for k in want)
    report("(a) experiment A: the same parameters and blocks as the CLI", same_rows,
           f"{len(got)} rows on the page, {len(want)} from the CLI")
    report("(a) experiment A: gradient norms against the CLI", worst <= TOLERANCE,
           f"max relative difference {worst:.3g} over {len(want)} rows" + (f" ({where})" if where else ""))
    print(f"  experiment A: {r['seconds']:.3f} s in the module, {r.get('page_seconds', float('nan')):.3f} s on the "
          f"page (target < 5 s); the CLI took {native_seconds:.2f} s including its figures")
    if r["seconds"] >= 5:
        print("  note: experiment A took 5 s or more in the browser")


def check_train(driver, base, cli, tmp, out):
    model = {"layers": 12, "width": 64, "heads": 4, "copy_len": 8, "batch": 8, "steps": 40, "lr": 0.001,
             "warmup": 0, "seed": 0}
    query = "exp=train&placements=post,pre&" + "&".join(f"{k}={v}" for k, v in model.items()) + "&run=1"
    driver.get(base + "?" + query)
    r = wait_for("experiment B's results", lambda: results(driver, "train", stopped=False), 600)
    time.sleep(0.3)
    screenshot(driver, os.path.join(out, "b_train.png"))
    report("(b) experiment B: two runs of 40 steps", len(r["runs"]) == 2 and all(len(x["metrics"]) == 40 for x in r["runs"]),
           f"{[len(x['metrics']) for x in r['runs']]} steps")
    worst, where = 0.0, ""
    for run in r["runs"]:
        placement = run["config"]["norm_placement"]
        directory = os.path.join(tmp, "train_" + placement)
        args = ["train", "--norm-placement", placement, "--out", directory, "--force", "--no-weights", "--no-tensorboard"]
        for k, v in model.items():
            args += [f"--{k.replace('_', '-')}", str(v)]
        native(cli, args)
        rows = read_csv(os.path.join(directory, "metrics.csv"))
        summary = json.load(open(os.path.join(directory, "summary.json")))
        if len(rows) != len(run["metrics"]):
            report(f"(b) experiment B, {placement}: as many steps as the CLI", False, f"{len(run['metrics'])} vs {len(rows)}")
            continue
        for m, n in zip(run["metrics"], rows):
            for field in ("loss", "grad_norm", "lr"):
                d = rel_diff(m[field], number(n[field]))
                if d > worst:
                    worst, where = d, f"{placement} step {m['step']} {field}: page {m[field]!r}, CLI {n[field]}"
            if m["step"] != int(n["step"]) or m["skipped"] != int(n["skipped"]):
                worst, where = float("inf"), f"{placement} step {m['step']}: step or skipped differs"
        print(f"  {placement}: {run['summary']['ms_per_step']:.1f} ms/step on the page, {summary['ms_per_step']:.1f} ms/step "
              f"from the CLI (generic kernels, 1 thread); outcome {run['summary']['outcome']}, "
              f"final loss {run['summary']['final_loss']:.4f} (CLI {summary['final_loss']:.4f})")
    report("(b) experiment B: loss, gradient norm and learning rate of every step against the CLI", worst <= TOLERANCE,
           f"max relative difference {worst:.3g}" + (f" ({where})" if where else ""))


def check_korean(driver, dist, out):
    missing = untranslated(dist)
    report("(c) every string of index.html and app.js has a Korean wording in ko.json (po/ko.po)", not missing,
           "untranslated: " + "; ".join(missing) if missing else f"{len(page_strings(dist))} strings")
    driver.find_element(By.ID, "lang-ko").click()
    wanted = ["실험 A", "설정", "뒤 정규화 (Post-LN)", "앞 정규화 (Pre-LN)", "층 정규화", "잔차 줄기"]
    try:
        wait_for("Korean labels", lambda: all(w in driver.find_element(By.TAG_NAME, "body").text for w in wanted), 10)
        ok, detail = True, ", ".join(wanted)
    except TimeoutError:
        body = driver.find_element(By.TAG_NAME, "body").text
        ok, detail = False, "missing: " + ", ".join(w for w in wanted if w not in body)
    report("(c) the language toggle shows Korean labels", ok, detail)
    lang = driver.execute_script("return document.documentElement.lang")
    report("(c) <html lang> follows the toggle", lang == "ko", lang)
    time.sleep(0.3)
    screenshot(driver, os.path.join(out, "c_korean.png"))
    missing = driver.execute_script("return window.blocklabUntranslated()")
    report("(c) every string the page showed in Korean has its wording", not missing,
           "untranslated: " + "; ".join(missing) if missing else "")
    driver.find_element(By.ID, "lang-en").click()
    ok = wait_for("English labels", lambda: "Experiment A" in driver.find_element(By.TAG_NAME, "body").text, 10)
    report("(c) back to English", bool(ok))


def check_stop(driver, base, out):
    query = "exp=train&placements=post,pre&layers=12&width=64&heads=4&copy_len=8&batch=8&steps=2000&warmup=0&seed=0&run=1"
    driver.get(base + "?" + query)
    wait_for("a few steps", lambda: sum(steps_shown(driver) or [0]) >= 6, 120)
    before = sum(steps_shown(driver))
    clicked = time.monotonic()
    driver.find_element(By.ID, "stop-b").click()
    r = wait_for("the stopped result", lambda: results(driver, "train", stopped=True), 30)
    latency = time.monotonic() - clicked
    first = steps_shown(driver)
    time.sleep(3)
    second = steps_shown(driver)
    total = sum(len(x["metrics"]) for x in r["runs"])
    report("(d) Stop: the step count stops growing", first == second and sum(second) == total and total < 4000,
           f"{before} steps when clicked, {sum(first)} after the stop ({latency:.2f} s), {sum(second)} 3 s later")
    outcomes = driver.execute_script(
        "return [...document.querySelectorAll('#b-table tbody tr')].map(r => r.lastElementChild.textContent)")
    report("(d) Stop: each run shows its outcome label", all(o and o != "–" for o in outcomes), "; ".join(outcomes))
    screenshot(driver, os.path.join(out, "d_stopped.png"))
    driver.find_element(By.ID, "lang-ko").click()
    ok = wait_for("Korean after the stop", lambda: "실험 B" in driver.find_element(By.TAG_NAME, "body").text, 10)
    driver.find_element(By.ID, "lang-en").click()
    report("(d) the page still answers after the stop (the language toggle)", bool(ok))
    driver.find_element(By.ID, "continue-b").click()
    try:
        wait_for("more steps after Continue", lambda: sum(steps_shown(driver)) > total + 2, 60)
        report("(d) Continue goes on from the same step", True)
    except TimeoutError:
        report("(d) Continue goes on from the same step", False, f"still {sum(steps_shown(driver))} steps")
    driver.find_element(By.ID, "stop-b").click()
    r = wait_for("the second stop", lambda: results(driver, "train", stopped=True), 30)
    steps = [[m["step"] for m in x["metrics"]] for x in r["runs"]]
    report("(d) Continue: every run's steps are 1, 2, 3, ... without a gap",
           all(s == list(range(1, len(s) + 1)) for s in steps), f"{[len(s) for s in steps]} steps")


def check_problems(driver, base, cli, tmp, out):
    driver.get(base + "?exp=standardize&run=1")
    r = wait_for("problem 9's results", lambda: results(driver, "standardize"), 60)
    a = r["rows"]["values"][0]
    cols = r["columns"]["values"]
    ok = abs(a[0] - 1.2247449) < 1e-6 and a[1] == 0 and [c[0] for c in cols] == [1, -1]
    report("(e) problem 9: the source's table per row and per column over A, B", ok, f"A per row {a}, per column {cols}")
    cell = driver.find_element(By.CSS_SELECTOR, "#p9-input input[data-row='0'][data-col='1']")
    cell.clear()
    cell.send_keys("abc")
    error = wait_for("the bad score's message", lambda: driver.find_element(By.ID, "p9-error").text, 10)
    report("(e) problem 9: a score that is not a number shows a message", "not a number" in error, error)
    cell.clear()
    cell.send_keys("85")
    wait_for("the table again", lambda: not driver.find_element(By.ID, "p9-error").is_displayed(), 10)
    shown = driver.find_element(By.ID, "p9-rows-out").text
    report("(e) problem 9: an edited score is standardized again (A: 90, 85, 70 -> 0.9806, ...)", "0.9806" in shown,
           shown.splitlines()[1] if len(shown.splitlines()) > 1 else shown)

    model = {"layers": 12, "width": 64, "heads": 4, "copy_len": 8, "batch": 8}
    query = "exp=residual&placements=post,pre&seed=0&dim=256&trials=2000&depths=1,4,16,36&" + \
        "&".join(f"{k}={v}" for k, v in model.items()) + "&run=1"
    driver.get(base + "?" + query)
    r = wait_for("problem 10's results", lambda: results(driver, "residual"), 120)
    time.sleep(0.3)
    screenshot(driver, os.path.join(out, "e_problem10.png"))
    args = ["residual", "--placements", "post,pre", "--seeds", "0", "--dim", "256", "--trials", "2000",
            "--depths", "1,4,16,36", "--out", os.path.join(tmp, "residual")]
    for k, v in model.items():
        args += [f"--{k.replace('_', '-')}", str(v)]
    native(cli, args)
    walk = read_csv(os.path.join(tmp, "residual", "residual_walk.csv"))
    init = read_csv(os.path.join(tmp, "residual", "residual_init.csv"))
    worst = 0.0
    for i, row in enumerate(walk):
        worst = max(worst, rel_diff(r["walk"]["mean_length"][i], number(row["mean_length"])),
                    rel_diff(r["walk"]["mean_relative_change"][i], number(row["mean_relative_change"])))
    got = {(x["placement"], x["seed"], x["layer"]): x for x in r["init"]}
    for row in init:
        x = got.get((row["placement"], int(row["seed"]), int(row["layer"])))
        if x is None:
            worst = float("inf")
            continue
        worst = max(worst, rel_diff(x["mean_token_norm"], number(row["mean_token_norm"])),
                    rel_diff(x["mean_vector_norm"], number(row["mean_vector_norm"])))
    report("(e) problem 10: the walk and the stream norms at init against the CLI",
           worst <= TOLERANCE and len(walk) == len(r["walk"]["depth"]) and len(init) == len(r["init"]),
           f"max relative difference {worst:.3g}, {len(walk)} depths, {len(init)} layer rows")


def main():
    if len(sys.argv) != 4:
        print(__doc__)
        return 2
    dist, cli, out = (os.path.abspath(a) for a in sys.argv[1:])
    for path in (os.path.join(dist, "index.html"), os.path.join(dist, "blocklab_web.wasm"), cli):
        if not os.path.exists(path):
            print(f"test-web-page: {path} not found (make web; make build)")
            return 2
    os.makedirs(out, exist_ok=True)
    server, base = serve(dist)
    driver = browser()
    print(f"serving {dist} at {base}")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for name, check in (("(a)", lambda: check_gradnorm(driver, base, cli, tmp, out)),
                                ("(b)", lambda: check_train(driver, base, cli, tmp, out)),
                                ("(c)", lambda: check_korean(driver, dist, out)),
                                ("(d)", lambda: check_stop(driver, base, out)),
                                ("(e)", lambda: check_problems(driver, base, cli, tmp, out))):
                try:
                    check()
                except Exception as err:  # a check that could not finish fails; the others still run
                    report(f"{name} finished", False, f"{type(err).__name__}: {err}")
                    try:
                        screenshot(driver, os.path.join(out, f"failed_{name.strip('()')}.png"))
                    except Exception:
                        pass
                errors = page_errors(driver)
                if errors:
                    report(f"{name} no errors in the browser's console", False, " | ".join(errors))
    finally:
        driver.quit()
        server.shutdown()
    print("FAIL: " + ", ".join(failures) if failures else "PASS: every check")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
