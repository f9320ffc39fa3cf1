#!/bin/sh
# Builds the Java SDK with plain javac + jar (no Maven needed; Maven Central is not required):
#   sdk/java/build.sh [OUT]          (default OUT: sdk/java/build)
# OUT/orbit-sdk.jar          the SDK (dev.orbit.sdk), from src/main/java
# OUT/orbit-conformance.jar  the conformance worker (src/conformance/java)
# OUT/orbit-examples.jar     the OrderProcessing example (examples/orders)
# OUT/test-classes           with WITH_TESTS=1, the unit tests (src/test/java; run dev.orbit.sdk.TestMain)
# The JSON library is Gson: GSON_JAR (default Debian's /usr/share/java/gson.jar).
set -eu
DIR=$(cd "$(dirname "$0")" && pwd)
OUT=${1:-"$DIR/build"}
GSON=${GSON_JAR:-/usr/share/java/gson.jar}
[ -f "$GSON" ] || { echo "gson not found at $GSON (Debian: apt-get install libgoogle-gson-java)" >&2; exit 3; }
rm -rf "$OUT/classes" "$OUT/test-classes"
mkdir -p "$OUT/classes" "$OUT/test-classes"
# One javac run for the SDK, the conformance worker and the example (a JVM start is the most of
# a build this small), on a quick-starting JVM; then one jar each.
JAVAC="javac -J-XX:+UseSerialGC -J-XX:TieredStopAtLevel=1 --release 17 -encoding UTF-8 -Xlint:all -Werror"
$JAVAC -cp "$GSON" -d "$OUT/classes" $(find "$DIR/src/main/java" "$DIR/src/conformance/java" "$DIR/examples" -name '*.java')
jar --create --file "$OUT/orbit-sdk.jar" -C "$OUT/classes" dev/orbit/sdk
jar --create --file "$OUT/orbit-conformance.jar" -C "$OUT/classes" dev/orbit/conformance
jar --create --file "$OUT/orbit-examples.jar" -C "$OUT/classes" dev/orbit/examples
if [ "${WITH_TESTS:-0}" = 1 ]; then
  # The tests are in the SDK's package (they reach package-private parts).
  $JAVAC -cp "$OUT/classes:$GSON" -d "$OUT/test-classes" $(find "$DIR/src/test/java" -name '*.java')
fi
echo "built $OUT"
