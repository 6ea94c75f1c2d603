#!/bin/bash
# duplicate pairs among shipped Go code only: copy the shipped files to a scratch tree and run duplicates there
src=${1:-.}
d=$(mktemp -d)
(cd $src && git ls-files '*.go' | grep -v -E '_test\.go$|\.pb\.go$|^(bench|deploy|examples|jepsen-like-tests)/' | while read f; do mkdir -p $d/$(dirname $f); cp $f $d/$f; done)
(cd $src && git ls-files --others --exclude-standard '*.go' | grep -v -E '_test\.go$|\.pb\.go$|^(bench|deploy|examples|jepsen-like-tests)/' | while read f; do mkdir -p $d/$(dirname $f); cp $f $d/$f; done)
duplicates --repo $d --most 200 --seconds 120
rm -rf $d
