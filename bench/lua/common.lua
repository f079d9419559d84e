-- Shared by every bench script (prepended by bench/loadgen.py): thread bookkeeping and the one
-- BENCH_JSON line the bench parses. Latencies are in microseconds, as wrk records them.
local all_threads = {}
local thread_count = 0

function setup(thread)
  thread:set("tid", thread_count)
  thread_count = thread_count + 1
  table.insert(all_threads, thread)
end

function done(summary, latency, requests)
  local loops, flow = 0, 0
  for _, t in ipairs(all_threads) do
    loops = loops + (t:get("loops") or 0)
    flow = flow + (t:get("flow_errors") or 0)
  end
  local e = summary.errors
  local p = function(q) return math.floor(latency:percentile(q)) end
  io.write(string.format(
    'BENCH_JSON {"requests":%d,"duration_us":%d,"bytes":%d,"errors_connect":%d,"errors_read":%d,' ..
    '"errors_write":%d,"errors_status":%d,"errors_timeout":%d,"errors_flow":%d,"lat_p50":%d,' ..
    '"lat_p90":%d,"lat_p99":%d,"lat_mean":%.1f,"lat_max":%d,"loops":%d}\n',
    summary.requests, summary.duration, summary.bytes, e.connect, e.read, e.write, e.status, e.timeout,
    flow, p(50), p(90), p(99), latency.mean, math.floor(latency.max), loops))
end
