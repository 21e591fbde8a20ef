#!/bin/sh
# The Korean message catalogue against the code (ctest po_complete):
#  1. po/ko.po is a valid PO file (msgfmt --check);
#  2. every sentence the code passes to tr / trc / t / T has a translation there (xgettext extracts them, msgcmp
#     compares); entries looked up at run time (msgctxt "placement") are not extracted and may stand unused;
#  3. no Korean text is left in C++ outside comments (it belongs in the catalogue).
# Needs GNU gettext (apt-get install gettext); without it the check is skipped (exit 77) with the reason.
set -eu
export LC_ALL=C.UTF-8
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
for tool in msgfmt xgettext msgcmp; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "SKIP: $tool not found (apt-get install gettext): the catalogue is not checked"
    exit 77
  fi
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
msgfmt --check -o /dev/null po/ko.po
find src cli python -name '*.cpp' | sort > "$tmp/files"
xgettext --from-code=UTF-8 --language=C++ -k -kt:1 -ktr:2 -kT:2 -ktrc:2c,3 --files-from="$tmp/files" -o "$tmp/messages.pot"
if ! msgcmp po/ko.po "$tmp/messages.pot" 2> "$tmp/msgcmp.txt"; then
  # each missing sentence with the source lines that use it (the .pot's "#:" comment above its msgid)
  grep 'used but not defined' "$tmp/msgcmp.txt" | sed 's|^[^:]*:\([0-9]*\):.*|\1|' | while read -r line; do
    awk -v n="$line" 'NR >= n - 3 && NR <= n + 1' "$tmp/messages.pot"; echo
  done
  echo "FAIL: po/ko.po lacks a Korean wording for the sentences above (add them; msgfmt --check -o /dev/null po/ko.po)"
  exit 1
fi
echo "po/ko.po: $(grep -c '^msgid ' "$tmp/messages.pot") sentences in the code, every one translated"
# Korean outside comments: strip // comments, then look for Hangul syllables.
if find src cli python -name '*.cpp' -o -name '*.h' | xargs sed 's|//.*||' | grep -nP '[\x{AC00}-\x{D7A3}]' > "$tmp/hangul.txt"; then
  find src cli python \( -name '*.cpp' -o -name '*.h' \) -print0 | xargs -0 grep -nP '^(?:(?!//).)*[\x{AC00}-\x{D7A3}]'
  echo "FAIL: Korean text in C++ (put it in po/ko.po and call tr)"
  exit 1
fi
echo "no Korean text in C++ outside comments"
