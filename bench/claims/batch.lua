-- wrk: every request claims IDEM_BENCH_BATCH new keys (default 100) in one
-- POST /v1/claims/batch, keys unique across threads and runs: "<key>-<i>" for a
-- fresh key of fresh_keys.lua. The RESULT line's rps counts requests;
-- bench/claims.sh multiplies it by the batch size for keys/s.
local here = debug.getinfo(1, "S").source:match("^@?(.*/)")
dofile(here .. "fresh_keys.lua")
local size = tonumber(os.getenv("IDEM_BENCH_BATCH") or "100")

function request()
  local prefix = next_key()
  local items = {}
  for i = 1, size do
    items[i] = string.format(
      '{"op":"claim","biz_type":"bench","key":"%s-%d","fingerprint":"fp"}', prefix, i)
  end
  return wrk.format("POST", "/v1/claims/batch", headers,
                    '{"requests":[' .. table.concat(items, ",") .. ']}')
end

-- done(): the RESULT line (report.lua, beside this script).
dofile(here .. "report.lua")
