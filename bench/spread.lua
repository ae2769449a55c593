-- wrk script: POST one invocation of ECHO with the owner key, each wrk thread on its own
-- dispatcher, round robin over the ports in CAPDIR_BENCH_PORTS ("18101 18102"). wrk merges
-- the threads' latencies, so p50/p99 cover every dispatcher at once (bench/ledger.sh).
wrk.method = "POST"
wrk.body = '{"key": "ECHO", "body": "hello from wrk"}'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["x-owner-key"] = os.getenv("CAPDIR_OWNER_KEY") or "bench-owner"

local addrs = nil
local next_thread = 0

function setup(thread)
  if addrs == nil then
    addrs = {}
    for port in string.gmatch(os.getenv("CAPDIR_BENCH_PORTS") or "", "%d+") do
      table.insert(addrs, wrk.lookup("127.0.0.1", port)[1])
    end
  end
  thread.addr = addrs[(next_thread % #addrs) + 1]
  next_thread = next_thread + 1
end

-- RESULT requests/s p50-ms p99-ms errors answers status-errors. `answers` counts every
-- response wrk read, whatever its status; `status-errors` those above 399 (counted in `errors`
-- too, with connect, read, write and timeout errors). The dispatcher sends no 1xx or 3xx, so
-- answers - status-errors is how many calls were acknowledged with a 2xx.
done = function(summary, latency, requests)
  io.write(string.format("RESULT %.1f %.3f %.3f %d %d %d\n",
    summary.requests / (summary.duration / 1e6),
    latency:percentile(50) / 1000, latency:percentile(99) / 1000,
    summary.errors.status + summary.errors.connect + summary.errors.read
      + summary.errors.write + summary.errors.timeout,
    summary.requests, summary.errors.status))
end
