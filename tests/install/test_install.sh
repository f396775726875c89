#!/bin/sh
# What an engine developer installs: `cmake --install` of this build into a temporary prefix,
# then examples/engine built against it with find_package(sjkv) (the engine and the C99 test of
# sjkv/sjkv.h) and run, and a C++ program using every installed library (consumer/); pkg-config finds the C library; the tools and tables are in place. Then
# cpack's Debian package: its control fields, the example built against its unpacked files, and
# apt's simulated install of it.
set -eu
build=$1; src=$2; dir=$3
rm -rf "$dir"; mkdir -p "$dir"
prefix="$dir/prefix"
for c in runtime dev; do cmake --install "$build" --prefix "$prefix" --component $c > /dev/null; done
for f in bin/sjkv-train bin/sjkv-encode bin/sjkv-replay include/sjkv/sjkv.h include/sjkv/config.h \
         include/sjkv/io/codebook.h share/sjkv/codebooks/gemma3-270m-3bit.sjcb share/sjkv/tablesets/gemma3-270m.json; do
  test -e "$prefix/$f" || { echo "not installed: $f" >&2; exit 1; }
done
lib=$(ls -d "$prefix"/lib*/ | head -1)
test -e "$lib/libsjkv.so" && test -e "$lib/libsjkv_codec.a" && test -e "$lib/cmake/sjkv/sjkvConfig.cmake"
# only the C interface leaves libsjkv.so
# (libstdc++'s unique inline objects, _ZZNSt..., cannot be hidden and are not ours)
exported() { nm -D --defined-only "$lib/libsjkv.so" | awk '{print $3}' | grep -v '^sjkv_' | grep -v '^_ZZNSt\|^_ZNSt' || true; }
if [ -n "$(exported)" ]; then
  echo "libsjkv.so exports more than sjkv_*:" >&2
  exported | head >&2
  exit 1
fi
PKG_CONFIG_PATH="$lib/pkgconfig" pkg-config --libs sjkv | grep -q -- "-lsjkv"
"$prefix/bin/sjkv-encode" --help > /dev/null

# $1: a CMake project of the tree, $2: its build folder, $3: the prefix the package is in. The
# project is built from a copy of its folder alone, as a user who copies it would build it.
build_against() {
  rm -rf "$2" "$2-src"
  cp -r "$src/$1" "$2-src"
  cmake -S "$2-src" -B "$2" -DCMAKE_PREFIX_PATH="$3" -DCMAKE_BUILD_TYPE=Release > "$2.log"
  cmake --build "$2" -j2 >> "$2.log"
}

run_example() {  # $1: prefix the package is in
  build_against examples/engine "$dir/ex" "$1"
  exlib=$(ls -d "$1"/lib*/ | head -1)
  # The C99 test of sjkv/sjkv.h, compiled as a C project would, with pkg-config's flags (the
  # .pc file finds its prefix where it lies: this prefix, or an unpacked package's).
  export PKG_CONFIG_PATH="$exlib/pkgconfig"
  inc=$(pkg-config --variable=includedir sjkv)
  [ "$(cd "$inc" && pwd -P)" = "$(cd "$1/include" && pwd -P)" ] || { echo "pkg-config: includedir $inc, not in $1" >&2; exit 1; }
  cc -std=c99 -pedantic -Wall -Wextra -Werror $(pkg-config --cflags sjkv) "$src/tests/capi/test_c99.c" \
     -o "$dir/ex/sjkv-c99" $(pkg-config --libs sjkv) -lm
  unset PKG_CONFIG_PATH
  LD_LIBRARY_PATH="$exlib" "$dir/ex/sjkv-c99"
  LD_LIBRARY_PATH="$exlib" "$dir/ex/sjkv-engine" | tee "$dir/engine.txt"
  LD_LIBRARY_PATH="$exlib" "$dir/ex/sjkv-engine" sj:4/4:tail=256/512 > "$dir/engine44.txt"
  # fewer bits, more error: the trellis 3/2t cache against the scalar 4/4 one
  e32=$(sed -n 's/.*against f32: \([0-9.e+-]*\) relative.*/\1/p' "$dir/engine.txt")
  e44=$(sed -n 's/.*against f32: \([0-9.e+-]*\) relative.*/\1/p' "$dir/engine44.txt")
  b32=$(sed -n 's/.*bits per value: \([0-9.]*\).*/\1/p' "$dir/engine.txt")
  b44=$(sed -n 's/.*bits per value: \([0-9.]*\).*/\1/p' "$dir/engine44.txt")
  awk -v a="$e32" -v b="$e44" -v x="$b32" -v y="$b44" 'BEGIN { exit !(a > b && x < y && x < 5) }' ||
    { echo "unexpected: 3/2t $b32 bits error $e32, 4/4 $b44 bits error $e44" >&2; exit 1; }
}
# Every installed C++ library through find_package: sjkv::codec, snapshot, replay, train,
# cluster and device, their headers and link interfaces (tests/install/consumer).
run_consumer() {  # $1: prefix the package is in
  build_against tests/install/consumer "$dir/consumer" "$1"
  "$dir/consumer/sjkv-consumer" | tee "$dir/consumer.txt"
  grep -q "^arm sj:3/2t:staging=q8_0:tail=512/1024" "$dir/consumer.txt"
  grep -q "^codebook 3-bit" "$dir/consumer.txt"
}
run_example "$prefix"
run_consumer "$prefix"

# The Debian package: made, its fields, its files usable as installed.
if command -v dpkg-deb > /dev/null && command -v cpack > /dev/null; then
  (cd "$dir" && cpack --config "$build/CPackConfig.cmake" -G DEB > cpack.log)
  deb=$(ls "$dir"/sjkv_*.deb)
  dpkg-deb -f "$deb" Package Version Depends > "$dir/deb.txt"
  grep -q "^Package: sjkv" "$dir/deb.txt"
  grep -q "^Depends: .*libhdf5" "$dir/deb.txt"
  dpkg-deb -c "$deb" | grep -q "./usr/lib/.*/cmake/sjkv/sjkvConfig.cmake\|./usr/lib/cmake/sjkv/sjkvConfig.cmake"
  dpkg-deb -x "$deb" "$dir/deb"
  run_example "$dir/deb/usr"
  run_consumer "$dir/deb/usr"
  # apt resolves its dependencies from this machine's Debian sources (a simulation: nothing installed)
  if command -v apt-get > /dev/null; then
    apt-get install --simulate "$deb" > "$dir/apt.txt" 2>&1 || { cat "$dir/apt.txt" >&2; exit 1; }
    grep -q "^Inst sjkv " "$dir/apt.txt"
  fi
fi
