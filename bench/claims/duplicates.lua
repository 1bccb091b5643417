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

-- done(): the RESULT line (report.lua, beside this script).
dofile(debug.getinfo(1, "S").source:match("^@?(.*/)") .. "report.lua")
