-- wrk script: POST one invocation with the owner key (bench/dispatch.sh, bench/flow.sh): of
-- ECHO, or of the row named by CAPDIR_BENCH_KEY; with the token CAPDIR_BENCH_TOKEN when set
-- (bench/budget.sh).
wrk.method = "POST"
wrk.body = '{"key": "' .. (os.getenv("CAPDIR_BENCH_KEY") or "ECHO") .. '", "body": "hello from wrk"}'
wrk.headers["Content-Type"] = "application/json"
local token = os.getenv("CAPDIR_BENCH_TOKEN")
if token and token ~= "" then
  wrk.headers["Authorization"] = "Bearer " .. token
else
  wrk.headers["x-owner-key"] = os.getenv("CAPDIR_OWNER_KEY") or "bench-owner"
end

done = function(summary, latency, requests)
  io.write(string.format("RESULT %.1f %.3f %.3f %d %d\n",
    summary.requests / (summary.duration / 1e6),
    latency:percentile(50) / 1000, latency:percentile(99) / 1000,
    summary.errors.status + summary.errors.connect + summary.errors.read
      + summary.errors.write + summary.errors.timeout,
    summary.requests))
end
