set -u
s=$SECONDS; bash .device-tf/install.sh > /dev/null; echo "install rc=$? in $((SECONDS - s)) s"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl; echo "wheels rc=$?"
