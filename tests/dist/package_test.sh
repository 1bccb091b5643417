#!/usr/bin/env bash
# The Debian package of the dist build (dist.first_run): builds it with CPack, checks
# its metadata and contents with dpkg-deb, installs it into an empty root with
# `dpkg --root`, and runs the installed idem from there: --version, `idem demo`
# through libexec, the man pages, and `idem serve` on the packaged default config.
#   package_test.sh SOURCE_DIR DIST_BUILD_DIR
set -euo pipefail
src=$1
build=$2
# shellcheck source=common.sh
source "$(dirname "$0")/common.sh"

version=$(sed -n 's/^project(idem VERSION \([0-9.]*\).*/\1/p' "$src/CMakeLists.txt")
arch=$(dpkg --print-architecture)
ninja -C "$build" idem_man >/dev/null || fail "man pages (is help2man installed?)"
rm -f "$build"/idem_*.deb
(cd "$build" && cpack -G DEB >"$work/cpack.log" 2>&1) || { cat "$work/cpack.log" >&2; fail "cpack"; }
deb=$build/idem_${version}_${arch}.deb
[[ -f "$deb" ]] || fail "no $deb (cpack made: $(ls "$build"/*.deb 2>/dev/null))"

# Metadata.
info=$(dpkg-deb -I "$deb")
for field in "Package: idem" "Version: $version" "Architecture: $arch" "Section: net"; do
  grep -q "^ $field\$" <<<"$info" || fail "control has no '$field'"
done
grep -q '^ Depends: .*libc6' <<<"$info" || fail "no library Depends (dpkg-shlibdeps)"
for f in conffiles postinst prerm postrm; do
  grep -qE "^ +[0-9]+ bytes, +[0-9]+ lines +\*? *$f" <<<"$info" || fail "no control file $f"
done
[[ "$(dpkg-deb -f "$deb" Package)" == idem ]] || fail "dpkg-deb -f Package"
dpkg-deb --ctrl-tarfile "$deb" | tar -xO ./conffiles | grep -qx /etc/idem/idem.toml ||
  fail "/etc/idem/idem.toml is not a conffile"

# Contents.
contents=$(dpkg-deb -c "$deb" | awk '{print $6}')
for f in ./usr/bin/idem ./usr/lib/systemd/system/idem.service ./etc/idem/idem.toml \
         ./usr/share/bash-completion/completions/idem ./usr/share/man/man1/idem.1.gz \
         ./usr/share/man/man1/idem-serve.1.gz ./usr/share/man/man1/idem-migrate.1.gz \
         ./usr/share/man/man1/idem-inspect.1.gz ./usr/share/man/man1/idem-ttl.1.gz \
         ./usr/share/man/man1/idem-stuck.1.gz ./usr/share/man/man1/idem-demo.1.gz \
         ./usr/libexec/idem/idem-demo ./usr/libexec/idem/idem-worker; do
  grep -qx "$f" <<<"$contents" || fail "package has no $f"
done
! grep -qE '^\./usr/include|\.a$' <<<"$contents" || fail "the package carries the C++ dev files"
# The unit: its own user, state directory, config, hardening.
unit=$(dpkg-deb --fsys-tarfile "$deb" | tar -xO ./usr/lib/systemd/system/idem.service)
for line in "ExecStart=/usr/bin/idem serve --config /etc/idem/idem.toml" "DynamicUser=yes" \
            "StateDirectory=idem" "NoNewPrivileges=yes" "ProtectSystem=strict" "ProtectHome=yes"; do
  grep -qx "$line" <<<"$unit" || fail "idem.service has no '$line'"
done

# Install into an empty root and run it from there.
root=$work/root
mkdir -p "$root/var/lib/dpkg/updates" "$root/var/lib/dpkg/info"
touch "$root/var/lib/dpkg/status"
dpkg --root="$root" --force-depends --force-script-chrootless --force-not-root \
  --log=/dev/null -i "$deb" >"$work/dpkg.log" 2>&1 || { cat "$work/dpkg.log" >&2; fail "dpkg -i"; }
dpkg --root="$root" -s idem | grep -q '^Status: install ok installed' || fail "dpkg -s idem"
"$root/usr/bin/idem" --version | grep -qx "idem $version" || fail "installed idem --version"
"$root/usr/bin/idem" demo --help | grep -q 'refund' || fail "installed 'idem demo' (libexec/idem)"
zcat "$root/usr/share/man/man1/idem-serve.1.gz" | grep -q 'fB\\-\\-listen' || fail "idem-serve(1) lacks --listen"
zcat "$root/usr/share/man/man1/idem-serve.1.gz" | grep -q 'one binary' || fail "idem-serve(1) lacks its description"
# UTF-8 survives help2man: the em dash of the description.
zcat "$root/usr/share/man/man1/idem-serve.1.gz" | grep -q '—' || fail "idem-serve(1) lost its UTF-8"
zcat "$root/usr/share/man/man1/idem.1.gz" | grep -q 'serve' || fail "idem(1) lacks serve"
# Every subcommand `idem --help` lists has its page (purge and records had none).
subs=$("$root/usr/bin/idem" --help | awk '/^Subcommands:/ { on = 1; next } on && /^$/ { exit } on { print $1 }')
[[ -n $subs ]] || fail "installed idem --help lists no subcommands"
for sub in $subs; do
  [[ -f "$root/usr/share/man/man1/idem-$sub.1.gz" ]] || fail "no man page idem-$sub(1) for the subcommand $sub"
done
# The packaged config keeps serve's default store, the embedded RocksDB one.
grep -qx 'store = "rocksdb:///var/lib/idem/idem-db"' "$root/etc/idem/idem.toml" ||
  fail "the packaged config's store is not serve's default (rocksdb://)"
# The packaged config is valid: serve starts on it (the command line overrides its
# listen and store, which point at the service's own directories).
# IDEM_FAILPOINTS is for the crash tests of a test build: the packaged binary has no
# failpoints and ignores it (else a variable could SIGKILL a production server after
# every claim).
IDEM_FAILPOINTS=guard.after_claim_commit=kill \
  "$root/usr/bin/idem" serve --config "$root/etc/idem/idem.toml" --listen 127.0.0.1:0 \
  --store "rocksdb://$work/idem-db" >"$work/serve.out" 2>"$work/serve.err" &
pid=$!
wait_listening "$work/serve.out" "$work/serve.err" 100
grep -q '^listening on 127.0.0.1:' "$work/serve.out" || fail "serve on the packaged config did not listen"
port=$(sed -n 's/^listening on 127\.0\.0\.1:\([0-9]*\)$/\1/p' "$work/serve.out")
token=$(sed -n 's/^development tenant "dev", token: //p' "$work/serve.err")
code=$(curl -s -o /dev/null -w '%{http_code}' -X POST "http://127.0.0.1:$port/v1/claims" \
  -H "Authorization: Bearer $token" -d '{"biz_type":"refund","key":"K-1"}')
[[ "$code" == 201 ]] || fail "claim on the packaged server answered $code"
kill -0 "$pid" 2>/dev/null || fail "IDEM_FAILPOINTS killed the packaged server"
# The completion script loads and completes subcommands from the installed idem.
out=$(bash -c 'source "$1"; COMP_WORDS=("$2" se); COMP_CWORD=1; _idem; echo "${COMPREPLY[*]}"' _ \
  "$root/usr/share/bash-completion/completions/idem" "$root/usr/bin/idem")
[[ "$out" == serve ]] || fail "completion of 'idem se' gave '$out'"
out=$(bash -c 'source "$1"; COMP_WORDS=("$2" serve --lis); COMP_CWORD=2; _idem; echo "${COMPREPLY[*]}"' _ \
  "$root/usr/share/bash-completion/completions/idem" "$root/usr/bin/idem")
[[ "$out" == --listen ]] || fail "completion of 'idem serve --lis' gave '$out'"
echo "package: $(basename "$deb"), $(wc -l <<<"$contents") entries, installed with dpkg --root and run"
