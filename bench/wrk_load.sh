# Sourced by bench/dispatch.sh and bench/dispatch_ab.sh: one timed wrk load and the CPU the
# server spent on it.

# CPU ticks (user + system) a process has used; a wrapper script execs, so the pid holds.
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# One load of SECONDS on PORT against the server PID, 32 connections, bench/post.lua.
# Prints: requests/s p50-ms p99-ms errors requests server-CPU-µs-per-request
load() {
  local port="$1" pid="$2" secs="$3" hz before after rps p50 p99 err n
  hz=$(getconf CLK_TCK)
  before=$(ticks "$pid")
  read -r _ rps p50 p99 err n < <(wrk -t2 -c32 -d"${secs}s" -s bench/post.lua \
    "http://127.0.0.1:$port/api/dispatch" | grep '^RESULT')
  after=$(ticks "$pid")
  echo "$rps $p50 $p99 $err $n $(( (after - before) * 1000000 / hz / (n > 0 ? n : 1) ))"
}

# Wait until each PORT answers a POST to /api/dispatch (with any status: the bare handler and
# the dispatcher both do), at most 10 s each.
ready() {
  local port
  for port in "$@"; do
    for _ in $(seq 100); do
      curl -s -o /dev/null -XPOST -H 'content-type: application/json' \
        "http://127.0.0.1:$port/api/dispatch" -d '{}' && break
      sleep 0.1
    done
  done
}
