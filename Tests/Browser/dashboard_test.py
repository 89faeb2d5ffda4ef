"""Drives the CareVault dashboards in headless Chromium (Playwright, with the system's browser).

Run by DashboardBrowserTests (Tests/VaultCLITests) against a real server and the real tools; it gets the
dashboards' URLs and what to expect as arguments, and exits non-zero with a message on the first failed
check. Usage:

  dashboard_test.py --doctor-url URL --patient-url URL --patients alice,carl --chart-patient alice
      --chart-activity walk --points 3 --hostile-file FILE --sync-command JSON --out DIR
"""

import argparse
import http.client
import json
import subprocess
import sys
import time
import urllib.parse

from playwright.sync_api import sync_playwright

CHROMIUM_DEFAULT = "/usr/bin/chromium"


def fail(message):
    print(f"dashboard_test: FAILED: {message}", file=sys.stderr)
    sys.exit(1)


def check(condition, message):
    if not condition:
        fail(message)
    print(f"ok: {message}")


def raw_status(url, host=None, cookie=None):
    """The status of a GET sent without a browser, with this Host header and cookie."""
    parts = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    headers = {}
    if host is not None:
        headers["Host"] = host
    if cookie is not None:
        headers["Cookie"] = cookie
    connection.request("GET", parts.path or "/", headers=headers)
    response = connection.getresponse()
    response.read()
    connection.close()
    return response.status


def expect_inert(page, hostile, where):
    """Hostile titles render as text, nothing they carry ran or was added to the DOM."""
    check(page.evaluate("() => window.pwned === undefined"), f"{where}: no injected script ran (window.pwned unset)")
    check(page.locator("img").count() == 0, f"{where}: no <img> injected")
    check(page.locator("svg[onload]").count() == 0, f"{where}: no <svg onload> injected")
    scripts = page.evaluate("() => Array.from(document.scripts).map(s => s.src)")
    check(len(scripts) == 1 and scripts[0].endswith("/static/live.js"), f"{where}: only the dashboard's own script: {scripts}")
    body = page.inner_text("body")
    for text in hostile:
        check(text in body, f"{where}: {text!r} shown as text")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--doctor-url", required=True)
    parser.add_argument("--patient-url", required=True)
    parser.add_argument("--patients", required=True)
    parser.add_argument("--chart-patient", required=True)
    parser.add_argument("--chart-activity", required=True)
    parser.add_argument("--points", type=int, required=True)
    parser.add_argument("--hostile-file", required=True)
    parser.add_argument("--sync-command", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--chromium", default=CHROMIUM_DEFAULT)
    args = parser.parse_args()
    with open(args.hostile_file, encoding="utf-8") as f:
        hostile = json.load(f)
    expected = sorted(args.patients.split(","))
    doctor = urllib.parse.urlsplit(args.doctor_url)
    origin = f"{doctor.scheme}://{doctor.netloc}"
    prefix = doctor.path.rstrip("/")
    check(prefix.startswith("/s/") and len(prefix) > 10, f"the link names this run's random prefix: {prefix}")
    base = origin + prefix
    port = doctor.port
    cookie_name = f"carevault_dashboard_{port}"

    # Without the token or its cookie, every page is 401; outside the prefix, 404; a foreign Host or
    # localhost (which may be ::1, where another user could listen) is refused.
    for path in ["/", f"/patient/{args.chart_patient}", "/events", "/static/live.js"]:
        check(raw_status(base + path) == 401, f"no token: {path} is 401")
        check(raw_status(origin + path) == 404, f"outside the prefix: {path} is 404")
    check(raw_status(base + "/", host=f"rebind.test:{port}") == 403, "foreign Host refused")
    check(raw_status(base + "/", host=f"localhost:{port}") == 403, "localhost refused: only 127.0.0.1 is listened on")

    with sync_playwright() as p:
        # rebind.test resolves to 127.0.0.1 inside the browser: a DNS-rebinding page, with the real token.
        browser = p.chromium.launch(
            executable_path=args.chromium,
            args=["--host-resolver-rules=MAP rebind.test 127.0.0.1"],
        )
        context = browser.new_context(viewport={"width": 1200, "height": 900})
        page = context.new_page()

        response = page.goto(base + "/")
        check(response.status == 401, "the browser without the token gets 401")
        response = page.goto(f"http://rebind.test:{port}{prefix}/?{doctor.query}")
        check(response.status == 403, "the browser at a rebound name gets 403, token or not")

        response = page.goto(args.doctor_url)
        check(response.status == 200, "the printed link opens the triage list")
        check("token=" not in page.url, "the token left the address bar")
        cookies = context.cookies(origin + prefix + "/")
        mine = [c for c in cookies if c["name"] == cookie_name]
        check(len(mine) == 1 and mine[0]["httpOnly"] and mine[0]["sameSite"] == "Strict",
              "the cookie is HttpOnly and SameSite=Strict, named for the port")
        check(mine[0]["path"] == prefix + "/", f"the cookie is sent only under the prefix: {mine[0]['path']}")
        check(mine[0]["value"] not in args.doctor_url, "the cookie holds a secret other than the printed token")
        check(context.cookies(origin + "/") == [], "no cookie is sent outside the prefix")
        check(page.evaluate("() => document.cookie") == "", "no script can read the cookie")
        check(raw_status(base + "/", cookie=f"{cookie_name}={mine[0]['value']}") == 200, "the cookie opens the triage list")
        check(raw_status(base + "/", host=f"rebind.test:{port}", cookie=f"{cookie_name}={mine[0]['value']}") == 403,
              "foreign Host refused even with the cookie")
        # The token worked once: a second browser given the same link gets 401.
        stranger = browser.new_context()
        response = stranger.new_page().goto(args.doctor_url)
        check(response.status == 401, "the printed link works once only")
        stranger.close()
        listed = sorted(page.eval_on_selector_all("tr.patient-row", "rows => rows.map(r => r.dataset.patient)"))
        check(listed == expected, f"the triage list lists exactly the patients who share: {listed}")
        states = page.eval_on_selector_all("tr.patient-row .integrity", "els => els.map(e => e.textContent)")
        check(states == ["verified"] * len(expected),
              f"every row shows its integrity state: {states}")
        page.goto(base + "/?sort=patient")
        check(sorted(page.eval_on_selector_all("tr.patient-row", "rows => rows.map(r => r.dataset.patient)")) == expected,
              "sorting by query parameter keeps the same patients")
        page.goto(base + "/")
        page.screenshot(path=f"{args.out}/dashboard-doctor-triage.png", full_page=True)

        page.goto(f"{base}/patient/{args.chart_patient}")
        page.wait_for_function("() => document.body.dataset.liveConnected === 'yes'", timeout=10000)
        chart = page.locator(f"article[data-activity='{args.chart_activity}'] svg.chart-svg")
        check(chart.count() == 1, "the numeric activity has one chart")
        points = chart.locator("circle.point").count()
        check(points == args.points, f"the chart has one point per recorded value ({points})")
        title = chart.locator("title").first.text_content()
        check(title == f"{hostile[0]} (min)", f"the chart's title names the activity and its units, as text: {title!r}")
        check("target 30 min" in chart.text_content(), "the chart shows its target with units")
        check(chart.get_attribute("role") == "img" and chart.get_attribute("aria-labelledby"), "the chart is labelled")
        check(page.locator("a[href$='export.csv']").count() == 1 and page.locator("a[href$='export.fhir.json']").count() == 1,
              "the page links the CSV and FHIR exports")
        export = context.request.get(f"{base}/patient/{args.chart_patient}/export.csv")
        check(export.status == 200 and export.headers["content-type"].startswith("text/csv"), "the CSV export downloads with the cookie")
        fhir = context.request.get(f"{base}/patient/{args.chart_patient}/export.fhir.json")
        check(fhir.status == 200 and fhir.json().get("resourceType") == "Bundle", "the FHIR export downloads with the cookie, a Bundle")
        expect_inert(page, hostile, "doctor's patient page")
        page.screenshot(path=f"{args.out}/dashboard-doctor.png", full_page=True)

        # A patient's sync shows on the open page within 2 s.
        command = json.loads(args.sync_command)
        result = subprocess.run(command, capture_output=True, text=True, timeout=120)
        check(result.returncode == 0, f"the patient's change was synced: {result.stderr.strip()}")
        synced = time.monotonic()
        selector = f"article[data-activity='{args.chart_activity}'] svg.chart-svg circle.point"
        try:
            page.wait_for_function(f"() => document.querySelectorAll(\"{selector}\").length === {args.points + 1}", timeout=2000)
        except Exception:
            fail(f"the patient's sync did not show on the open page within 2 s (points: {page.locator(selector).count()})")
        print(f"live: the new point showed {int((time.monotonic() - synced) * 1000)} ms after the patient's sync returned")
        expect_inert(page, hostile, "doctor's page after the live reload")

        # The patient's own dashboard, read-only, in the same browser: each dashboard keeps its own cookie,
        # so opening one never logs the other out.
        patient = context.new_page()
        response = patient.goto(args.patient_url)
        check(response.status == 200, "the patient's link opens the patient's dashboard")
        patient_url = urllib.parse.urlsplit(args.patient_url)
        check(patient_url.port != port, "the two dashboards listen on different ports")
        names = sorted(c["name"] for c in context.cookies())
        check(names == sorted([cookie_name, f"carevault_dashboard_{patient_url.port}"]), f"one cookie per dashboard: {names}")
        response = page.goto(base + "/")
        check(response.status == 200, "the doctor's dashboard still opens after the patient's was opened in the same browser")
        response = patient.goto(f"{patient_url.scheme}://{patient_url.netloc}{patient_url.path}")
        check(response.status == 200, "and the patient's still opens too")
        # A cookie of the same name planted for the whole host (as another local server's page could) neither
        # opens anything nor logs the owner out.
        context.add_cookies([{"name": cookie_name, "value": "planted", "domain": "127.0.0.1", "path": "/"}])
        response = page.goto(base + "/")
        check(response.status == 200, "a planted cookie of the same name does not log the owner out")
        check(raw_status(base + "/", cookie=f"{cookie_name}=planted") == 401, "the planted cookie alone opens nothing")
        check(patient.locator("table.shares tbody tr").count() >= 1, "the patient's shares are listed")
        check(patient.locator("table.access-log tbody tr").count() >= 1, "the patient's access log is listed")
        check(patient.locator("svg.chart-svg").count() >= 1, "the patient's charts are drawn")
        check(patient.locator("form").count() == 0, "the patient's dashboard changes nothing (no forms)")
        expect_inert(patient, hostile, "patient's dashboard")
        patient.screenshot(path=f"{args.out}/dashboard-patient.png", full_page=True)
        browser.close()
    print("dashboard_test: all checks passed")


if __name__ == "__main__":
    main()
