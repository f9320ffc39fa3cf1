#!/bin/sh
# Builds the C# SDK with Mono's mcs (no NuGet, no dotnet): the library Orbit.Sdk.dll, the
# conformance worker Orbit.Conformance.exe, the OrderProcessing example Orbit.Examples.Orders.exe,
# the shared-cluster spread worker Orbit.Examples.Spread.exe and the unit test runner
# Orbit.Sdk.Tests.exe, into OUT (default: build/), with Debian's Newtonsoft.Json copied next to
# them. Run the programs with `mono OUT/<name>.exe`.
#
#   sh build.sh [OUT [PROGRAM…]]     PROGRAM: conformance, orders, spread, tests (default: all four)
#
# Needs Debian's mono-complete (mcs, mono) and libnewtonsoft-json-cil-dev.
set -eu
cd "$(dirname "$0")"
OUT=${1:-build}
[ $# -gt 0 ] && shift
WANT=${*:-conformance orders spread tests}
wants() { case " $WANT " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
mkdir -p "$OUT"
JSON=${NEWTONSOFT_JSON_DLL:-}
if [ -z "$JSON" ]; then
  JSON=$(pkg-config --libs newtonsoft-json 2>/dev/null | sed -n 's/.*-r:\([^ ]*\).*/\1/p')
fi
if [ -z "$JSON" ] || [ ! -f "$JSON" ]; then
  for f in /usr/lib/cli/Newtonsoft.Json-*/Newtonsoft.Json.dll; do [ -f "$f" ] && JSON=$f; done
fi
if [ -z "$JSON" ] || [ ! -f "$JSON" ]; then
  echo "build.sh: Newtonsoft.Json.dll not found (Debian: apt-get install libnewtonsoft-json-cil-dev)" >&2
  exit 3
fi
cp "$JSON" "$OUT/Newtonsoft.Json.dll"
MCS="mcs -nologo -debug -warnaserror+ -sdk:4.7.2"
$MCS -target:library -out:"$OUT/Orbit.Sdk.dll" -doc:"$OUT/Orbit.Sdk.xml" -nowarn:1591 \
  -r:"$OUT/Newtonsoft.Json.dll" -r:System.Net.Http.dll src/Orbit.Sdk/*.cs
if wants conformance; then
  $MCS -target:exe -out:"$OUT/Orbit.Conformance.exe" \
    -r:"$OUT/Orbit.Sdk.dll" -r:"$OUT/Newtonsoft.Json.dll" conformance/*.cs
fi
if wants orders; then
  $MCS -target:exe -out:"$OUT/Orbit.Examples.Orders.exe" \
    -r:"$OUT/Orbit.Sdk.dll" -r:"$OUT/Newtonsoft.Json.dll" examples/Orders/*.cs
fi
if wants spread; then
  $MCS -target:exe -out:"$OUT/Orbit.Examples.Spread.exe" \
    -r:"$OUT/Orbit.Sdk.dll" -r:"$OUT/Newtonsoft.Json.dll" examples/Spread/*.cs
fi
if wants tests; then
  $MCS -target:exe -out:"$OUT/Orbit.Sdk.Tests.exe" \
    -r:"$OUT/Orbit.Sdk.dll" -r:"$OUT/Newtonsoft.Json.dll" -r:System.Net.Http.dll tests/*.cs
fi
