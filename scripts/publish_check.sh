#!/usr/bin/env bash
# Both packages built from their .crate files as crates.io would build them
# (`cargo publish --dry-run --workspace`): the command's against the
# library's package, which cargo serves from a local registry under
# target/package/ while the library is not yet published.
#
# Cargo unpacks that package once into
# $CARGO_HOME/registry/src/-<hash of the registry's path>/pd-stitch-<version>
# and, while the unpacked folder is marked done (.cargo-ok), reuses it
# without looking at the new .crate: a registry's crates never change. Ours
# does, at one version, from commit to commit. So on a machine that ran this
# step before at the same path, a clean clone built the command against the
# library as it was then (a CI run failed so: E0432, `pd_stitch::sim::Engine`
# not found, the command being newer than the stale library). The unpacked
# copies of this workspace's packages go first, and after the run the
# library's copy must be this tree's src/, or the step fails.
set -euo pipefail
cd "$(dirname "$0")/.."
registry_src=${CARGO_HOME:-$HOME/.cargo}/registry/src
version=$(cargo pkgid -p pd-stitch | sed 's/.*[#@]//')
# Local registries have no name: their folders are "-" and the hash.
rm -rf "$registry_src"/-*/pd-stitch-"$version" "$registry_src"/-*/pd-stitch-cli-"$version"
cargo publish --dry-run --workspace --locked "$@"
mapfile -t unpacked < <(ls -d "$registry_src"/-*/pd-stitch-"$version" 2>/dev/null)
if [ "${#unpacked[@]}" -ne 1 ]; then
    echo "expected the library's package unpacked once under $registry_src, found ${#unpacked[@]}" >&2
    exit 1
fi
if ! diff -rq src "${unpacked[0]}/src"; then
    echo "the command was verified against a library other than this tree's (${unpacked[0]})" >&2
    exit 1
fi
echo "both packages build from their .crate files; the command against this tree's library"
