#!/usr/bin/env bash
# What markers cost by density (bench/sgemm_density.cu), on a GPU machine with
# a built tree: each kernel compiled out (smprof_bench_sgemm_off), with idle
# markers (smprof_bench_sgemm, plain run; without and with SMPROF_CONTEXT())
# and recording under smprof-run (without and with the context), in
# interleaved rounds; best of 10 launches by CUDA events, ratio against
# compiled out.
#
# Under smprof-run the CUDA-event time also holds whatever the injector does
# between the start event and the launch, so the kernel's own time is read
# from the trace too: the CUPTI span of each launch ("X" event on the launch's
# "kernel (CUPTI)" track, the only events whose args carry "correlation_id";
# collector.cc OnLaunch), shortest of the run. The run summary instant in the
# trace tells how many events were recorded and whether any were lost.
#
# The trace of one recording run is up to tens of GB (k16 at n=4096: ~34 M
# events per launch; smem32 at n=4096: ~200 M, more than --buffer-mb 1024
# holds, so those runs report losses). It is streamed through a FIFO and
# filtered on the fly (the writer puts one JSON object per line), never
# stored. The collector handles roughly 9 M events/s (docs/performance.md),
# which bounds the recording runs: by that rate the default set takes about
# 15 minutes (an estimate); pass fewer sizes or kernels to split it.
#
#   bench/sgemm_figures.sh [build-dir] [sizes (default "2048 4096")] [kernels (default "loop k64 k16 smem32")]
set -u
build="${1:-build}"
sizes="${2:-2048 4096}"
kernels="${3:-loop k64 k16 smem32}"
bin="$build/bin"
reps=10
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fifo="$tmp/trace.json"
failures=0

# Reads the filtered trace lines: the shortest CUPTI span of a gemm kernel in
# ms, the number of such spans, the events the run recorded, and what was
# lost (empty if nothing), tab-separated.
cat >"$tmp/trace_figures.py" <<'EOF'
import json, sys

spans, summary = [], None
with open(sys.argv[1]) as lines:
    for line in lines:
        line = line.strip().rstrip(",")
        try:
            e = json.loads(line)
        except ValueError:
            continue
        args = e.get("args", {})
        if e.get("name") == "smprof run summary":
            summary = args
        # "note": CUPTI reported no activity, the span is bounds from events.
        elif e.get("ph") == "X" and "correlation_id" in args and "gemm_" in e.get("name", "") and "note" not in args:
            spans.append(e["dur"] / 1000.0)  # trace times are in us
best = "%.3f" % min(spans) if spans else "nan"
if summary is None:
    print("%s\t%d\t0\tno run summary in the trace" % (best, len(spans)))
    sys.exit()
lost = summary.get("lost", {})
parts = ["%s %d" % (k.replace("_", " "), lost.get(k, 0))
         for k in ("device_buffer", "device_unplaced", "transport", "orphan") if lost.get(k, 0)]
problems = ["%s %d" % (k, summary[k]) for k in ("producers_incomplete", "framing_errors", "malformed_messages",
                                                 "registry_full", "transport_unread_messages") if summary.get(k)]
note = "LOST %d (%s)" % (lost.get("total", 0), ", ".join(parts)) if lost.get("total", 0) else ""
if problems:
    note = "; ".join(filter(None, [note, ", ".join(problems)]))
print("%s\t%d\t%d\t%s" % (best, len(spans), summary.get("events", 0), note))
EOF

# Runs one benchmark command; prints its best time in ms, or "nan" after
# reporting the failure on stderr.
measure() {
  local limit="$1" out rc
  shift
  out=$(timeout "$limit" "$@" 2>&1)
  rc=$?
  local ms
  ms=$(printf '%s\n' "$out" | sed -n 's/.*: best \([0-9.]*\) ms over.*/\1/p')
  if [ "$rc" -ne 0 ] || [ -z "$ms" ]; then
    echo "  FAILED (exit $rc): $*" >&2
    printf '%s\n' "$out" | tail -5 | sed 's/^/    /' >&2
    echo nan
    return 1
  fi
  echo "$ms"
}

# One recording run with context flag $1; sets rec_ms, trace_ms, spans,
# events and lost. The FIFO is held open here (fd 3) for the run, so the
# reader ends at EOF whether or not the collector ever opened it.
record() {
  rm -f "$fifo"
  mkfifo "$fifo"
  timeout 600 grep -F -e '"correlation_id"' -e '"smprof run summary"' <"$fifo" >"$tmp/lines" &
  local reader=$!
  exec 3<>"$fifo"
  rec_ms=$(measure 480 "$bin/smprof-run" -q --force --buffer-mb 1024 -o "$fifo" -- \
    "$bin/smprof_bench_sgemm" "$kernel" "$1" "$n" "$reps" 3>&-) || failures=$((failures + 1))
  exec 3>&-
  wait "$reader"
  IFS=$'\t' read -r trace_ms spans events lost <<<"$(timeout 120 python3 "$tmp/trace_figures.py" "$tmp/lines")"
  : "${trace_ms:=nan}" "${spans:=0}" "${events:=0}"
  [ "$spans" = "$reps" ] || lost="${lost:+$lost; }$spans of $reps kernel spans in the trace"
}

# "x1.005": time $1 against compiled out ($2).
ratio() {
  awk -v t="$1" -v base="$2" 'BEGIN { if (t + 0 > 0 && base + 0 > 0) printf "x%.3f", t / base; else printf "x-" }'
}

# A time to 3 decimals ("nan" as it is).
ms() { awk -v t="$1" 'BEGIN { if (t + 0 > 0) printf "%.3f", t; else printf "%s", t }'; }

# "12.3M"
count() {
  awk -v c="$1" 'BEGIN {
    if (c >= 1e6) printf "%.1fM", c / 1e6; else if (c >= 1e3) printf "%.1fK", c / 1e3; else printf "%d", c }'
}

for n in $sizes; do
  for kernel in $kernels; do
    echo "== $kernel n=$n: best of $reps launches in ms (CUDA events; trace: shortest CUPTI kernel span)," \
      "3 interleaved rounds; ratios against compiled out"
    for round in 1 2 3; do
      off=$(measure 120 "$bin/smprof_bench_sgemm_off" "$kernel" 0 "$n" "$reps") || failures=$((failures + 1))
      idle=$(measure 120 "$bin/smprof_bench_sgemm" "$kernel" 0 "$n" "$reps") || failures=$((failures + 1))
      idle_ctx=$(measure 120 "$bin/smprof_bench_sgemm" "$kernel" 1 "$n" "$reps") || failures=$((failures + 1))
      record 0
      rec="$(ms "$rec_ms") ($(ratio "$rec_ms" "$off"), trace $trace_ms)"
      rec_events=$events rec_lost=$lost
      record 1
      rec_ctx="$(ms "$rec_ms") ($(ratio "$rec_ms" "$off"), trace $trace_ms)"
      printf 'n=%s %s round %d: off %s | idle %s (%s) | idle ctx %s (%s) | rec %s | rec ctx %s\n' \
        "$n" "$kernel" "$round" "$(ms "$off")" "$(ms "$idle")" "$(ratio "$idle" "$off")" \
        "$(ms "$idle_ctx")" "$(ratio "$idle_ctx" "$off")" "$rec" "$rec_ctx"
      printf '  recorded in %d launches: rec %s events, %s | rec ctx %s events, %s\n' "$reps" \
        "$(count "$rec_events")" "${rec_lost:-none lost}" "$(count "$events")" "${lost:-none lost}"
    done
  done
done
[ "$failures" -eq 0 ] || { echo "$failures run(s) failed" >&2; exit 1; }
