#!/usr/bin/env bash
# scripts/install-deps.sh while another package manager holds the dpkg lock (issue 44): it waits,
# says what for, and then either goes on or fails with a clear error. A fake apt-get on PATH
# answers as apt 2.6 does while the lock is held (a stub lock file in a temporary folder); fake
# dpkg-query, sudo and curl make every package missing and keep the network out.
set -euo pipefail
script=${1:?usage: install_deps_lock.sh path/to/scripts/install-deps.sh}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/bin" "$work/data"
cat >"$work/bin/apt-get" <<'EOF'
#!/usr/bin/env bash
echo "apt-get $*" >>"$FAKE_APT_LOG"
if [ -n "${FAKE_APT_FAIL:-}" ]; then echo "E: $FAKE_APT_FAIL" >&2; exit 100; fi
if [ -e "$FAKE_LOCK" ]; then
  echo "E: Could not get lock /var/lib/dpkg/lock-frontend. It is held by process 4242 (unattended-upgr)" >&2
  echo "E: Unable to acquire the dpkg frontend lock (/var/lib/dpkg/lock-frontend), is another process using it?" >&2
  exit 100
fi
exit 0
EOF
printf '#!/bin/sh\nexit 1\n' >"$work/bin/dpkg-query"
printf '#!/bin/sh\nexec "$@"\n' >"$work/bin/sudo"
printf '#!/bin/sh\nexit 6\n' >"$work/bin/curl"
chmod +x "$work/bin/"*
export PATH="$work/bin:$PATH" XDG_DATA_HOME="$work/data" FAKE_LOCK="$work/lock-frontend" FP8S_APT_LOCK_POLL=1
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
expect() {  # expect NAME FILE PATTERN: FILE has a line matching PATTERN
  grep -qE "$3" "$2" || fail "$1: no line matching '$3' in: $(cat "$2")"
}

# 1. held throughout: waits FP8S_APT_LOCK_WAIT seconds, says so once, then one clear error
touch "$FAKE_LOCK"
export FAKE_APT_LOG="$work/apt1.log"
start=$SECONDS
rc=0
FP8S_APT_LOCK_WAIT=3 "$script" 2>"$work/err1" || rc=$?
took=$((SECONDS - start))
((rc != 0)) || fail "held lock: exit 0"
((took >= 3)) || fail "held lock: gave up after ${took} s, before the 3 s wait"
((took < 30)) || fail "held lock: still waiting after ${took} s"
expect "held lock" "$work/err1" "waiting for the package manager's lock \(held by process 4242 \(unattended-upgr\)\)"
expect "held lock" "$work/err1" "error: the package manager's lock is still held by process 4242 \(unattended-upgr\) after 3 s"
[ "$(grep -c "waiting for" "$work/err1")" = 1 ] || fail "held lock: the waiting message is not said exactly once"
grep -q "install" "$FAKE_APT_LOG" && fail "held lock: apt-get install ran although update never got the lock"

# 2. released after 2 s: waits, then updates and installs
touch "$FAKE_LOCK"
export FAKE_APT_LOG="$work/apt2.log"
(sleep 2; rm -f "$FAKE_LOCK") &
rc=0
FP8S_APT_LOCK_WAIT=60 "$script" 2>"$work/err2" || rc=$?
wait
((rc == 0)) || fail "released lock: exit $rc: $(cat "$work/err2")"
expect "released lock" "$work/err2" "waiting for the package manager's lock"
expect "released lock" "$FAKE_APT_LOG" "^apt-get update"
expect "released lock" "$FAKE_APT_LOG" "^apt-get install .*libtorch-dev"

# 3. any other apt error: no waiting, apt's message and a clear error at once
export FAKE_APT_LOG="$work/apt3.log" FAKE_APT_FAIL="Unable to locate package libtorch-dev"
rc=0
start=$SECONDS
FP8S_APT_LOCK_WAIT=60 "$script" 2>"$work/err3" || rc=$?
((rc != 0)) || fail "other error: exit 0"
((SECONDS - start < 10)) || fail "other error: waited"
expect "other error" "$work/err3" "Unable to locate package libtorch-dev"
expect "other error" "$work/err3" "error: apt-get update failed"
grep -q "waiting for" "$work/err3" && fail "other error: said it was waiting for a lock"

((failures == 0)) && echo "install-deps waits for a held dpkg lock: 3 cases passed"
exit $((failures > 0))
