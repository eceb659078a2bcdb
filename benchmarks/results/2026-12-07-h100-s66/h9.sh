# The clock question (RESULTS (ag)): series of 10..1000 calls and do_bench, ours (harness B) and cuDNN, D = 128, with
# nvidia-smi sampling the SM clock every 10 ms.
set -u
q=clocks_event_reasons.active
nvidia-smi --query-gpu=$q --format=csv,noheader > /dev/null 2>&1 || q=clocks_throttle_reasons.active
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,$q --format=csv,noheader -lms 10 > /tmp/clocks.csv 2>&1 &
SMI=$!
s=$SECONDS; timeout -k 5 120 python3 benchmarks/clock_probe.py time /tmp/hB > /tmp/probe.log 2>&1; echo "probe rc=$? in $((SECONDS - s)) s"
kill $SMI; sleep 0.2
python3 benchmarks/clock_probe.py summary /tmp/probe.log /tmp/clocks.csv > /tmp/probe_summary.txt 2>&1; cat /tmp/probe_summary.txt
tar -czf $OUT/probe.tgz -C /tmp probe.log clocks.csv probe_summary.txt
