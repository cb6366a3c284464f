#!/usr/bin/env bash
# moves.sh: the package moves and renames of issue 17 (items 3 and 7),
# done mechanically so that they can be re-run on a tree that has changed
# since (other branches merged): every path below is rewritten wherever it
# appears, in Go files, docs, scripts and the python client's tests.
#
#   internal/identity         -> api/identity                        (package identity)
#   internal/security/replay  -> internal/security/antireplay        (package replay -> antireplay)
#   internal/coldtier         -> internal/cold/tier                  (package coldtier -> tier)
#   internal/servertest       -> internal/server/servertest          (package servertest)
#   internal/etcdtest         -> internal/control/etcdmember/etcdtest (package etcdtest)
#   internal/hot/policy       -> internal/policy                     (package policy: the hot
#                                store and the simulator share it; the CLI's config check
#                                links it and must not link internal/hot)
#
# For each move it git-mvs the directory (if it is still at the old path),
# renames the package clause and doc comment and its sentinel prefixes,
# rewrites the import path in every Go file, rewrites the package
# qualifier (old.X -> new.X) in the files that import the package, rewrites
# the path in non-Go text files (STATUS-*.md reports are history and keep
# their paths), and finally gofmt's the Go files it changed (gofmt sorts the
# import block again). Re-running it on a moved tree changes nothing.
#
# Usage: scripts/dev/moves.sh   (from anywhere inside the repository)
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"

mod=github.com/gpucache/gpucache
changed=()

# go_files lists the tracked and untracked (not ignored) Go files.
go_files() { git ls-files -co --exclude-standard -- '*.go'; }
# text_files lists the other text files that may name a package path.
text_files() {
	git ls-files -co --exclude-standard -- '*.md' '*.py' '*.json' '*.sh' '*.yaml' '*.yml' '*.txt' 'scripts/*' '.ci/*' |
		grep -v -E -e '(^|/)STATUS-[^/]*\.md$' -e '^scripts/dev/moves\.sh$' || true
}

# qual is a regexp prefix that matches where a package qualifier may start:
# not after a dot or a word character (c.replay.X is a field, not the package).
qual='(^|[^.A-Za-z0-9_])'

# move OLD NEW OLDPKG NEWPKG NEWPREFIX
# NEWPREFIX replaces "gpucache/OLDPKG: " in the package's sentinel errors.
move() {
	local old=$1 new=$2 oldpkg=$3 newpkg=$4 newprefix=$5
	if [[ -d $old && ! -d $new ]]; then
		mkdir -p "$(dirname "$new")"
		git mv "$old" "$new"
	elif [[ -d $old ]]; then
		echo "moves.sh: both $old and $new exist; merge them by hand" >&2
		exit 1
	fi
	[[ -d $new ]] || { echo "moves.sh: $new missing" >&2; exit 1; }

	# The package itself: clause, doc comment, sentinel prefixes.
	if [[ $oldpkg != "$newpkg" ]]; then
		local f
		for f in "$new"/*.go; do
			sed -i -E \
				-e "s/^package ${oldpkg}(_test)?\$/package ${newpkg}\\1/" \
				-e "s|^// Package ${oldpkg} |// Package ${newpkg} |" \
				-e "s|\"gpucache/${oldpkg}: |\"${newprefix}: |g" \
				-e "s/${qual}${oldpkg}\\.([A-Za-z])/\\1${newpkg}.\\2/g" \
				"$f"
			changed+=("$f")
		done
	fi

	# Importers: the import path, and the qualifier where the name changes.
	local f
	while IFS= read -r f; do
		[[ -n $f ]] || continue
		if grep -q "\"$mod/$old\"" "$f"; then
			sed -i -e "s|\"$mod/$old\"|\"$mod/$new\"|" "$f"
			if [[ $oldpkg != "$newpkg" ]]; then
				sed -i -E "s/${qual}${oldpkg}\\.([A-Za-z])/\\1${newpkg}.\\2/g" "$f"
			fi
			changed+=("$f")
		fi
	done < <(go_files | grep -v "^$new/")
	# Paths in comments and test fixtures of every Go file, and in text files.
	# A relative path (../security/replay/testdata) is rewritten only where
	# the package stays beside its old parent, so that ../ still reaches it.
	local rel=$old relnew=$new
	if [[ $(dirname "$old") == "$(dirname "$new")" ]]; then
		rel=${old#internal/} relnew=${new#internal/}
	fi
	while IFS= read -r f; do
		[[ -n $f ]] || continue
		if grep -q -E -e "$old\\b" -e "\\.\\./$rel/" "$f"; then
			sed -i -E -e "s#(^|[^a-z])$old\\b#\\1$new#g" -e "s#\\.\\./$rel/#../$relnew/#g" "$f"
			if [[ $f == *.go ]]; then changed+=("$f"); fi
		fi
	done < <(go_files; text_files)
	# Python tests join path components.
	local oldq newq
	oldq=$(printf '"%s", ' ${old//\// }) newq=$(printf '"%s", ' ${new//\// })
	while IFS= read -r f; do
		[[ -n $f ]] || continue
		if grep -q -F "$oldq" "$f"; then sed -i "s|$oldq|$newq|g" "$f"; fi
	done < <(git ls-files -co --exclude-standard -- '*.py')
}

move internal/identity api/identity identity identity gpucache/identity
move internal/security/replay internal/security/antireplay replay antireplay gpucache/antireplay
move internal/coldtier internal/cold/tier coldtier tier gpucache/cold/tier
move internal/servertest internal/server/servertest servertest servertest gpucache/servertest
move internal/etcdtest internal/control/etcdmember/etcdtest etcdtest etcdtest gpucache/etcdtest
move internal/hot/policy internal/policy policy policy gpucache/policy

# Lists of the security subpackages name the renamed one.
sed -i -e 's/ratelimit, replay, seal/ratelimit, antireplay, seal/' README.md
sed -i -e 's/ratelimit (token buckets), replay (stamps and the/ratelimit (token buckets), antireplay (stamps and the/' internal/security/guard.go

# The tier package's main file is named for its package.
for f in coldtier coldtier_test; do
	if [[ -f internal/cold/tier/$f.go ]]; then
		git mv "internal/cold/tier/$f.go" "internal/cold/tier/${f/coldtier/tier}.go"
	fi
done

# Bare mentions of the renamed packages in comments ("coldtier/quota.go",
# "under coldtier").
while IFS= read -r f; do
	[[ -n $f ]] || continue
	if grep -q -w -e coldtier "$f"; then
		sed -i -E -e 's#\bcoldtier/#cold/tier/#g' -e "s#${qual}coldtier\\.([A-Z])#\\1tier.\\2#g" -e 's#\bcoldtier\b#cold/tier#g' "$f"
		if [[ $f == *.go ]]; then changed+=("$f"); fi
	fi
done < <(go_files; text_files)

# A file listed before a later move took it away is formatted at its new
# path: format only what is still there, plus the moved packages.
fmt=()
for f in "${changed[@]}"; do
	if [[ -f $f ]]; then fmt+=("$f"); fi
done
fmt+=(api/identity/*.go internal/security/antireplay/*.go internal/cold/tier/*.go internal/server/servertest/*.go internal/control/etcdmember/etcdtest/*.go internal/policy/*.go)
printf '%s\n' "${fmt[@]}" | sort -u | xargs gofmt -w
echo "moves.sh: done; now run: go build ./... && go vet ./..."
