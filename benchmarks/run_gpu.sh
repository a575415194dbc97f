#!/usr/bin/env bash
# Every GPU measurement in one go, each benchmark in its own process with its own time limit, so a
# slow or failing one costs only its own figures:
#
#   bash benchmarks/run_gpu.sh OUT_DIR [benchmark ...]     # default: all of them, in this order
#
# Writes OUT_DIR/<benchmark>.json (fullsize rows) or .log, and prints each table as it finishes.
# services: the zoo tabs' service calls on the CPU, then on the GPU, compared (gpu_services.py).
# FULLSIZE_ARGS (e.g. "--repeats 3") is passed to every fullsize run.
# hub_walk: the app in hub mode on full-size stand-ins, every tab's main action (hub_walk.py); it
# writes ~40 GB of random weights under OUT_DIR/hub-cache and is not in the default list.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: run_gpu.sh OUT_DIR [benchmark ...]}
shift
mkdir -p "$out"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
benches=("$@")
[ ${#benches[@]} -eq 0 ] && benches=(scan_check services lrp sae_index sae_contrast sae_steer mathneuro nemo pissa)
declare -A limit=([scan_check]=90 [services]=240 [lrp]=180 [sae_index]=120 [sae_contrast]=120 [sae_steer]=150 [mathneuro]=150 [nemo]=480 [pissa]=240 [hub_walk]=1800)
threads=$(nproc)
status=0
for b in "${benches[@]}"; do
  t=${limit[$b]:-180}
  echo "=== $b (limit ${t}s) $(date -u +%H:%M:%S)"
  if [ "$b" = scan_check ]; then
    timeout "$t" python3 -m benchmarks.scan_check 2>&1 | tee "$out/$b.log"
  elif [ "$b" = hub_walk ]; then
    timeout "$t" python3 -m benchmarks.hub_walk --scale full --cache "$out/hub-cache/hub" --json "$out/$b.json" \
      2>&1 | grep -v "Writing model" | tee "$out/$b.log"
  elif [ "$b" = services ]; then
    timeout "$t" bash -c "WORKBENCH_DEVICE=cpu python3 -m benchmarks.gpu_services --json '$out/services-cpu.json' >/dev/null 2>&1;
      python3 -m benchmarks.gpu_services --json '$out/services.json' --compare '$out/services-cpu.json'" 2>&1 \
      | grep -v "Loading\|it/s" | tee "$out/$b.log"
  else
    # shellcheck disable=SC2086
    timeout "$t" python3 -m benchmarks.fullsize --only "$b" --threads "$threads" --json "$out/$b.json" \
      ${FULLSIZE_ARGS:-} 2>&1 | tee "$out/$b.log"
  fi
  rc=${PIPESTATUS[0]}
  [ "$rc" -ne 0 ] && { echo "=== $b exit $rc"; status=1; }
done
exit $status
