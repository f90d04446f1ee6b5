# queue_vfork.sh -- a vfork/posix_spawn-style child (it shares its parent's memory, not its descriptor
# table) that closes its descriptors while its parent has a connect queued (issue 23) must not end the
# parent's queued connect: Python's subprocess does exactly that (vfork, close_range(3, ~0) for
# close_fds, exec). The parent's connect must complete as soon as the permit is free, not fail with
# ETIMEDOUT at wait_timeout_ms + 5 s. Nothing is left in Redis.
. "$(dirname "$0")/../lib/harness.sh"
. "$ROOT/tests/lib/qbreak.sh"
qb_setup

qb_run vfork
h_note "vfork child closed its descriptors: the parent's queued connect was ready $(qb_fact vfork q-ready-ms) ms after the release"
qb_clean vfork

# the same from Python: subprocess.run while a non-blocking connect is queued
if [ -z "${SAN:-}" ]; then
    cat >"$T/sub.py" <<'PY'
import errno, select, socket, subprocess, sys, time
up = ("127.0.0.1", int(sys.argv[1]))
holder = socket.create_connection(up)            # the only permit
s = socket.socket(); s.setblocking(False)
r = s.connect_ex(up)
print("connect", errno.errorcode.get(r, r))
subprocess.run(["true"], check=True)               # vfork + close_range(3, ~0) + exec, in the child
holder.close()
t = time.monotonic()
p = select.poll(); p.register(s, select.POLLOUT)
ev = p.poll(5000)
print("ready", ev[0][1] if ev else 0, "after-ms", int((time.monotonic() - t) * 1000),
      "soerror", s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR))
PY
    LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/q.conf" timeout 30 python3 "$T/sub.py" "$QB_UP" >"$T/sub.out" 2>"$T/sub.err"
    h_note "python subprocess.run while queued: $(tr '\n' ' ' <"$T/sub.out")"
    grep -q '^connect EINPROGRESS' "$T/sub.out" || qb_bad "python: the connect was not queued: $(cat "$T/sub.out" "$T/sub.err")"
    read -r _ ev _ ms _ soerr < <(grep '^ready' "$T/sub.out")
    [ "${ev:-0}" = 4 ] && [ "${soerr:-x}" = 0 ] ||
        qb_bad "python: after subprocess.run the queued connect did not complete within 5 s of the release (revents ${ev:-0}, SO_ERROR ${soerr:-?})"
    qb_clean python
fi
qb_done
