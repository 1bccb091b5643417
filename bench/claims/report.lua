-- The one result line bench/claims.sh reads, for every wrk script of bench/claims/:
--   RESULT rps=… p50_ms=… p99_ms=… errors=…
function done(summary, latency, requests)
  io.write(string.format("RESULT rps=%.1f p50_ms=%.3f p99_ms=%.3f errors=%d\n",
                         summary.requests / (summary.duration / 1e6),
                         latency:percentile(50) / 1000, latency:percentile(99) / 1000,
                         summary.errors.status + summary.errors.connect + summary.errors.read +
                           summary.errors.write + summary.errors.timeout))
end
