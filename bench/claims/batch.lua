-- wrk: every request claims IDEM_BENCH_BATCH new keys (default 100) in one
-- POST /v1/claims/batch, keys unique across threads and runs:
-- "<run>-<thread>-<request>-<i>". IDEM_TOKEN is the bearer token. The RESULT line's
-- rps counts requests; bench/claims.sh multiplies it by the batch size for keys/s.
local counter = 0
local thread_id = 0
local run = os.getenv("IDEM_BENCH_RUN") or tostring(os.time())
local token = os.getenv("IDEM_TOKEN") or "bench"
local size = tonumber(os.getenv("IDEM_BENCH_BATCH") or "100")
local headers = {["Content-Type"] = "application/json", ["Authorization"] = "Bearer " .. token}

function setup(thread)
  thread_id = thread_id + 1
  thread:set("id", thread_id)
end

function request()
  counter = counter + 1
  local items = {}
  for i = 1, size do
    items[i] = string.format('{"op":"claim","biz_type":"bench","key":"%s-%d-%d-%d","fingerprint":"fp"}',
                             run, id, counter, i)
  end
  return wrk.format("POST", "/v1/claims/batch", headers,
                    '{"requests":[' .. table.concat(items, ",") .. ']}')
end

-- done(): the RESULT line (report.lua, beside this script).
dofile(debug.getinfo(1, "S").source:match("^@?(.*/)") .. "report.lua")
