#!/usr/bin/env bash
# Install Melting Pot's substrates without its bots, on a machine that reaches only package
# registries (docs/envs.md, "Melting Pot", says why and how).
#
# dm-meltingpot is an sdist whose build downloads meltingpot-assets-<v>.tar.gz (the background bots,
# TensorFlow saved models) from storage.googleapis.com. The substrates need none of it: the build is
# given an empty assets tarball, and the wheel is installed with its requirements except TensorFlow
# (RLlib imports TensorFlow whenever it is installed; marl's adapter never needs it).
set -euo pipefail
version="${1:-2.4.1}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
pip download --no-deps --no-binary :all: "dm-meltingpot==$version" -d "$work"
tar -xzf "$work"/dm_meltingpot-"$version".tar.gz -C "$work"
src="$work/dm_meltingpot-$version"
[ -d "$src" ] || src="$work/dm-meltingpot-$version"
assets_version="$(sed -n "s/^ASSETS_VERSION = '\(.*\)'/\1/p" "$src/setup.py")"
mkdir -p "$work/empty/assets" "$src/assets"
tar -czf "$src/assets/meltingpot-assets-$assets_version.tar.gz" -C "$work/empty" assets
pip wheel --no-deps -w "$work/wheels" "$src"
# dm-meltingpot's requirements (its setup.py), TensorFlow left out on purpose.
pip install absl-py chex dm-env dm-tree "dmlab2d>=1.0" immutabledict ml-collections networkx \
    opencv-python pandas pygame-ce reactivex
pip install --no-deps "$work"/wheels/dm_meltingpot-*.whl
python -c "from marl.envs.meltingpot import meltingpot_module; meltingpot_module('substrate'); print('Melting Pot substrates import')"
