# Sourced at the start of a GPU-machine run: installs the carried wheels (.whl, from
# ../shared/device/fetch-wheels.sh) and ptxfactory into /tmp/site, offline.
python3 -m pip install -q --disable-pip-version-check --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl 2>/dev/null || return 1
export PYTHONPATH=/tmp/site
python3 -m pip install -q --disable-pip-version-check --no-index --no-deps --no-build-isolation --upgrade --target /tmp/site . 2>/dev/null || return 1
export PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
