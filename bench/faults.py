#!/usr/bin/env python3
"""Faults under load: what each does to callers and receipts (bench/faults.sh runs this).

Every scenario starts real `capdir serve` processes on loopback, loads them with clients of
its own that record every answer (status, error code, receipt id), injects one fault, heals it,
and then checks the ledger: every receipt a caller was answered with is in it exactly once, and
`capdir ledger verify` passes. One table row per scenario; the exit status is 1 when any
scenario lost a receipt, answered 200 without one, left the chain unverifiable, or broke its
own expectation (named on stderr).

    bench/faults.py BIN [SECONDS] [SCENARIO...]
"""

import http.client
import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time

OWNER = "faults-owner"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def as_root(cmd):
    """`cmd` as root: itself when this is root, else through sudo (a GitHub runner)."""
    return cmd if os.geteuid() == 0 else ["sudo", "-n"] + cmd


def local_cluster():
    """The version of the local PostgreSQL cluster `main` when it runs here (pg_ctlcluster
    can restart it), else None (a service container, say)."""
    try:
        out = subprocess.run(["pg_lsclusters", "--no-header"], capture_output=True, text=True,
                             check=True).stdout.split("\n")
    except (OSError, subprocess.CalledProcessError):
        return None
    for line in out:
        cols = line.split()
        if len(cols) >= 4 and cols[1] == "main" and cols[3] == "online":
            return cols[0]
    return None


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """One `capdir serve`, its stderr kept in a log beside its data."""

    def __init__(self, bin, work, site, ledger, port=None, args=(), env=None):
        self.bin, self.work, self.site, self.ledger = bin, work, site, ledger
        self.port = port or free_port()
        self.args, self.env = list(args), env or {}
        self.proc = None

    def start(self, wait=True):
        log = open(os.path.join(self.work, f"serve-{self.port}.log"), "ab")
        env = dict(os.environ, CAPDIR_OWNER_KEY=OWNER, RUST_LOG="warn", **self.env)
        self.proc = subprocess.Popen(
            [self.bin, "serve", "--site", self.site, "--addr", f"127.0.0.1:{self.port}",
             "--ledger", self.ledger, "--data", os.path.join(self.work, f"data-{self.port}")]
            + self.args,
            stdout=subprocess.DEVNULL, stderr=log, env=env)
        if wait:
            self.wait_ready()
        return self

    def wait_ready(self, limit=30):
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"dispatcher on {self.port} exited: see {self.work}")
            try:
                c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=1)
                c.request("GET", "/api/dispatch?map=1")
                if c.getresponse().status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise SystemExit(f"dispatcher on {self.port} did not start: see {self.work}")

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill9()


class Load:
    """Clients calling one row over and over; every answer kept as (time, status, code, id)."""

    def __init__(self, ports, key="ECHO", clients=8, timeout=15.0, body=None, pause=0.0):
        self.ports, self.key, self.timeout = ports, key, timeout
        self.body, self.pause = body, pause
        self.answers = []
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.threads = [threading.Thread(target=self.client, args=(c,), daemon=True)
                        for c in range(clients)]

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *_):
        self.stopping.set()
        for t in self.threads:
            t.join()

    def client(self, c):
        port = self.ports[c % len(self.ports)]
        conn, i = None, 0
        while not self.stopping.is_set():
            i += 1
            body = {"key": self.key, "body": self.body or f"client {c} call {i}"}
            started = time.monotonic()
            try:
                if conn is None:
                    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=self.timeout)
                conn.request("POST", "/api/dispatch", json.dumps(body),
                             {"content-type": "application/json", "x-owner-key": OWNER})
                res = conn.getresponse()
                raw = res.read()
                status = res.status
                try:
                    doc = json.loads(raw)
                except ValueError:
                    doc = {}
                err = doc.get("error")
                code = err.get("code") if isinstance(err, dict) else None
                answer = (started, time.monotonic(), status, code, doc.get("receipt"),
                          doc.get("result") if isinstance(doc.get("result"), str) else None)
                if res.getheader("connection", "").lower() == "close":
                    conn.close()
                    conn = None
            except (OSError, http.client.HTTPException) as e:
                if conn is not None:
                    conn.close()
                conn = None
                kind = "timeout" if isinstance(e, socket.timeout) else "no_answer"
                answer = (started, time.monotonic(), 0, kind, None, None)
                time.sleep(0.02)
            with self.lock:
                self.answers.append(answer)
            if self.pause:
                time.sleep(self.pause)

    def count(self):
        """Calls answered 200 so far."""
        with self.lock:
            return sum(1 for a in self.answers if a[2] == 200)

    def wait_for(self, n, limit=30):
        deadline = time.monotonic() + limit
        while self.count() < n and time.monotonic() < deadline:
            time.sleep(0.01)


def ledger_ids(ledger):
    """Every receipt id in the ledger, with how many rows each has."""
    if ledger.startswith("sqlite:"):
        db = sqlite3.connect(ledger[len("sqlite:"):])
        rows = db.execute("SELECT id, count(*) FROM receipts GROUP BY id").fetchall()
        db.close()
        return dict(rows)
    out = subprocess.run(["psql", "-qtAX", ledger, "-c",
                          "SELECT id, count(*) FROM receipts GROUP BY id"],
                         capture_output=True, text=True, check=True).stdout
    return {i: int(n) for i, n in (line.split("|") for line in out.split())}


def verify(bin, ledger):
    run = subprocess.run([bin, "ledger", "verify", "--ledger", ledger],
                         capture_output=True, text=True)
    return run.returncode == 0, (run.stdout + run.stderr).strip()


class Result:
    """One table row, and the expectations the scenario broke."""

    def __init__(self, name):
        self.name, self.problems = name, []
        self.made = self.answered = self.refused = self.unanswered = 0
        self.written = self.lost = 0
        self.recover = None
        self.codes = {}
        self.extra = ""
        self.skipped = None

    def tally(self, answers, bin, ledger):
        ids = ledger_ids(ledger)
        self.made += len(answers)
        for a in answers:
            status, code = a[2], a[3]
            if status == 200:
                self.answered += 1
                if not a[4]:
                    self.problems.append("a 200 without a receipt id")
                elif ids.get(a[4], 0) != 1:
                    self.lost += 1
            elif status:
                self.refused += 1
                self.codes[f"{status} {code}"] = self.codes.get(f"{status} {code}", 0) + 1
            else:
                self.unanswered += 1
                self.codes[code] = self.codes.get(code, 0) + 1
        self.written += len(ids)
        if self.lost:
            self.problems.append(f"{self.lost} acknowledged receipts missing from the ledger")
        if ledger.startswith("sqlite:"):
            db = sqlite3.connect(ledger[len("sqlite:"):])
            check = db.execute("PRAGMA integrity_check").fetchone()[0]
            db.close()
            if check != "ok":
                self.problems.append(f"the SQLite ledger fails its integrity check: {check}")
        ok, text = verify(bin, ledger)
        if not ok:
            self.problems.append(f"ledger verify failed: {text}")

    def expect(self, cond, what):
        if not cond:
            self.problems.append(what)


def skipped(name, why):
    r = Result(name)
    r.skipped = why
    return r


def first_ok_after(answers, t):
    """Seconds from `t` to the first 200 answered to a call started after it."""
    oks = [a[1] for a in answers if a[2] == 200 and a[0] >= t]
    return min(oks) - t if oks else None


# --- scenarios -------------------------------------------------------------------------

def kill9(ctx, ledger, label):
    """SIGKILL mid-load, restarted on the same ledger at once."""
    r = Result(f"kill -9 mid-load ({label})")
    server = Server(ctx.bin, ctx.work, ctx.site, ledger).start()
    load = Load([server.port])
    with load:
        time.sleep(ctx.secs / 2)
        killed = time.monotonic()
        server.kill9()
        server.start(wait=False)
        server.wait_ready()
        load.wait_for(load.count() + 200)
        time.sleep(ctx.secs / 2)
    server.stop()
    r.tally(load.answers, ctx.bin, ledger)
    r.recover = first_ok_after(load.answers, killed)
    r.expect(r.answered > 200, "too few calls answered to judge")
    return r


def full_disk(ctx, ledger_dir):
    """The ledger's file system fills up under load, then space returns."""
    r = Result("ledger disk full (sqlite)")
    ledger = f"sqlite:{ledger_dir}/ledger.sqlite"
    server = Server(ctx.bin, ctx.work, ctx.site, ledger).start()
    load = Load([server.port])
    ballast = os.path.join(ledger_dir, "ballast")
    with load:
        load.wait_for(200)
        with open(ballast, "wb") as f:
            try:
                while True:
                    f.write(b"\0" * 65536)
                    f.flush()
            except OSError:
                pass
        full_at = time.monotonic()
        time.sleep(ctx.secs / 2)
        full = [a for a in list(load.answers) if a[0] > full_at + 0.5]
        freed = time.monotonic()
        os.remove(ballast)
        time.sleep(ctx.secs / 2)
    server.stop()
    r.tally(load.answers, ctx.bin, ledger)
    r.recover = first_ok_after(load.answers, freed)
    # A call may still commit into space the ledger's files already hold (a 200 whose
    # receipt the tally then finds); every other one must be a clear 503.
    kinds = sorted(set((a[2], a[3]) for a in full))
    r.expect(any(a[2] == 503 for a in full) and
             all(a[2] == 200 or (a[2], a[3]) == (503, "unavailable") for a in full),
             f"while full: {kinds} (503 unavailable wanted)")
    r.expect(r.recover is not None, "no call answered after space returned")
    return r


def postgres_restart(ctx, admin):
    """PostgreSQL stopped for two seconds and started again under two dispatchers."""
    r = Result("PostgreSQL restart, 2 dispatchers")
    ledger = ctx.fresh_db(admin)
    servers = [Server(ctx.bin, ctx.work, ctx.site, ledger).start() for _ in range(2)]
    load = Load([s.port for s in servers])
    with load:
        load.wait_for(200)
        pg(ctx, "stop")
        down = time.monotonic()
        time.sleep(2)
        during = [a for a in list(load.answers) if a[0] > down + 0.2]
        pg(ctx, "start")
        up = time.monotonic()
        time.sleep(ctx.secs)
    for s in servers:
        r.expect(s.proc.poll() is None, f"dispatcher {s.port} exited")
        s.stop()
    r.tally(load.answers, ctx.bin, ledger)
    r.recover = first_ok_after(load.answers, up)
    r.expect(not any(a[2] == 200 for a in during), "a call answered 200 while PostgreSQL was down")
    r.expect(r.recover is not None, "no call answered after PostgreSQL came back")
    return r


def pg(ctx, action):
    subprocess.run(as_root(["pg_ctlcluster", ctx.cluster, "main", action]), check=True)
    if action == "start":
        for _ in range(100):
            if subprocess.run(["pg_isready", "-q", "-h", "127.0.0.1"]).returncode == 0:
                return
            time.sleep(0.1)


class Upstream:
    """A loopback HTTP server that misbehaves as told: `ok`, `hang`, `slow` (a byte a second)
    or `reset` (closes the connection with RST)."""

    def __init__(self):
        self.mode = "ok"
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(512)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while True:
            conn, _ = self.sock.accept()
            threading.Thread(target=self.serve, args=(conn,), daemon=True).start()

    def serve(self, conn):
        try:
            conn.recv(65536)
            mode = self.mode
            if mode == "hang":
                time.sleep(120)
            elif mode == "reset":
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\1\0\0\0\0\0\0\0")
            elif mode == "slow":
                body = b'{"ok": true, "padding": "' + b"x" * 100 + b'"}'
                conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                             + f"content-length: {len(body)}\r\n\r\n".encode())
                for byte in body:
                    conn.sendall(bytes([byte]))
                    time.sleep(1)
            else:
                body = b'{"ok": true}'
                conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                             + f"content-length: {len(body)}\r\nconnection: close\r\n\r\n".encode()
                             + body)
        except OSError:
            pass
        finally:
            conn.close()


def upstream(ctx, mode):
    """An http row whose upstream hangs, trickles or resets; ECHO called beside it."""
    r = Result(f"upstream {mode} (timeout 2 s)")
    up = Upstream()
    site = ctx.upstream_site(up.port)
    ledger = f"sqlite:{ctx.work}/upstream-{mode}.sqlite"
    server = Server(ctx.bin, ctx.work, site, ledger,
                    args=["--allow-egress", "loopback", "--upstream-timeout", "2s"]).start()
    bad = Load([server.port], key="FAULTS_UPSTREAM", clients=8, timeout=30, body="one")
    good = Load([server.port], clients=2)
    with good:
        good.wait_for(50)
        up.mode = mode
        broke = time.monotonic()
        with bad:
            time.sleep(ctx.secs)
        up.mode = "ok"
        healed = time.monotonic()
        # The breaker rests the origin for up to OPEN_FOR (10 s) before one call tries it.
        with Load([server.port], key="FAULTS_UPSTREAM", clients=1, timeout=30,
                  body="one", pause=0.1) as after:
            after.wait_for(1, limit=15)
    server.stop()
    r.tally(bad.answers + good.answers + after.answers, ctx.bin, ledger)
    r.recover = first_ok_after(after.answers, healed)
    slowest = max((a[1] - a[0] for a in bad.answers), default=0)
    r.expect(slowest < 2 + 1.5, f"a caller waited {slowest:.1f} s (row timeout 2 s)")
    named = [a for a in bad.answers if a[2] and a[2] != 200]
    r.expect(named and all(a[3] for a in named), "an upstream failure without an error code")
    r.expect(all(a[2] != 0 for a in bad.answers), "a caller got no answer at all")
    good_during = [a for a in good.answers if a[0] > broke]
    r.expect(good_during and all(a[2] == 200 for a in good_during),
             "ECHO failed while the upstream misbehaved")
    worst_echo = max((a[1] - a[0] for a in good_during), default=0)
    # Unaffected: ECHO never waits on the failing upstream (its timeout is 2 s).
    r.expect(worst_echo < 1.5, f"ECHO took {worst_echo:.2f} s while the upstream misbehaved")
    resting = sum(1 for a in bad.answers if a[3] == "breaker_open")
    r.expect(resting > 0, "the upstream breaker never opened")
    r.expect(r.recover is not None, "the row did not answer again after the upstream healed")
    r.extra = (f"{len(bad.answers)} calls to the failing row, {resting} refused at once by the "
               f"open breaker; slowest caller {slowest:.1f} s; ECHO worst "
               f"{worst_echo * 1000:.0f} ms")
    return r


def site_swap(ctx, follow):
    """Builds swapped into the live site under load, two catalogues in turn (the second has a
    row more), every fifth a broken catalogue whose build must fail and change nothing; with
    `follow`, the builds go to a static host the dispatcher follows instead."""
    r = Result("site swapped mid-load by " + ("follow updates" if follow else "local builds"))
    counts = {}
    catalogues = [ctx.catalogue_with(extra) for extra in (False, True)]
    broken = ctx.catalogue_with(False, broken=True)
    for i, c in enumerate(catalogues):
        site = os.path.join(ctx.work, f"probe-{follow}-{i}")
        subprocess.run([ctx.bin, "build", c, "--out", site], check=True, capture_output=True)
        counts[i] = snapshot_counts(site)
    built = os.path.join(ctx.work, f"swap-{'host' if follow else 'site'}")
    subprocess.run([ctx.bin, "build", catalogues[0], "--out", built], check=True,
                   capture_output=True)
    ledger = f"sqlite:{ctx.work}/swap-{follow}.sqlite"
    host = None
    if follow:
        host_port = free_port()
        host = subprocess.Popen([sys.executable, "-m", "http.server", "--bind", "127.0.0.1",
                                 str(host_port), "--directory", os.path.dirname(built)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.5)
        url = f"http://127.0.0.1:{host_port}/{os.path.basename(built)}/"
        server = Server(ctx.bin, ctx.work, os.path.join(ctx.work, "follower-site"), ledger,
                        args=["--follow", url, "--follow-interval", "1s"]).start()
    else:
        server = Server(ctx.bin, ctx.work, built, ledger).start()
    load = Load([server.port], clients=4)
    pages = Pages(server.port, set(counts.values()))
    builds = 20
    try:
        with load, pages:
            for i in range(builds):
                catalogue = broken if i % 5 == 4 else catalogues[i % 2]
                out = subprocess.run([ctx.bin, "build", catalogue, "--out", built],
                                     capture_output=True)
                if catalogue == broken:
                    r.expect(out.returncode != 0, "a broken catalogue built")
                time.sleep(1.5 if follow else 0.3)
    finally:
        server.stop()
        if host:
            host.terminate()
    r.tally(load.answers, ctx.bin, ledger)
    r.expect(all(a[2] == 200 for a in load.answers), "a call failed while builds swapped in")
    r.expect(not pages.bad, f"pages answered badly: {pages.bad[:3]}")
    r.expect(len(pages.seen) == 2, f"the dispatcher served {len(pages.seen)} of the 2 builds")
    r.recover = 0.0
    r.extra = (f"{builds} builds ({builds // 5} broken, refused); {pages.n} page, map and search "
               f"requests, {len(pages.bad)} bad; both builds served")
    return r


def snapshot_counts(site):
    db = sqlite3.connect(os.path.join(site, "catalogue.sqlite"))
    n = db.execute("SELECT count(*) FROM directory").fetchone()[0]
    db.close()
    return n


class Pages:
    """A client reading pages, the build's map and search while the site changes: every
    answer must be whole (200, JSON that parses, a page that ends) and the map one of the two
    builds' (by its row count)."""

    def __init__(self, port, builds):
        self.port, self.n, self.bad, self.builds = port, 0, [], builds
        self.seen = set()
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *_):
        self.stopping.set()
        self.thread.join()

    def check(self, path, status, body):
        if status != 200:
            return f"status {status}"
        if path == "/":
            return None if body.rstrip().endswith(b"</html>") else "a page cut short"
        try:
            doc = json.loads(body)
        except ValueError:
            return "JSON that does not parse"
        if "map=1" in path:
            rows = doc.get("counts", {}).get("rows", {}).get("value")
            self.seen.add(rows)
            if rows not in self.builds:
                return f"a map of {rows} rows, neither build's"
        return None

    def run(self):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        paths = ["/", "/k/ECHO.json", "/api/dispatch?map=1",
                 "/api/dispatch?ask=echo+text+back&format=json"]
        while not self.stopping.is_set():
            for path in paths:
                self.n += 1
                try:
                    conn.request("GET", path, headers={"x-owner-key": OWNER})
                    res = conn.getresponse()
                    why = self.check(path, res.status, res.read())
                except (OSError, http.client.HTTPException) as e:
                    why = repr(e)
                    conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
                if why:
                    self.bad.append((path, why))


class Context:
    def __init__(self, bin, secs, work):
        self.bin, self.secs, self.work = bin, secs, work
        self.site = os.path.join(work, "site")
        subprocess.run([bin, "build", os.path.join(ROOT, "catalogue"), "--out", self.site],
                       check=True, capture_output=True)
        self.dbs, self.admin, self.cluster = [], None, None

    def fresh_db(self, admin):
        name = f"capdir_faults_{os.getpid()}_{len(self.dbs)}"
        subprocess.run(["psql", "-q", admin, "-c", f"CREATE DATABASE {name}"], check=True)
        self.dbs.append(name)
        self.admin = admin
        base, _, query = admin.partition("?")
        return base.rsplit("/", 1)[0] + "/" + name + ("?" + query if query else "")

    def catalogue_with(self, extra, broken=False):
        """A copy of the bundled catalogue, with one row more when `extra`, or one row made
        unparseable when `broken`."""
        name = "broken" if broken else ("extra" if extra else "plain")
        catalogue = os.path.join(self.work, f"catalogue-{name}")
        if os.path.exists(catalogue):
            return catalogue
        shutil.copytree(os.path.join(ROOT, "catalogue"), catalogue)
        echo = os.path.join(catalogue, "ECHO.yaml")
        if extra:
            with open(echo) as f:
                text = f.read()
            with open(os.path.join(catalogue, "SWAP_MARKER.yaml"), "w") as f:
                f.write(text.replace("key: ECHO", "key: SWAP_MARKER"))
        if broken:
            with open(echo, "a") as f:
                f.write("\n: not yaml [\n")
        return catalogue

    def upstream_site(self, port):
        catalogue = os.path.join(self.work, f"upstream-catalogue-{port}")
        shutil.copytree(os.path.join(ROOT, "catalogue"), catalogue)
        with open(os.path.join(catalogue, "FAULTS_UPSTREAM.yaml"), "w") as f:
            f.write(UPSTREAM_ROW.format(port=port))
        site = os.path.join(self.work, f"upstream-site-{port}")
        subprocess.run([self.bin, "build", catalogue, "--out", site], check=True,
                       capture_output=True)
        return site

    def drop_dbs(self):
        for name in self.dbs:
            subprocess.run(["psql", "-q", self.admin, "-c",
                            f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"],
                           capture_output=True)


UPSTREAM_ROW = """\
key: FAULTS_UPSTREAM
type: http
target: "GET http://127.0.0.1:{port}/answer/$1"
category: bench
examples:
  - one
content: |
  # WHAT: Ask the faults bench's loopback upstream for its answer.
  # WHEN_TO_USE: Only in bench/faults.py, which makes the upstream misbehave.
  # ARGS: $1=any word
  # EX: one
  # OUTPUT: HTTP 200 with the upstream's JSON body.
"""


def table(results):
    head = ["fault", "calls made", "answered 200", "refused (named)", "no answer",
            "receipts written", "receipts lost", "time to recover"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in results:
        if r.skipped:
            print(f"| {r.name} | skipped: {r.skipped} |" + " |" * (len(head) - 2))
            continue
        recover = "n/a" if r.recover is None else f"{r.recover:.2f} s"
        print(f"| {r.name} | {r.made} | {r.answered} | {r.refused} | {r.unanswered} | "
              f"{r.written} | {r.lost} | {recover} |")
    print()
    for r in results:
        codes = ", ".join(f"{k}: {v}" for k, v in sorted(r.codes.items())) or "none"
        print(f"- {r.name}: refusals {codes}" + (f"; {r.extra}" if r.extra else ""))


def main():
    bin, secs = os.path.abspath(sys.argv[1]), float(sys.argv[2]) if len(sys.argv) > 2 else 6
    wanted = sys.argv[3:] or ["kill-sqlite", "kill-postgres", "disk-full", "postgres-restart",
                              "upstream-hang", "upstream-slow", "upstream-reset", "site-swap",
                              "follow-swap"]
    admin = os.environ.get("CAPDIR_BENCH_POSTGRES") or os.environ.get("CAPDIR_TEST_POSTGRES") \
        or "postgres://capdir:capdir@127.0.0.1:5432/capdir_test"
    work = tempfile.mkdtemp(prefix="capdir-faults.")
    ctx = Context(bin, secs, work)
    results, mounted = [], None
    try:
        for name in wanted:
            if name == "kill-sqlite":
                results.append(kill9(ctx, f"sqlite:{work}/kill.sqlite", "SQLite"))
            elif name == "kill-postgres":
                results.append(kill9(ctx, ctx.fresh_db(admin), "PostgreSQL"))
            elif name == "disk-full":
                mounted = os.path.join(work, "small-disk")
                os.mkdir(mounted)
                mount = subprocess.run(as_root(["mount", "-t", "tmpfs", "-o", "size=16m",
                                                "tmpfs", mounted]), capture_output=True)
                if mount.returncode != 0:
                    mounted = None
                    results.append(skipped("ledger disk full (sqlite)",
                                           "cannot mount a small tmpfs here (needs root)"))
                    continue
                if os.geteuid() != 0:
                    subprocess.run(as_root(["chown", str(os.getuid()), mounted]), check=True)
                results.append(full_disk(ctx, mounted))
            elif name == "postgres-restart":
                ctx.cluster = local_cluster()
                if ctx.cluster is None:
                    results.append(skipped("PostgreSQL restart, 2 dispatchers",
                                           "no local cluster to restart (pg_lsclusters)"))
                    continue
                results.append(postgres_restart(ctx, admin))
            elif name.startswith("upstream-"):
                results.append(upstream(ctx, name[len("upstream-"):]))
            elif name == "site-swap":
                results.append(site_swap(ctx, follow=False))
            elif name == "follow-swap":
                results.append(site_swap(ctx, follow=True))
            else:
                raise SystemExit(f"no scenario {name}")
            print(f"-- {results[-1].name}: done", file=sys.stderr)
    finally:
        # A scenario that failed midway must not leave PostgreSQL stopped for what runs next.
        if ctx.cluster and subprocess.run(["pg_isready", "-q", "-h", "127.0.0.1"]).returncode:
            pg(ctx, "start")
        ctx.drop_dbs()
        if mounted:
            subprocess.run(as_root(["umount", mounted]))
        if not os.environ.get("FAULTS_KEEP"):
            shutil.rmtree(work, ignore_errors=True)
    table(results)
    failed = [(r.name, p) for r in results for p in r.problems]
    for name, problem in failed:
        print(f"FAIL {name}: {problem}", file=sys.stderr)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
