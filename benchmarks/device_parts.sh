#!/usr/bin/env bash
# TensorFlow for the lent GPU machine in parts that fit a device call beside this repository.
# ../shared/device/prepare.sh writes .device-tf/ with 60 MiB parts; a call carries at most 64 MiB,
# this repository's tracked files included (about 20 MB), so those parts no longer fit. This script
# runs prepare.sh (its download is cached), splits the same bytes into parts that leave room for the
# tracked tree and SPARE_MB more (untracked files that travel too), and lists the calls in
# .device-tf/calls.txt: one per part, then install.sh with the op library, back to back (the machine
# is given back 30 s after a call returns). install.sh joins /root/tfparts/part* in name order.
# Run from the repository root: bash benchmarks/device_parts.sh
set -euo pipefail
cd "$(dirname "$0")/.."
dest=.device-tf
bash ../shared/device/prepare.sh > /dev/null
tree=$(git ls-files -z | du -cb --files0-from=- | tail -1 | cut -f1)
part_mb=$(( (64 * 1024 * 1024 - tree) / 1024 / 1024 - ${SPARE_MB:-4} ))
(( part_mb >= 8 )) || { echo "device_parts: only ${part_mb} MiB per part beside a ${tree}-byte tree" >&2; exit 1; }
rm -rf "$dest/tfparts" && mkdir -p "$dest/tfparts"
cat "$dest"/part[0-9][0-9] | split -b "${part_mb}M" -d -a 2 - "$dest/tfparts/part_"
rm "$dest"/part[0-9][0-9]
{
  for p in "$dest"/tfparts/part_*; do
    echo "carry [\"$p\"]  command: mkdir -p /root/tfparts && mv $p /root/tfparts/"
  done
  echo "then, carrying $dest/install.sh, $dest/env.sh, $dest/small, $dest/stubs and the op library" \
       "(tf_flashattn/_tf_flashattn_ops*.so, tf_flashattn/_build_info.py): bash $dest/install.sh && . $dest/env.sh && ..."
} > "$dest/calls.txt"
echo "device_parts: $(ls "$dest"/tfparts | wc -l) parts of ${part_mb} MiB beside a tree of $((tree / 1024 / 1024)) MiB;" \
     "calls in $dest/calls.txt"
