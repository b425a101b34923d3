#!/usr/bin/env bash
# scripts/bench-baseline.sh — what `make bench-baseline REV=...` does: build
# the webhookd binary of a git revision, the baseline that
# `make bench BASELINE=bin/webhookd-base` measures alternately with
# bin/webhookd.
#
# Usage: scripts/bench-baseline.sh REV [OUT]   (OUT defaults to bin/webhookd-base)
#
# The revision is checked out in a temporary clone that borrows this
# repository's objects (git clone --shared: nothing is copied, and nothing in
# this repository, its branches or its worktree list changes) and built there
# with -buildvcs=true, so that the binary records its revision and the bench
# report can name it. (A `git worktree add` checkout would not do: the go
# command stamps a revision only under a .git directory, and a linked
# worktree has a .git file.) The clone is removed however the build ends.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
if ! command -v "${GO:-go}" >/dev/null 2>&1; then
	export PATH="$PATH:/usr/local/go/bin"
fi
GO=${GO:-go}

rev=${1:-}
out=${2:-bin/webhookd-base}
if [ -z "$rev" ]; then
	echo 'bench-baseline: say which revision, e.g. make bench-baseline REV=fc972c5' >&2
	exit 2
fi
if ! commit=$(git rev-parse --verify --quiet "$rev^{commit}"); then
	echo "bench-baseline: $rev is not a commit of this repository" >&2
	exit 2
fi

mkdir -p "$(dirname "$out")"
out_abs="$(cd "$(dirname "$out")" && pwd)/$(basename "$out")"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/webhookd-baseline.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

git clone --quiet --shared --no-checkout . "$tmp/src"
git -C "$tmp/src" checkout --quiet --detach "$commit"
echo "bench-baseline: building ${commit:0:7} into $out"
(cd "$tmp/src" && "$GO" build -buildvcs=true -o "$out_abs" ./cmd/webhookd)
if ! "$GO" version -m "$out_abs" | grep -q "vcs.revision=$commit"; then
	echo "bench-baseline: warning: $out does not record its revision; the report will say so" >&2
fi
