# Sourced by the bench scripts that start `idem serve` (claims.sh, profile_claims.sh,
# switches.sh): what each did the same way.

# free_port: prints a TCP port free on 127.0.0.1 now.
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# complete_key PORT KEY: claims KEY (biz_type bench, tenant token "bench") on the
# `idem serve` at PORT and completes it, so later claims of KEY are duplicates.
complete_key() {
  local port=$1 key=$2 token
  token=$(curl -s -X POST -H "Authorization: Bearer bench" -d "{\"biz_type\":\"bench\",\"key\":\"$key\"}" \
    "http://127.0.0.1:$port/v1/claims" | sed -n 's/.*"token":\([0-9]*\).*/\1/p')
  curl -s -o /dev/null -X POST -H "Authorization: Bearer bench" \
    -d "{\"biz_type\":\"bench\",\"key\":\"$key\",\"token\":$token,\"result\":{\"ok\":true}}" \
    "http://127.0.0.1:$port/v1/claims/complete"
}

# serve_setup NAME: for a script that starts `idem serve`: a fresh work directory
# build/NAME in $work, a free port in $port, and the bench tenant's environment
# (token "bench"; IDEM_BENCH_KEY, the key bench/claims/duplicates.lua repeats).
serve_setup() {
  work=$PWD/build/$1
  rm -rf "$work"
  mkdir -p "$work"
  port=$(free_port)
  export IDEM_TOKEN=bench IDEM_TENANTS="bench:bench" IDEM_BENCH_KEY=dup
}
