set -u
source .ci/device-setup.sh >/dev/null 2>&1 || { echo setup failed; exit 1; }
export PTXFACTORY_HOME=/tmp/ptxf-home
rm -rf /tmp/probe && cp -r examples/rope /tmp/probe && cd /tmp/probe
sed -i 's/^sizes = \[{ T = 32768.*$/sizes = [{ T = 4096, H = 64, D = 256 }, { T = 4096, H = 63, D = 256 }, { T = 4096, H = 64, D = 240 }, { T = 4100, H = 64, D = 256 }]/' rope.cu.toml
grep -n "^sizes" rope.cu.toml
COLUMNS=220 timeout -k 30 100 ptxfactory optimise rope.cu --kernel rope --max-seconds 55 > $OUT/cli-probe.txt 2>&1; tail -3 $OUT/cli-probe.txt
cp ptxfactory-out/rope/report.md $OUT/report-probe.md
n=$(grep -o '^| \*\*[0-9]*\*\* ★' ptxfactory-out/rope/report.md | grep -o '[0-9]*' | head -1); echo "best $n"
COLUMNS=200 timeout 120 ptxfactory profile rope.cu -k rope --candidate $n > $OUT/profile-best.txt 2>&1; tail -60 $OUT/profile-best.txt
