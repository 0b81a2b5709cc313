#!/usr/bin/env bash
# Build the Fleet app's debug APK with buildozer (python-for-android). Needs a machine that can reach
# the Android SDK, the NDK and python-for-android (buildozer downloads them on the first run), Java 17,
# and `pip install buildozer==1.6.0 cython`. The APK lands in android-build/bin/.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(dirname "$here")"
src="$here/build/src"

# Stage only what the phone runs: the client library with the app, the wire protocol, the entry point.
rm -rf "$src"
mkdir -p "$src"
cp -r "$repo/client" "$repo/fleet_protocol" "$src/"
cp "$here/main.py" "$src/main.py"
find "$src" -name "__pycache__" -type d -prune -exec rm -rf {} +

cd "$here"
if ! command -v buildozer >/dev/null; then
    echo "buildozer is not installed: pip install buildozer==1.6.0 cython" >&2
    exit 1
fi
buildozer -v android debug
ls -l bin/*.apk
