-- wrk (bench/rss.sh): every request claims a random key the fill finished,
-- fill-0 … fill-(IDEM_BENCH_RECORDS-1): duplicates spread over the whole store, so
-- the reads go through RocksDB's block cache and files, not just the L1.
local token = os.getenv("IDEM_TOKEN") or "bench"
local records = tonumber(os.getenv("IDEM_BENCH_RECORDS") or "1000000")

function setup(thread)
  thread:set("seed", math.random(1, 1000000))
end

function init(args)
  math.randomseed(seed)
end

function request()
  local body = string.format('{"biz_type":"bench","key":"fill-%d"}', math.random(0, records - 1))
  return wrk.format("POST", "/v1/claims",
                    {["Content-Type"] = "application/json", ["Authorization"] = "Bearer " .. token},
                    body)
end

dofile(debug.getinfo(1, "S").source:match("^@?(.*/)") .. "claims/report.lua")
