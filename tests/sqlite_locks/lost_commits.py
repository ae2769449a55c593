import sqlite3, os, sys, subprocess, signal
read_files = sys.argv[1] == "read"
db = "db.sqlite"
c = sqlite3.connect(db, isolation_level=None)
c.execute("PRAGMA journal_mode=WAL"); c.execute("PRAGMA synchronous=FULL")
c.execute("CREATE TABLE IF NOT EXISTS r(i INTEGER)")
c.execute("PRAGMA wal_autocheckpoint=0")
for i in range(100): c.execute("INSERT INTO r VALUES (?)", (i,))
if read_files:
    # What the static handler did: open, read and close the live files from this process.
    for f in [db, db + "-wal", db + "-shm"]:
        with open(f, "rb") as fh: fh.read()
# Another process (a CLI run on the same ledger) opens, reads, closes.
subprocess.run([sys.executable, "-c", "import sqlite3; c=sqlite3.connect('db.sqlite'); print('p2 sees', c.execute('select count(*) from r').fetchone()[0]); c.close()"], check=True)
for i in range(100, 200): c.execute("INSERT INTO r VALUES (?)", (i,))
print("p1 committed", c.execute("select count(*) from r").fetchone()[0], "wal exists:", os.path.exists(db + "-wal"))
os.kill(os.getpid(), signal.SIGKILL)
