#!/bin/sh
# Builds the Java SDK with plain javac + jar (no Maven needed; Maven Central is not required):
#   sdk/java/build.sh [OUT]          (default OUT: sdk/java/build)
# OUT/orbit-sdk.jar          the SDK (dev.orbit.sdk), from src/main/java
# OUT/orbit-conformance.jar  the conformance worker (src/conformance/java)
# OUT/orbit-examples.jar     the OrderProcessing example (examples/orders)
# OUT/test-classes           the unit tests (src/test/java; run dev.orbit.sdk.TestMain)
# The JSON library is Gson: GSON_JAR (default Debian's /usr/share/java/gson.jar).
set -eu
DIR=$(cd "$(dirname "$0")" && pwd)
OUT=${1:-"$DIR/build"}
GSON=${GSON_JAR:-/usr/share/java/gson.jar}
[ -f "$GSON" ] || { echo "gson not found at $GSON (Debian: apt-get install libgoogle-gson-java)" >&2; exit 3; }
rm -rf "$OUT/classes" "$OUT/conformance-classes" "$OUT/example-classes" "$OUT/test-classes"
mkdir -p "$OUT/classes" "$OUT/conformance-classes" "$OUT/example-classes" "$OUT/test-classes"
JAVAC="javac --release 17 -encoding UTF-8 -Xlint:all -Werror"
$JAVAC -cp "$GSON" -d "$OUT/classes" $(find "$DIR/src/main/java" -name '*.java')
jar --create --file "$OUT/orbit-sdk.jar" -C "$OUT/classes" .
$JAVAC -cp "$OUT/orbit-sdk.jar:$GSON" -d "$OUT/conformance-classes" $(find "$DIR/src/conformance/java" -name '*.java')
jar --create --file "$OUT/orbit-conformance.jar" -C "$OUT/conformance-classes" .
$JAVAC -cp "$OUT/orbit-sdk.jar:$GSON" -d "$OUT/example-classes" $(find "$DIR/examples" -name '*.java')
jar --create --file "$OUT/orbit-examples.jar" -C "$OUT/example-classes" .
if [ -d "$DIR/src/test/java" ] && [ -n "$(find "$DIR/src/test/java" -name '*.java')" ]; then
  # The tests are in the SDK's package (they reach package-private parts).
  $JAVAC -cp "$OUT/classes:$GSON" -d "$OUT/test-classes" $(find "$DIR/src/test/java" -name '*.java')
fi
echo "built $OUT"
