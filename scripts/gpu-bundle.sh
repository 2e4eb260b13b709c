#!/bin/sh
# Builds shardd with the CUDA backend (sm_90 machine code and compute_90
# PTX, which a newer GPU's driver compiles) and packs, into one folder
# (default build-gpu-bundle/, ignored by git), what a bare CUDA machine
# needs to run it: shardd, shardctl, the GPU tests and benches, and the
# shared libraries they load that such a machine lacks (gRPC, protobuf-c,
# libuv, SQLite, jansson, BLAS, libsystemd, zlib and what those need),
# found with ldd.  Left out: glibc, libstdc++, libgcc and the CUDA and
# driver libraries, which the GPU machine has (and cuBLAS, NCCL and NVML,
# which shardd loads at run time from there).  Binaries are stripped of
# debug info; the folder must stay under 64 MiB (the device tool's carry
# limit).  Then it proves the bundle starts from its folder with only
# LD_LIBRARY_PATH set (env -i).  docs/gpu.md says how it is used.
#   usage: scripts/gpu-bundle.sh [OUT_DIR]     (BUILD_DIR: default build-gpu)
set -eu
cd "$(dirname "$0")/.."
OUT=${1:-build-gpu-bundle}
BUILD=${BUILD_DIR:-build-gpu}
LIMIT_KB=$((64 * 1024))
TARGETS="shardd shardctl test_parity_tbe test_parity_net test_gpu_comm \
bench_kernels bench_net bench_quality"

[ -x /usr/local/cuda/bin/nvcc ] || command -v nvcc >/dev/null || {
    echo "gpu-bundle: no nvcc (CUDA toolkit) here" >&2
    exit 1
}
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DSHARDD_WERROR=ON \
    -DSHARDD_CUDA=ON -DBUILD_TESTING=ON \
    "-DCMAKE_CUDA_ARCHITECTURES=90-real;90-virtual" >/dev/null
# shellcheck disable=SC2086
cmake --build "$BUILD" -j"${JOBS:-2}" --target $TARGETS

rm -rf "$OUT"
mkdir -p "$OUT/lib"
for t in $TARGETS; do
    f=$(find "$BUILD" -maxdepth 2 -type f -name "$t" -perm -u+x | head -n 1)
    [ -n "$f" ] || {
        echo "gpu-bundle: $t was not built" >&2
        exit 1
    }
    cp "$f" "$OUT/$t"
    strip --strip-debug "$OUT/$t"
done

# Libraries the GPU machine has, or that shardd loads there at run time.
SYSTEM='^(linux-vdso|ld-linux|libc\.so|libm\.so|libpthread\.so|libdl\.so|librt\.so|libresolv\.so|libutil\.so|libstdc\+\+\.so|libgcc_s\.so|libcuda\.so|libcudart\.so|libnvidia-|libcublas|libcublasLt|libnccl\.so)'
for t in $TARGETS; do
    ldd "$OUT/$t" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r name path; do
    echo "$name" | grep -qE "$SYSTEM" && continue
    cp -L "$path" "$OUT/lib/$name"
    strip --strip-debug "$OUT/lib/$name" 2>/dev/null || true
done
# A library nobody resolved is a bundle that cannot start.
for t in $TARGETS; do
    if LD_LIBRARY_PATH="$OUT/lib" ldd "$OUT/$t" | grep -q 'not found'; then
        echo "gpu-bundle: $t misses libraries:" >&2
        LD_LIBRARY_PATH="$OUT/lib" ldd "$OUT/$t" | grep 'not found' >&2
        exit 1
    fi
done
cp scripts/gpu-check.sh scripts/gpu-tiers.sh "$OUT/"
# The models and policies compiled in for GPUs (gpu-check.sh measures their
# plans on the device it runs on, when one is this device's).
mkdir -p "$OUT/models"
cp models/cuda-*.sdcn models/cuda-*.sdpol "$OUT/models/"
{
    echo "shardd GPU bundle"
    echo "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (with local changes)')"
    echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(. /etc/os-release && echo "$PRETTY_NAME"), $(ldd --version | head -n 1)"
    echo "nvcc: $( (/usr/local/cuda/bin/nvcc --version || nvcc --version) 2>/dev/null | tail -n 1)"
    echo "cuda architectures: sm_90 (machine code), compute_90 (PTX)"
    echo "binaries: $TARGETS"
    echo "libraries:"
    ls "$OUT/lib" | sed 's/^/  /'
} >"$OUT/MANIFEST"

kb=$(du -sk "$OUT" | cut -f1)
echo "gpu-bundle: $OUT: $kb KiB ($(ls "$OUT/lib" | wc -l) libraries)"
if [ "$kb" -ge "$LIMIT_KB" ]; then
    echo "gpu-bundle: over the 64 MiB limit" >&2
    exit 1
fi
# It starts from its folder, with nothing but LD_LIBRARY_PATH.
(cd "$OUT" && env -i LD_LIBRARY_PATH="$PWD/lib" ./shardd --version &&
    env -i LD_LIBRARY_PATH="$PWD/lib" ./shardctl --help >/dev/null &&
    echo "gpu-bundle: shardd --version and shardctl --help start in env -i")
