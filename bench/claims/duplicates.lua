-- wrk: every request claims the same completed key (the duplicate path: 200
-- replayed). bench/claims.sh claims and completes IDEM_BENCH_KEY first.
local token = os.getenv("IDEM_TOKEN") or "bench"
local key = os.getenv("IDEM_BENCH_KEY") or "dup"
local body = string.format('{"biz_type":"bench","key":"%s"}', key)

function request()
  return wrk.format("POST", "/v1/claims",
                    {["Content-Type"] = "application/json", ["Authorization"] = "Bearer " .. token},
                    body)
end

function done(summary, latency, requests)
  io.write(string.format("RESULT rps=%.1f p50_ms=%.3f p99_ms=%.3f errors=%d\n",
                         summary.requests / (summary.duration / 1e6),
                         latency:percentile(50) / 1000, latency:percentile(99) / 1000,
                         summary.errors.status + summary.errors.connect + summary.errors.read +
                           summary.errors.write + summary.errors.timeout))
end
